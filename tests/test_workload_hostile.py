"""Hostile trace files, case by case: each is read correctly or refused with one WorkloadError line naming the file,
the line, the column and what was expected; never a traceback, a hang or unbounded memory."""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import load_error, write_file

from servesim.errors import WorkloadError
from servesim.workloads import builtin_table, load_trace, make_table, source
from servesim.workloads.builtin import BUILTIN_WORKLOADS
from servesim.workloads.synthetic import arrival_times
from servesim.workloads.table import MAX_ARRIVAL_S, MAX_TOKENS
from servesim.workloads.transforms import scale_rate

VIDUR = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
SERVESIM_IDS = "arrival_time,prompt_len,output_len,request_id\n"
MOONCAKE_OK = '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'


write, error = write_file, load_error


def polars_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from servesim.workloads import loaders

    monkeypatch.setattr(loaders, "read_plain_csv", lambda *args: None)


# --- 1. line endings ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("through", ["plain", "polars"])
@pytest.mark.parametrize(
    "text",
    [
        VIDUR + "0,10,1\n0.5,20,2\n",
        AZURE + "2023-11-16 18:17:03.9799600,10,1\n2023-11-16 18:17:04.4799600,20,2\n",
    ],
    ids=["vidur", "azure"],
)
def test_old_mac_line_breaks_read_as_lines_by_both_readers(tmp_path, monkeypatch, through, text):
    if through == "polars":
        polars_only(monkeypatch)
    lf = load_trace(write(tmp_path, "lf.csv", text))
    for name, data in (("cr.csv", text.replace("\n", "\r")), ("crlast.csv", text.replace("\n", "\r")[:-1] + "\n")):
        cr = load_trace(write(tmp_path, name, data))
        assert cr.arrival_time.tolist() == pytest.approx(lf.arrival_time.tolist())
        assert cr.prompt_len.tolist() == lf.prompt_len.tolist() == [10, 20]


def test_old_mac_jsonl_and_bom(tmp_path):
    text = MOONCAKE_OK + '{"timestamp": 500, "input_length": 20, "output_length": 2}\n'
    t = load_trace(write(tmp_path, "m.jsonl", text.replace("\n", "\r")))
    assert t.arrival_time.tolist() == [0.0, 0.5]
    t = load_trace(write(tmp_path, "b.csv", b"\xef\xbb\xbf" + (VIDUR + "0,1,1\n").replace("\n", "\r").encode()))
    assert len(t) == 1


def test_old_mac_line_numbers_count_cr_lines(tmp_path):
    msg = error(write(tmp_path, "v.csv", (VIDUR + "0,1,1\n1,2,-2\n").replace("\n", "\r")))
    assert msg.endswith("line 3, column 'num_decode_tokens': got '-2'; expected a whole number >= 1")


@pytest.mark.parametrize("through", ["plain", "polars"])
def test_stray_carriage_return_is_one_line_naming_its_line(tmp_path, monkeypatch, through):
    if through == "polars":
        polars_only(monkeypatch)
    msg = error(write(tmp_path, "v.csv", VIDUR + "0,1,1\n1,2,2\r3,4,4\n"))
    assert "line 3: malformed CSV (a carriage return (\\r) inside a line; expected line breaks" in msg


# --- 2. NaN, Infinity, huge numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400, "9" * 5000])
def test_jsonl_non_finite_numbers_name_line_and_key(tmp_path, token):
    for key, line in (("timestamp", 1), ("input_length", 2), ("output_length", 2)):
        bad = {"timestamp": "1", "input_length": "10", "output_length": "5"} | {key: token}
        obj = "{" + ", ".join(f'"{k}": {v}' for k, v in bad.items()) + "}\n"
        text = obj if line == 1 else MOONCAKE_OK + obj
        msg = error(write(tmp_path, "m.jsonl", text))
        assert f"line {line}, column {key!r}: got " in msg
        assert "expected a finite number" in msg


def test_mooncake_nan_timestamp_example(tmp_path):
    msg = error(write(tmp_path, "m.jsonl", '{"timestamp": NaN, "input_length": 10, "output_length": 5}\n'))
    assert msg == (
        f"{tmp_path / 'm.jsonl'}: line 1, column 'timestamp': got 'NaN'; expected a finite number "
        "(NaN, Infinity and numbers beyond +-1.8e308 are not valid JSON values here)"
    )


def test_jsonl_nan_in_an_unused_key_or_in_hash_ids(tmp_path):
    msg = error(write(tmp_path, "m.jsonl", MOONCAKE_OK + MOONCAKE_OK[:-2] + ', "extra": [1, NaN]}\n'))
    assert "line 2, column 'extra': got 'NaN'; expected a finite number" in msg
    msg = error(write(tmp_path, "h.jsonl", MOONCAKE_OK[:-2] + ', "hash_ids": [1, Infinity]}\n'))
    assert "line 1, column 'hash_ids': got 'Infinity'" in msg


@pytest.mark.parametrize("through", ["plain", "polars"])
@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e999"])
def test_csv_non_finite_numbers(tmp_path, monkeypatch, through, value):
    if through == "polars":
        polars_only(monkeypatch)
    msg = error(write(tmp_path, "a.csv", VIDUR + f"0,1,1\n{value},1,1\n"))
    assert msg.endswith(f"line 3, column 'arrived_at': got {value!r}; expected a finite number of seconds")
    msg = error(write(tmp_path, "p.csv", VIDUR + f"0,1,1\n1,{value},1\n"))
    assert msg.endswith(f"line 3, column 'num_prefill_tokens': got {value!r}; expected a finite whole number >= 1")


def test_lengths_beyond_max_tokens(tmp_path):
    msg = error(write(tmp_path, "v.csv", VIDUR + f"0,1,1\n1,{MAX_TOKENS + 1},1\n"))
    assert msg.endswith(f"line 3, column 'num_prefill_tokens': got '{MAX_TOKENS + 1}'; expected a whole number "
                        f"<= {MAX_TOKENS:,} (no context window comes near it)")
    assert load_trace(write(tmp_path, "ok.csv", VIDUR + f"0,{MAX_TOKENS},{MAX_TOKENS}\n")).prompt_len[0] == MAX_TOKENS


# --- 3. absurd time spans -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("through", ["plain", "polars"])
def test_arrivals_beyond_ten_years_are_refused(tmp_path, monkeypatch, through):
    if through == "polars":
        polars_only(monkeypatch)
    msg = error(write(tmp_path, "v.csv", VIDUR + "0,1,1\n5,1,1\n1e18,1,1\n"))
    assert msg.endswith(
        "line 4, column 'arrived_at': got '1e18'; expected arrival times within 10 years (315,576,000 s, "
        "servesim's limit) of each other, and line 2 has '0'"
    )
    # the outlier is named even when it is the earliest; spans that overflow a float too
    msg = error(write(tmp_path, "w.csv", VIDUR + "-1e18,1,1\n5,1,1\n6,1,1\n"))
    assert "line 2, column 'arrived_at': got '-1e18'" in msg
    assert "got '1e308'" in error(write(tmp_path, "x.csv", VIDUR + "-1e308,1,1\n1e308,1,1\n"))
    ok = load_trace(write(tmp_path, "ok.csv", VIDUR + f"-1,1,1\n{MAX_ARRIVAL_S - 1},1,1\n"))
    assert ok.arrival_time[-1] == MAX_ARRIVAL_S


def test_arrival_span_in_milliseconds_and_datetimes(tmp_path):
    text = MOONCAKE_OK + '{"timestamp": 1e18, "input_length": 10, "output_length": 5}\n'
    assert "line 2, column 'timestamp': got '1e+18'; expected arrival times within 10 years" in error(
        write(tmp_path, "m.jsonl", text)
    )
    # int64 nanoseconds of 1700 and 2250 would wrap when subtracted: refused, not garbled
    text = AZURE + "1700-01-01 00:00:00,1,1\n2250-01-01 00:00:00,1,1\n"
    assert "line 3, column 'TIMESTAMP': got '2250-01-01 00:00:00'; expected arrival times within 10 years" in error(
        write(tmp_path, "a.csv", text)
    )
    t = load_trace(write(tmp_path, "ok.csv", AZURE + "2020-01-01 00:00:00,1,1\n2029-01-01 00:00:00,1,1\n"))
    assert t.arrival_time[-1] == pytest.approx(9 * 365.25 * 86400, rel=1e-3)


def test_synthetic_and_scaled_spans_are_bounded():
    with pytest.raises(WorkloadError, match="--request-rate: got 1e-300; 10 requests at that rate take"):
        arrival_times(10, 1e-300, 1.0, np.random.default_rng(0))
    with pytest.raises(WorkloadError, match="--burstiness: got 4.94066e-324"):
        arrival_times(10, 1.0, 5e-324, np.random.default_rng(0))
    with pytest.raises(WorkloadError, match="--rate-scale: got 1e-300; the arrivals would span"):
        scale_rate(make_table("random", num_requests=3, request_rate=1.0), 1e-300)
    assert np.isfinite(arrival_times(10, 1.0, 1e-300, np.random.default_rng(0))).all()
    with pytest.raises(WorkloadError, match="--num-requests: got 999,999,999,999; expected from 1 to 100,000,000"):
        make_table("random", num_requests=999_999_999_999)  # refused before allocating 24 TB


# --- 4. gzip bombs ------------------------------------------------------------------------------------------------


def test_gzip_bomb_stops_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_DECOMPRESSED_BYTES", 4096)
    bomb = write(tmp_path, "b.csv.gz", gzip.compress((VIDUR + "0,1,1\n" * 100_000).encode()))
    assert os.path.getsize(bomb) < 4096
    msg = error(bomb)
    assert msg.endswith(
        "gzip data decompresses to more than 4 KiB, servesim's limit (servesim.workloads.source."
        "MAX_DECOMPRESSED_BYTES); expected a smaller trace, or decompress it first (gunzip) if it really is that large"
    )
    # the limit counts every member together; at the limit exactly is fine
    two = gzip.compress((VIDUR + "0,1,1\n" * 300).encode()) + gzip.compress(b"0,1,1\n" * 400)
    assert "more than 4 KiB" in error(write(tmp_path, "two.csv.gz", two))
    exact = (VIDUR + "0,1,1\n" * 700).encode()
    monkeypatch.setattr(source, "MAX_DECOMPRESSED_BYTES", len(exact))
    assert len(load_trace(write(tmp_path, "exact.csv.gz", gzip.compress(exact)))) == 700


def test_parquet_bomb_stops_at_the_limit(tmp_path, monkeypatch):
    pl = pytest.importorskip("polars")
    monkeypatch.setattr(source, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    path = tmp_path / "b.parquet"
    n = 100_000  # 4 columns read (3 + the row index) x 8 bytes x 100,000 rows > 1 MiB, in a file of a few KiB
    pl.select(arrival_time=pl.repeat(0.0, n), prompt_len=pl.repeat(1, n), output_len=pl.repeat(1, n)).write_parquet(
        path
    )
    assert "Parquet file of 100,000 rows: its 4 columns decode to more than 1 MiB" in error(path)


# --- 5. duplicate request ids -------------------------------------------------------------------------------------


def test_duplicate_request_ids_name_both_lines(tmp_path):
    msg = error(write(tmp_path, "s.csv", SERVESIM_IDS + "0,1,1,a\n1,1,1,b\n2,1,1,a\n"))
    assert msg.endswith(
        "line 4, column 'request_id': got 'a', the id of line 2 too; expected a different request id on every row"
    )
    msg = error(write(tmp_path, "e.csv", SERVESIM_IDS + "0,1,1,\n1,1,1,\n"))
    assert "line 3, column 'request_id': got an empty value, the id of line 2 too" in msg
    text = '{"t": 0, "p": 1, "o": 1, "id": "x"}\n{"t": 1, "p": 1, "o": 1, "id": "x"}\n'
    msg = error(write(tmp_path, "j.jsonl", text), columns="arrival=t,prompt=p,output=o,id=id")
    assert "line 2, column 'id': got '\"x\"', the id of line 1 too" in msg
    t = load_trace(write(tmp_path, "ok.csv", SERVESIM_IDS + "1,1,1,b\n0,1,1,a\n"))
    assert t.request_ids == ["a", "b"]


def test_generated_ids_are_unique():
    for name in BUILTIN_WORKLOADS:
        ids = builtin_table(name).request_ids
        assert len(set(ids)) == len(ids), name
    t = make_table("random", num_requests=500, request_rate=10.0, seed=3)
    assert t.request_ids == [str(i) for i in range(500)]
    t = make_table("azure-conv-sample", num_requests=50, window=(10, 100), rate_scale=2.0)
    assert len(set(t.request_ids)) == len(t) == 50
    assert [r.request_id for r in t.to_requests()] == t.request_ids


def test_file_rows_are_the_ids_when_the_file_has_none(tmp_path):
    t = load_trace(write(tmp_path, "v.csv", VIDUR + "3,1,1\n\n1,2,2\n1,3,3\n"))
    assert sorted(t.request_ids) == sorted(set(t.request_ids))


# --- 6. junk, empty, header only, directories, devices, encodings -------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("empty.csv", b"", "empty file"),
        ("spaces.csv", b" \n\r\n\t", "empty file"),
        ("bom.csv", b"\xef\xbb\xbf", "empty file"),
        ("header.csv", VIDUR.encode(), "no requests; expected at least one data row after the header"),
        ("header_cr.csv", VIDUR.replace("\n", "\r").encode(), "no requests"),
        ("junk.csv", bytes(range(256)) * 8, "undecodable bytes"),
        ("junk.jsonl", b"\x00\x01{\x02", "not valid JSON"),
        ("latin1.csv", VIDUR.encode() + "0,1,1\n1,\xe9,1\n".encode("latin-1"), "line 3, column 'num_prefill_tokens'"),
        ("utf16.csv", VIDUR.encode("utf-16"), "line 1, byte 1: undecodable bytes b'\\xff'; expected UTF-8 text"),
        ("nul.csv", b"\x00\x00\x00\x00\n", "line 1: unrecognised columns '\\x00\\x00\\x00\\x00'"),
        ("fake.parquet", b"PAR1" + bytes(100), "not a readable Parquet file"),
        ("fake.gz", b"\x1f\x8b" + bytes(50), "corrupt gzip data at line 1"),
        ("huge_field.csv", (VIDUR + "0,1,1\n1," + "1" * 200_000 + ",1\n").encode(), "line 3"),
    ],
)
def test_junk_is_one_line(tmp_path, name, data, expected):
    assert expected in error(write(tmp_path, name, data))


def test_directory_and_devices(tmp_path):
    assert error(tmp_path) == f"{tmp_path}: is a directory; expected a trace file"
    with pytest.raises(WorkloadError, match="is a directory; expected a trace file, a built-in workload or 'random'"):
        make_table(str(tmp_path))
    if Path("/dev/zero").exists():  # never ends: refused before reading
        assert "not a regular file" in error(Path("/dev/zero"))
    if hasattr(os, "mkfifo"):  # nobody writes to it: reading would wait forever
        fifo = tmp_path / "pipe.csv"
        os.mkfifo(fifo)
        assert "not a regular file (a pipe, socket or device)" in error(fifo)
    assert "cannot read: No such file or directory" in error(tmp_path / "missing.csv")


# --- found by the fuzz test ---------------------------------------------------------------------------------------


def test_text_columns_are_not_read_as_numbers(tmp_path):
    # one hash id a row is still a list; ids '007' and '7.0' stay as written (and are not duplicates of '7')
    t = load_trace(write(tmp_path, "h.csv", "arrival_time,prompt_len,output_len,hash_ids\n0,1,1,4\n1,1,1,5\n"))
    assert t.hash_ids.tolist() == [4, 5] and t.hash_offsets.tolist() == [0, 1, 2]
    t = load_trace(write(tmp_path, "i.csv", SERVESIM_IDS + "0,1,1,007\n1,1,1,7.0\n2,1,1,7\n"))
    assert t.request_ids == ["007", "7.0", "7"]


def test_null_inside_a_hash_list(tmp_path):
    text = MOONCAKE_OK[:-2] + ', "hash_ids": [1]}\n' + MOONCAKE_OK[:-2] + ', "hash_ids": [null, 2]}\n'
    msg = error(write(tmp_path, "m.jsonl", text))
    assert msg.endswith("line 2, column 'hash_ids': got '[null, 2]'; expected a list of integers (without nulls)")


def test_parquet_hash_ids_of_another_type(tmp_path):
    pl = pytest.importorskip("polars")
    base = {"arrival_time": [0.0], "prompt_len": [1], "output_len": [1]}
    for values, dtype, shown in (([5], pl.Int64, "'5'"), ([[1.5]], pl.List(pl.Float64), "'[1.5]'"),
                                 ([[None, 2]], pl.List(pl.Int64), "'[None, 2]'")):
        path = tmp_path / "h.parquet"
        pl.DataFrame({**base, "hash_ids": pl.Series(values, dtype=dtype)}).write_parquet(path)
        assert f"row 1, column 'hash_ids': got {shown}; expected a list of integers" in error(path)


def test_datetime_column_whose_format_cannot_be_inferred(tmp_path):
    msg = error(write(tmp_path, "d.csv", "t,p,o\n5,1,1\n"), columns="arrival=t,prompt=p,output=o",
                time_unit="datetime")
    assert msg.endswith("line 2, column 't': got '5'; expected a date and time such as 2023-11-16 18:17:03.9799600")


def test_corrupt_parquet_page_is_an_error_not_an_abort(tmp_path):
    # polars' own reader asks for 2**61 bytes on this page and aborts the process; pyarrow reports it
    pl = pytest.importorskip("polars")
    if source.pyarrow_parquet() is None:
        pytest.skip("needs pyarrow")
    buf = io.BytesIO()
    pl.DataFrame({"t": [0.0, 1.0, None, 2.0], "p": [1, 2, 3, 4], "o": [1, 1, 1, 1]}).write_parquet(buf)
    data = bytearray(buf.getvalue())
    data[12] = 7
    path = write(tmp_path, "c.parquet", bytes(data))
    with pytest.raises(WorkloadError, match="c.parquet: cannot read as parquet"):
        load_trace(path, columns="arrival=t,prompt=p,output=o")


def test_held_stderr_passes_on_or_drops_native_output(capfd):
    with source.HeldStderr():
        os.write(2, b"kept\n")
    with source.HeldStderr() as held:
        os.write(2, b"thread 'x' panicked at ...\n")
        held.drop()
    assert capfd.readouterr().err == "kept\n"
