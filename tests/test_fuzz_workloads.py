"""Fuzz every trace format and container with hostile bytes: each file either loads to a valid table (arrival times
finite, >= 0, within the 10-year bound and sorted; lengths from 1 to MAX_TOKENS; request ids unique) or raises one
WorkloadError whose message is a single line naming the file. No other exception, ever. And the CLI turns each
refusal into exit status 2 and one `servesim: error:` line on stderr."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.errors import WorkloadError
from servesim.workloads import FORMATS, load_trace, source, workload_stats
from servesim.workloads.formats import TIME_UNITS
from servesim.workloads.table import MAX_ARRIVAL_S, MAX_TOKENS, RequestTable

GENERIC = {"arrival": "t", "prompt": "p", "output": "o", "priority": "r", "session": "s", "hash_ids": "h", "id": "i"}
GENERIC_SPEC = ",".join(f"{role}={col}" for role, col in GENERIC.items())


def format_columns(name: str) -> list[str]:
    """Every column a format reads: required, then optional (and BurstGPT's filter columns)."""
    if name not in FORMATS:
        return list(GENERIC.values())
    fmt = FORMATS[name]
    extra = ["Model", "Log Type"] if name == "burstgpt" else ["NumImages"] if name == "azure" else []
    return list(dict.fromkeys([*fmt.required, *fmt.optional.values(), *extra]))


FORMAT_NAMES = sorted(FORMATS)
CONTAINER_NAMES = ["csv", "jsonl", "parquet"]


def options(name: str, unit: str, burst: int) -> dict[str, object]:
    if name in CONTAINER_NAMES:
        return {"format": name, "columns": GENERIC_SPEC, "time_unit": unit}
    kw: dict[str, object] = {"format": name}
    if name == "burstgpt":
        kw |= [{}, {"keep_failed": True}, {"trace_model": "ChatGPT"}, {"log_type": "API log"}][burst]
    return kw


def check(path: Path, **kw: object) -> RequestTable | None:
    """The property: a valid table, or a one-line WorkloadError naming the file."""
    try:
        table = load_trace(path, **kw)  # type: ignore[arg-type]
    except WorkloadError as exc:
        msg = str(exc)
        assert "\n" not in msg and "\r" not in msg, msg
        assert str(path) in msg, msg
        return None
    n = len(table)
    assert isinstance(table, RequestTable) and n >= 1
    t = table.arrival_time
    assert t.dtype == np.float64 and np.isfinite(t).all() and t.min() >= 0 and t.max() <= MAX_ARRIVAL_S
    assert np.all(np.diff(t) >= 0)
    for col in (table.prompt_len, table.output_len):
        assert col.dtype == np.int64 and col.min() >= 1 and col.max() <= MAX_TOKENS
    ids = table.request_ids
    assert len(set(ids)) == n
    if table.hash_ids is not None:
        off = table.hash_offsets
        assert off is not None and len(off) == n + 1 and off[0] == 0 and off[-1] == len(table.hash_ids)
        assert np.all(np.diff(off) >= 0)
    reqs = table.to_requests()
    assert [r.request_id for r in reqs] == ids
    stats = workload_stats(table)
    assert stats["count"] == n
    return table


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# --- what goes in a file --------------------------------------------------------------------------------------------

HOSTILE_CELLS = [
    "-1", "0", "-0", "1e18", "1e400", "-1e308", "1e308", "9007199254740993", str(MAX_TOKENS + 1),
    "99999999999999999999", "nan", "NaN", "inf", "-inf", "Infinity", "", " ", "x", "ten", '"', '"a,b"', '""', "\x00",
    "\xe9", "\u2028", "\ufeff", "\t", "1 x", "1" * 400, "1700-01-01 00:00:00", "2250-01-01 00:00:00",
    "2023-02-30 00:00:00", "2.5", "a", '"x\ny"', '"ChatGPT\r\n"', '"1\r"',
]
HOSTILE_JSON = [
    "0", "-3", "2.5", "1e18", "1e400", "-1e400", "1" + "0" * 400, "9" * 30, "NaN", "Infinity", "-Infinity", "true",
    "null", '"x"', '""', "[]", "[1.5]", "[NaN]", "[[1]]", '["1"]', "[99999999999999999999999]", "{}", '{"a": 1}',
    "[" * 50 + "]" * 50, '"a\\nb"', '"API log\\r"', '"\\u2028"',
]
STAMPS = ["2023-11-16 18:17:03.9799600", "2023-11-16 18:17:04", "2023-11-16 18:20:00.5"]


def good_cells(column: str) -> list[str]:
    """Plausible values of a column, as CSV text."""
    if column == "TIMESTAMP":
        return STAMPS
    if column in ("Timestamp", "timestamp", "arrived_at", "arrival_time", "t"):
        return ["0", "1", "2.5", "10", "1000", "0.001", "1e3"] + (STAMPS if column == "t" else [])
    if column in ("hash_ids", "h"):
        return ["1 2 3", "", "4", "7 8"]
    if column in ("session_id", "Session ID", "s"):
        return list("abcdefgh") + ["12", "13"]
    if column in ("priority", "r"):
        return ["0", "1", "-2"]
    if column == "Model":
        return ["ChatGPT", "GPT-4"]
    if column == "Log Type":
        return ["API log", "Conversation log"]
    return ["1", "7", "512", "100", "512.0"]  # token counts, NumImages, Total tokens


def good_json(column: str) -> list[str]:
    """Plausible values of a column, as JSON."""
    if column in ("hash_ids", "h"):
        return ["[1, 2, 3]", "[]", "[4]"]
    cells = good_cells(column)
    if column in ("TIMESTAMP", "request_id", "i", "session_id", "Session ID", "s", "Model", "Log Type", "t"):
        return [json.dumps(c) for c in cells] + (["0", "5"] if column == "t" else [])
    return cells


ID_COLUMNS = ("request_id", "i")


def cell(draw: st.DrawFn, column: str, rate: int, as_json: bool = False) -> str:
    """A plausible value, or with probability rate / 20 a hostile one."""
    if draw(st.integers(0, 19)) < rate:
        return draw(st.sampled_from(HOSTILE_JSON if as_json else HOSTILE_CELLS))
    if column in ID_COLUMNS:  # ids: mostly distinct (a hostile "a" twice makes a duplicate)
        text = f"r{draw(st.integers(0, 10**6))}"
        return json.dumps(text) if as_json else text
    return draw(st.sampled_from(good_json(column) if as_json else good_cells(column)))


RATES = st.sampled_from([0, 1, 4])  # hostile cells in 20: none, a few, many


EOLS = ["\n", "\r\n", "\r"]


@st.composite
def csv_bytes(draw: st.DrawFn, columns: list[str]) -> bytes:
    rate = draw(RATES)
    header = list(columns)
    if rate and not draw(st.integers(0, 4)):  # a column missing, repeated or unknown
        header = draw(st.lists(st.sampled_from([*columns, "extra"]), max_size=len(columns) + 1))
    rows = []
    for _ in range(draw(st.integers(0, 6))):
        row = [cell(draw, c, rate) for c in header]
        if rate and not draw(st.integers(0, 9)):  # a field too many or too few
            row = row[:-1] if draw(st.booleans()) else [*row, "1"]
        rows.append(row)
    eol = draw(st.sampled_from(EOLS))
    lines = [",".join(header), *(",".join(r) for r in rows)]
    if rate and not draw(st.integers(0, 4)):  # a stray line break of another kind, or a blank line, somewhere
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] += draw(st.sampled_from(EOLS))
    text = eol.join(lines) + draw(st.sampled_from(["", eol]))
    return (b"\xef\xbb\xbf" if not draw(st.integers(0, 4)) else b"") + text.encode()


@st.composite
def jsonl_bytes(draw: st.DrawFn, columns: list[str]) -> bytes:
    rate = draw(RATES)

    def obj() -> str:
        keys = list(columns)
        if rate and not draw(st.integers(0, 4)):
            keys = draw(st.lists(st.sampled_from([*columns, "other"]), max_size=len(columns) + 1))
        return "{" + ", ".join(f"{json.dumps(k)}: {cell(draw, k, rate, as_json=True)}" for k in keys) + "}"

    junk = st.sampled_from(["", " ", "[1]", "1", '"x"', "{", "}", "{}", "\x00", "nul", '{"a": 1}{"b": 2}'])
    lines = [draw(junk) if draw(st.integers(0, 19)) < rate else obj() for _ in range(draw(st.integers(0, 6)))]
    return draw(st.sampled_from(EOLS)).join(lines).encode() + draw(st.sampled_from([b"", b"\n"]))


PARQUET_VALUES = {  # kind: (polars dtype name, plausible values, hostile values)
    "float": ("Float64", [1.0, 2.5, 7.0, 512.0], [0.0, -1.0, 1e18, 1e308, -1e308, float("nan"), float("inf"), None]),
    "int": ("Int64", [1, 7, 512], [0, -5, 2**31, 2**62, None]),
    "str": ("String", ["1", "7", "a", "b", "2023-11-16 18:17:03.9799600"], ["x", "", "nan", "1 2", None]),
    "bool": ("Boolean", [True], [False, None]),
    "list": ("List", [[1, 2], []], [None, [2**62]]),
    "datetime": ("Datetime", [10**18, 10**18 + 10**9], [0, None]),
}


def parquet_kind(column: str) -> list[str]:
    """Plausible dtypes of a column."""
    if column in ("hash_ids", "h"):
        return ["list"]
    if column in ("TIMESTAMP", "t"):
        return ["datetime", "str", "float"]
    if column in ("request_id", "i", "session_id", "Session ID", "s", "Model", "Log Type"):
        return ["str", "int"]
    return ["int", "float"]


@st.composite
def parquet_bytes(draw: st.DrawFn, columns: list[str]) -> bytes:
    pl = pytest.importorskip("polars")
    n = draw(st.integers(0, 5))
    rate = draw(RATES)
    names = list(columns)
    if rate and not draw(st.integers(0, 4)):
        names = draw(st.lists(st.sampled_from(columns), unique=True))
    data = {}
    for col in names:
        kinds = sorted(PARQUET_VALUES) if draw(st.integers(0, 19)) < rate else parquet_kind(col)
        dtype, good, bad = PARQUET_VALUES[draw(st.sampled_from(kinds))]
        picked = [draw(st.sampled_from(bad if draw(st.integers(0, 19)) < rate else good)) for _ in range(n)]
        if col in ID_COLUMNS and dtype == "String" and rate == 0:
            picked = [f"r{k}" for k in range(n)]
        typed = {"List": pl.List(pl.Int64), "Datetime": pl.Int64}.get(dtype) or getattr(pl, dtype)
        series = pl.Series(col, picked, dtype=typed)
        data[col] = series.cast(pl.Datetime("ns")) if dtype == "Datetime" else series
    buf = io.BytesIO()
    pl.DataFrame(data).write_parquet(buf)
    return buf.getvalue()


def mutate(data: bytes, how: str, seed: int) -> bytes:
    """Damage the bytes: gzip them whole or cut short, flip, insert or delete a few bytes, or cut the file."""
    rng = random.Random(seed)
    if how == "gzip":
        return gzip.compress(data)
    if how == "gzip-cut":
        z = gzip.compress(data)
        return z[: rng.randrange(len(z))]
    if how == "gzip-twice":
        return gzip.compress(data) + gzip.compress(data[len(data) // 2 :])
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if how == "cut" and out:
            del out[rng.randrange(len(out)) :]
        elif how == "flip" and out:
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif how == "insert":
            out[rng.randrange(len(out) + 1) : 0] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    return bytes(out)


MUTATIONS = st.sampled_from(["none", "none", "gzip", "gzip-cut", "gzip-twice", "cut", "flip", "insert"])
UNITS = st.sampled_from(sorted(TIME_UNITS))


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --- the fuzz tests -------------------------------------------------------------------------------------------------


@FUZZ
@given(name=st.sampled_from(FORMAT_NAMES + ["csv"]), data=st.data(), how=MUTATIONS, seed=st.integers(0, 2**16),
       unit=UNITS, burst=st.integers(0, 3), detect=st.booleans())
def test_fuzz_csv_every_format(tmp_path, name, data, how, seed, unit, burst, detect):
    body = mutate(data.draw(csv_bytes(format_columns(name))), how, seed)
    path = write(tmp_path, "trace.csv.gz" if how.startswith("gzip") else "trace.csv", body)
    check(path, **({} if detect and name != "csv" else options(name, unit, burst)))


@FUZZ
@given(name=st.sampled_from(["mooncake", "servesim", "vidur", "jsonl"]), data=st.data(), how=MUTATIONS,
       seed=st.integers(0, 2**16), unit=UNITS, detect=st.booleans())
def test_fuzz_jsonl_every_format(tmp_path, name, data, how, seed, unit, detect):
    body = mutate(data.draw(jsonl_bytes(format_columns(name))), how, seed)
    path = write(tmp_path, "trace.jsonl", body)
    check(path, **({} if detect and name != "jsonl" else options(name, unit, 0)))


@settings(FUZZ, max_examples=40)
@given(name=st.sampled_from(FORMAT_NAMES + ["parquet"]), data=st.data(), how=st.sampled_from(["none", "none", "gzip",
       "cut", "flip", "insert"]), seed=st.integers(0, 2**16), unit=UNITS)
def test_fuzz_parquet_every_format(tmp_path, name, data, how, seed, unit):
    if how in ("flip", "insert") and source.pyarrow_parquet() is None:
        how = "cut"  # polars' own reader aborts the process on some corrupt pages; servesim reads them with pyarrow
    body = mutate(data.draw(parquet_bytes(format_columns(name))), how, seed)
    path = write(tmp_path, "trace.parquet", body)
    check(path, **options(name, unit, 0))


@settings(FUZZ, max_examples=40)
@given(blob=st.binary(max_size=300), prefix=st.sampled_from([b"", b"PAR1", b"\x1f\x8b", b"{", b"\xef\xbb\xbf"]),
       ext=st.sampled_from(["csv", "jsonl", "parquet", "csv.gz", "txt"]),
       name=st.sampled_from([None, *FORMAT_NAMES, *CONTAINER_NAMES]))
def test_fuzz_raw_bytes(tmp_path, blob, prefix, ext, name):
    path = write(tmp_path, f"blob.{ext}", prefix + blob)
    check(path, **({} if name is None else options(name, "s", 0)))


@settings(FUZZ, max_examples=25)
@given(rows=st.integers(1, 400), limit=st.integers(16, 4096), gz=st.booleans())
def test_fuzz_decompression_limit(tmp_path, rows, limit, gz):
    text = ("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "0,1,1\n" * rows).encode()
    path = write(tmp_path, "v.csv.gz", gzip.compress(text) if gz else text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(source, "MAX_DECOMPRESSED_BYTES", limit)
        table = check(path)
    assert (table is not None) == (not gz or len(text) <= limit)


# --- hand-written hostile files, for every format -------------------------------------------------------------------

VIDUR = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
HOSTILE = {
    "empty": b"",
    "whitespace": b"\n \r\n\t\n",
    "bom only": b"\xef\xbb\xbf",
    "header only": VIDUR.encode(),
    "binary": bytes(range(256)) * 4,
    "nul bytes": b"\x00" * 64,
    "utf-16": VIDUR.encode("utf-16"),
    "latin-1": VIDUR.encode() + "0,1,1\n\xe9,1,1\n".encode("latin-1"),
    "old mac": (VIDUR + "0,1,1\n1,2,2\n").replace("\n", "\r").encode(),
    "stray cr": (VIDUR + "0,1,1\r1,2,2\n").encode(),
    "nan arrival": (VIDUR + "nan,1,1\n").encode(),
    "huge arrival": (VIDUR + "0,1,1\n1e18,1,1\n").encode(),
    "overflowing span": (VIDUR + "-1e308,1,1\n1e308,1,1\n").encode(),
    "huge length": (VIDUR + "0,1e400,1\n").encode(),
    "mooncake nan": b'{"timestamp": NaN, "input_length": 10, "output_length": 5}\n',
    "mooncake infinity": b'{"timestamp": 0, "input_length": Infinity, "output_length": 5}\n',
    "mooncake 1e400": b'{"timestamp": 1e400, "input_length": 10, "output_length": 5}\n',
    "mooncake 1e18 ms": b'{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
                        b'{"timestamp": 1e18, "input_length": 1, "output_length": 1}\n',
    "deep json": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "duplicate ids": b"arrival_time,prompt_len,output_len,request_id\n0,1,1,a\n1,1,1,a\n",
    "truncated gzip": gzip.compress((VIDUR + "0,1,1\n" * 2000).encode())[:-10],
    "fake parquet": b"PAR1" + bytes(64) + b"PAR1",
    "huge field": (VIDUR + "0,1,1\n1," + "1" * 200_000 + ",1\n").encode(),
    "ragged": (VIDUR + "0,1,1\n1,2,2,3,4\n").encode(),
    "quote": (VIDUR + '0,"1,1\n').encode(),
}


@pytest.mark.parametrize("name", [None, *FORMAT_NAMES, *CONTAINER_NAMES])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_files_every_format(tmp_path, case, name):
    for file in ("f.csv", "f.jsonl", "f.parquet"):
        check(write(tmp_path, file, HOSTILE[case]), **({} if name is None else options(name, "ms", 0)))


REFUSED = ["empty", "header only", "binary", "utf-16", "latin-1", "stray cr", "nan arrival", "huge arrival",
           "overflowing span", "mooncake nan", "mooncake 1e18 ms", "duplicate ids", "truncated gzip", "huge field"]


@pytest.mark.parametrize("case", REFUSED)
def test_cli_workload_stats_refuses_in_one_line(tmp_path, monkeypatch, capsys, case):
    ext = "jsonl" if case.startswith("mooncake") else "csv"
    path = write(tmp_path, f"hostile.{ext}", HOSTILE[case])
    code, out, err = cli(monkeypatch, capsys, "workload", "stats", str(path))
    assert code == 2, (out, err)
    assert err.startswith(f"servesim: error: {path}") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""


def test_cli_workload_stats_refuses_directories_and_gzip_bombs(tmp_path, monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "workload", "stats", str(tmp_path))
    assert code == 2 and err == f"servesim: error: {tmp_path}: is a directory; expected a trace file, a built-in " \
                                "workload or 'random'\n"
    bomb = write(tmp_path, "bomb.csv.gz", gzip.compress((VIDUR + "0,1,1\n" * 50_000).encode()))
    monkeypatch.setattr(source, "MAX_DECOMPRESSED_BYTES", 64 << 10)
    code, _, err = cli(monkeypatch, capsys, "workload", "stats", str(bomb))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"servesim: error: {bomb}: gzip data decompresses to more than 64 KiB, servesim's limit")


def test_cli_workload_stats_reads_old_mac_files(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, "mac.csv", HOSTILE["old mac"])
    code, out, err = cli(monkeypatch, capsys, "workload", "stats", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["count"] == 2
