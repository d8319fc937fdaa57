"""Bad input: one clear WorkloadError naming file, line, column, value and what was expected; exit status 2 from
the CLI with one line on stderr; nothing already written damaged. And a fuzz test of every parser."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_error, write_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.errors import WorkloadError
from servesim.workloads import load_trace, make_table
from servesim.workloads.table import RequestTable

VIDUR = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


write, error = write_file, load_error


def test_missing_column(tmp_path):
    path = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,4808\n")
    msg = error(path, format="azure")
    assert "line 1: no column 'GeneratedTokens' (format azure); columns present: TIMESTAMP, ContextTokens" in msg


def test_misspelled_column_suggests_the_right_one(tmp_path):
    path = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedToken\n2023-11-16 18:17:03.9,4808,10\n")
    assert "no column 'GeneratedTokens' (did you mean 'GeneratedToken'?)" in error(path, format="azure")


def test_undetectable_header_lists_the_known_formats(tmp_path):
    msg = error(write(tmp_path, "x.csv", "when,in,out\n1,2,3\n"))
    assert "line 1: unrecognised columns when, in, out; expected one of: azure (TIMESTAMP," in msg
    assert "--columns arrival=COL" in msg


def test_non_numeric_length(tmp_path):
    msg = error(write(tmp_path, "v.csv", VIDUR + "0,10,5\n1,ten,5\n"))
    assert msg.endswith("line 3, column 'num_prefill_tokens': got 'ten'; expected a whole number >= 1")


def test_negative_length(tmp_path):
    msg = error(write(tmp_path, "v.csv", VIDUR + "0,10,5\n1,10,-3\n"))
    assert msg.endswith("line 3, column 'num_decode_tokens': got '-3'; expected a whole number >= 1")


def test_fractional_length(tmp_path):
    assert "got '2.5'; expected a whole number >= 1" in error(write(tmp_path, "v.csv", VIDUR + "0,2.5,5\n"))


def test_zero_output_length(tmp_path):
    msg = error(write(tmp_path, "v.csv", VIDUR + "0,10,0\n"))
    assert msg.endswith(
        "line 2, column 'num_decode_tokens': got '0'; expected a whole number >= 1 "
        "(a request has at least one token each way)"
    )


def test_empty_value(tmp_path):
    assert "line 2, column 'num_decode_tokens': got an empty value" in error(
        write(tmp_path, "v.csv", VIDUR + "0,10,\n")
    )


def test_bad_timestamp(tmp_path):
    path = write(
        tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,1,1\nyesterday,1,1\n"
    )
    assert "line 3, column 'TIMESTAMP': got 'yesterday'; expected a date and time" in error(path)
    assert "line 2, column 'arrived_at': got 'nan'" in error(write(tmp_path, "v.csv", VIDUR + "nan,1,1\n"))


def test_out_of_order_timestamps_are_sorted_with_a_count(tmp_path):
    t = load_trace(write(tmp_path, "v.csv", VIDUR + "3,1,1\n1,2,2\n2,3,3\n0,4,4\n"))
    # descents: 3 -> 1 and 2 -> 0, so two lines were earlier than the line before them
    assert t.notes == ("2 timestamps were earlier than the line before them (out of order); sorted by arrival",)
    assert t.prompt_len.tolist() == [4, 2, 3, 1]
    assert t.arrival_time.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_equal_timestamps_keep_file_order(tmp_path):
    t = load_trace(write(tmp_path, "v.csv", VIDUR + "1,1,1\n0,2,2\n0,3,3\n"))
    assert t.prompt_len.tolist() == [2, 3, 1]


@pytest.mark.parametrize("text", ["", "\n\n", VIDUR])
def test_empty_file(tmp_path, text):
    msg = error(write(tmp_path, "v.csv", text))
    assert "empty file" in msg or "no requests; expected at least one data row after the header" in msg


def test_truncated_gzip_says_where_it_stopped(tmp_path):
    data = gzip.compress((VIDUR + "0,1,1\n" * 5000).encode())
    msg = error(write(tmp_path, "v.csv.gz", data[: len(data) // 2]))
    assert "truncated gzip file: the compressed stream ends after line" in msg


def test_undecodable_bytes_name_line_and_column(tmp_path):
    msg = error(write(tmp_path, "v.csv", VIDUR.encode() + b"0,1,1\n1,2,\xff\xfe\n"))
    assert "line 3, column 'num_decode_tokens', byte 5: undecodable bytes b'\\xff'; expected UTF-8 text" in msg


def test_jsonl_line_that_is_not_an_object(tmp_path):
    text = '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [0]}\n[1, 2]\n'
    assert "line 2: got '[1, 2]'; expected a JSON object ({...}) on every line" in error(
        write(tmp_path, "m.jsonl", text)
    )


def test_jsonl_broken_json_and_bad_values(tmp_path):
    good = '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [0]}\n'
    assert "line 2: not valid JSON" in error(write(tmp_path, "a.jsonl", good + '{"timestamp": 1,\n'))
    bad_len = good + '\n{"timestamp": 1, "input_length": "many", "output_length": 5, "hash_ids": [0]}\n'
    assert "line 3, column 'input_length': got '\"many\"'" in error(write(tmp_path, "b.jsonl", bad_len))
    no_key = good + '{"timestamp": 1, "input_length": 5, "hash_ids": [0]}\n'
    assert "line 2, column 'output_length': got no such key" in error(write(tmp_path, "c.jsonl", no_key))
    bad_hash = good + '{"timestamp": 1, "input_length": 5, "output_length": 5, "hash_ids": "x"}\n'
    assert "line 2, column 'hash_ids': got '\"x\"'; expected a list of integers" in error(
        write(tmp_path, "d.jsonl", bad_hash)
    )


def test_ragged_csv_row(tmp_path):
    assert "line 3: 4 fields, but the header has 3" in error(write(tmp_path, "v.csv", VIDUR + "0,1,1\n1,2,2,9\n"))


def test_bad_options_are_workload_errors(tmp_path):
    path = write(tmp_path, "v.csv", VIDUR + "0,1,1\n")
    with pytest.raises(WorkloadError, match="unknown format 'azur' \\(did you mean 'azure'\\?\\)"):
        load_trace(path, format="azur")
    with pytest.raises(WorkloadError, match="unknown role 'arival' \\(did you mean 'arrival'\\?\\)"):
        load_trace(path, columns="arival=a,prompt=b,output=c")
    with pytest.raises(WorkloadError, match="--request-rate: got 0"):
        make_table("random", request_rate=0.0)
    with pytest.raises(WorkloadError, match="--prompt-len: got 'gauss:3'"):
        make_table("random", prompt_len="gauss:3")
    for spec in ("random", "seed", str(path)):  # whether or not anything is drawn with it
        with pytest.raises(WorkloadError, match="--seed: got -1; expected an integer >= 0"):
            make_table(spec, seed=-1)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from servesim.cli import main; sys.argv[0] = 'servesim'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)


def test_cli_error_is_one_line_exit_2_and_leaves_existing_output_alone(tmp_path):
    bad = write(tmp_path, "bad.csv", VIDUR + "0,1,-1\n")
    out = write(tmp_path, "out.csv", "precious\n")
    res = run_cli("workload", "generate", str(out), "--workload", str(bad))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"servesim: error: {bad}: line 2, column 'num_decode_tokens': got '-1'")
    assert out.read_text() == "precious\n"


def test_cli_stats_json_has_count(tmp_path):
    path = write(tmp_path, "v.csv", VIDUR + "0,1,1\n1,2,2\n")
    res = run_cli("workload", "stats", str(path), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["count"] == 2


# --- fuzz: whatever the bytes, a parser returns a valid table or raises WorkloadError -----------------------------

HEADERS = {
    "azure": "TIMESTAMP,ContextTokens,GeneratedTokens",
    "burstgpt": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
    "vidur": "arrived_at,num_prefill_tokens,num_decode_tokens",
    "lengths": "num_prefill_tokens,num_decode_tokens",
    "servesim": "arrival_time,prompt_len,output_len,priority,session_id,hash_ids,request_id",
    "csv": "a,p,o",
}
CELLS = st.sampled_from(
    [
        "0",
        "1",
        "7",
        "-1",
        "2.5",
        "1e3",
        "",
        " ",
        "x",
        "nan",
        "inf",
        '"',
        '"a,b"',
        "2023-11-16 18:17:03.9799600",
        "ChatGPT",
        "1 2 3",
        "99999999999999999999",
        "\xe9",
        "\r",
    ]
)


def csv_text(header: str) -> st.SearchStrategy[str]:
    row = st.lists(CELLS, min_size=0, max_size=8).map(",".join)
    return st.lists(row, max_size=6).map(lambda rows: "\n".join([header, *rows]) + "\n")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
MOONCAKE_KEYS = st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids", "other"])
JSON_LINE = st.one_of(
    st.dictionaries(MOONCAKE_KEYS, JSON_VALUES, max_size=5).map(json.dumps),
    JSON_VALUES.map(json.dumps),
    st.text(max_size=20),
)
JSONL_TEXT = st.lists(JSON_LINE, min_size=0, max_size=6).map("\n".join)


def check(path: Path, **kw: object) -> None:
    try:
        table = load_trace(path, **kw)  # type: ignore[arg-type]
    except WorkloadError:
        return
    assert isinstance(table, RequestTable) and len(table) >= 1
    assert table.prompt_len.min() >= 1 and table.output_len.min() >= 1
    assert table.arrival_time[0] == 0 or not table.has_arrivals


FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(fmt=st.sampled_from(sorted(HEADERS)), text=st.data(), squash=st.sampled_from(["none", "gzip", "cut"]))
def test_fuzz_csv_parsers(tmp_path, fmt, text, squash):
    body = text.draw(csv_text(HEADERS[fmt])).encode()
    if squash != "none":
        body = gzip.compress(body)
        body = body[: len(body) // 2] if squash == "cut" else body
    kw = {"columns": "arrival=a,prompt=p,output=o"} if fmt == "csv" else {"format": fmt}
    check(write(tmp_path, "f.csv", body), **kw)


@FUZZ
@given(text=JSONL_TEXT, generic=st.booleans())
def test_fuzz_jsonl_parsers(tmp_path, text, generic):
    kw = {"format": "jsonl", "columns": "arrival=timestamp,prompt=input_length,output=output_length"} if generic else {}
    check(write(tmp_path, "f.jsonl", text), **kw)


@FUZZ
@given(blob=st.binary(max_size=200), ext=st.sampled_from(["csv", "jsonl", "parquet", "gz"]))
def test_fuzz_raw_bytes(tmp_path, blob, ext):
    check(write(tmp_path, f"f.{ext}", blob))
    check(write(tmp_path, f"g.{ext}", b"PAR1" + blob), format="parquet", columns="arrival=a,prompt=p,output=o")


def test_parquet_bad_value_names_the_row(tmp_path):
    pl = pytest.importorskip("polars")
    path = tmp_path / "g.parquet"
    pl.DataFrame({"t": [0.0, 1.0], "p": [5, -1], "o": [1, 1]}).write_parquet(path)
    msg = error(path, columns="arrival=t,prompt=p,output=o")
    assert msg.endswith("row 2, column 'p': got '-1'; expected a whole number >= 1")


@FUZZ
@given(text=st.text(alphabet="0123456789.:,=-+einfaulomrtcsp_ ", max_size=30))
def test_fuzz_option_parsers(text):
    from servesim.cli.workload import parse_window
    from servesim.workloads.formats import parse_columns
    from servesim.workloads.synthetic import parse_length

    for parse in (parse_length, parse_window, lambda s: parse_columns(s, None)):
        try:
            parse(text)
        except WorkloadError:
            pass
