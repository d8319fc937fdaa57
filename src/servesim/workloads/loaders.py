"""Trace loaders: a file in any known format to one `RequestTable`, with polars doing the row work.

Fast path: polars parses the whole file into typed columns and numpy checks them in bulk. Only when something is
wrong do we walk the text in Python, to name the exact line, column and value. Small plain CSV files skip polars'
import (`plaincsv`): the same checks run on what the csv module read, and any value they reject sends the file here.

Checked on every file: lengths are whole numbers from 1 to `MAX_TOKENS`; arrival times are finite and span at most
`MAX_ARRIVAL_S` (10 years); request ids, when the file has them, are unique (two requests with one id would be
merged by every report that names requests).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from servesim.errors import WorkloadError
from servesim.workloads.formats import TIME_UNITS, TraceFormat, check_header, choose_format, did_you_mean, names
from servesim.workloads.plaincsv import read_plain_csv
from servesim.workloads.source import (
    CONTAINERS,
    NEEDS_POLARS,
    HeldStderr,
    Source,
    check_parquet_size,
    csv_problem,
    first_line,
    parse_json_line,
    read_parquet,
    read_source,
    require_polars,
    shorten,
)
from servesim.workloads.table import MAX_ARRIVAL_S, MAX_TOKENS, RequestTable, take_hashes

AZURE_TIME = "%Y-%m-%d %H:%M:%S%.f"  # e.g. 2023-11-16 18:17:03.9799600 (7 fractional digits)


def load_trace(
    path: str | Path,
    format: str | None = None,
    columns: str | None = None,
    time_unit: str | None = None,
    trace_model: str | None = None,
    log_type: str | None = None,
    keep_failed: bool = False,
) -> RequestTable:
    """Load a trace file, sorted by arrival, arrival times in seconds from the first request.

    `format`: a name in `FORMATS` (or an alias), a container (`csv`, `jsonl`, `parquet`) with `columns`, or None to
    detect from the header. `trace_model` / `log_type` keep only BurstGPT rows with that `Model` / `Log Type`.
    `keep_failed`: keep BurstGPT rows with 0 response tokens (then they are an error, as in any other format).
    """
    path = Path(path)
    src = read_source(path, format if format in CONTAINERS else None)
    fmt = choose_format(format, columns, time_unit, src.header, str(path))
    check_header(fmt, src.header, str(path))
    filters = {col: v for col, v in (("Model", trace_model), ("Log Type", log_type)) if v is not None}
    if filters and fmt.name != "burstgpt":
        raise WorkloadError(f"--trace-model and --log-type filter BurstGPT traces; {path} is {fmt.name}")
    for col in filters:
        check_header(TraceFormat(fmt.name, None, col, col), src.header, str(path))
    roles = {"arrival": fmt.arrival, "prompt": fmt.prompt, "output": fmt.output, **fmt.required_extra}
    roles |= {r: c for r, c in fmt.optional.items() if c in src.header}
    extra = [*filters, *(["NumImages"] if "NumImages" in src.header else [])]
    if importlib.util.find_spec("polars") is None:  # trace files need the data extra, even those read without it
        raise WorkloadError(NEEDS_POLARS)
    loc = Locator(src)
    plain = None if extra else read_plain_csv(src, fmt, roles)
    if plain is not None and (table := plain_table(plain, fmt, keep_failed, loc)) is not None:
        return table
    pl = require_polars()
    with HeldStderr() as held:  # a panic's backtrace on a corrupt file is dropped: the one-line error replaces it
        try:
            frame = read_frame(pl, src, fmt, roles, extra)
            return build_table(pl, frame, fmt, roles, filters, keep_failed, loc)
        except WorkloadError:
            raise
        except (Exception, pl.exceptions.PanicException) as exc:  # noqa: BLE001  anything polars throws: the file's fault
            held.drop()
            raise WorkloadError(f"{path}: cannot read as {src.container} ({first_line(exc)})") from None


def read_frame(pl: Any, src: Source, fmt: TraceFormat, roles: dict[str, str | None], extra: list[str]) -> Any:
    cols = list(dict.fromkeys([c for c in roles.values() if c] + extra))
    numeric = {roles[r] for r in ("prompt", "output", "priority") if roles.get(r)}
    if fmt.time_unit != "datetime" and roles["arrival"]:
        numeric.add(roles["arrival"])
    data = io.BytesIO(src.data)
    if src.container == "parquet":
        check_parquet_size(pl, src.path, src.data, len(cols) + 1)  # + 1: the row index
        frame = read_parquet(pl, src.data, cols)
    elif src.container == "jsonl":
        schema = {c: pl.Float64 if c in numeric else pl.String for c in cols}
        if roles.get("hash_ids"):
            schema[roles["hash_ids"]] = pl.List(pl.Int64)
        try:  # typed first; strings when a value is not a number, so the checks below can name it
            frame = pl.read_ndjson(data, schema=schema)
        except (Exception, pl.exceptions.PanicException):  # noqa: BLE001
            try:
                frame = pl.read_ndjson(io.BytesIO(src.data), schema={**schema, **{c: pl.String for c in numeric}})
            except (Exception, pl.exceptions.PanicException):  # noqa: BLE001
                Locator(src).raise_jsonl_problem(roles.get("hash_ids"))
                raise
    else:
        # text roles stay text: ids '007' and '7.0' are not 7, and one hash id a row ('4') is still a list
        text = {roles[r]: pl.String for r in ("hash_ids", "id", "session") if roles.get(r)}
        try:  # typed: fastest, and right for every clean file
            frame = pl.read_csv(data, columns=cols, schema_overrides=text | {c: pl.Float64 for c in numeric})
        except (Exception, pl.exceptions.PanicException):  # noqa: BLE001
            Locator(src).raise_csv_shape_problem()
            frame = pl.read_csv(io.BytesIO(src.data), columns=cols, infer_schema=False)
        frame = frame.with_row_index("__row").filter(~pl.all_horizontal(pl.exclude("__row").is_null()))
        return frame  # rows that are all empty are blank lines, skipped like the csv module skips them
    return frame.with_row_index("__row")


def build_table(
    pl: Any,
    frame: Any,
    fmt: TraceFormat,
    roles: dict[str, str | None],
    filters: dict[str, str],
    keep_failed: bool,
    loc: Locator,
) -> RequestTable:
    notes: list[str] = []
    for col, value in filters.items():
        values = frame[col].cast(pl.String).str.strip_chars()
        if value not in set(values.unique().drop_nulls().to_list()):
            present = sorted(values.unique().drop_nulls().to_list())[:10]
            raise WorkloadError(
                f"{loc.src}: no rows with {col} = {value!r}{did_you_mean(value, present)}; "
                f"values present: {names(tuple(present))}"
            )
        before = frame.height
        frame = frame.filter(values == value)
        notes.append(f"kept {frame.height:,} of {before:,} requests with {col} = {value!r}")
    if frame.height == 0:
        raise WorkloadError(f"{loc.src}: no requests; expected at least one data row after the header")
    if "NumImages" in frame.columns:
        images = int((frame["NumImages"].cast(pl.Float64, strict=False).fill_null(0) > 0).sum())
        notes.append(f"ignored column NumImages ({images:,} requests carry images; only text tokens are simulated)")
    rows = frame["__row"].to_numpy().astype(np.int64)
    failed_ok = fmt.name == "burstgpt" and not keep_failed
    prompt = whole_numbers(pl, frame[roles["prompt"]], rows, loc, minimum=1, maximum=MAX_TOKENS)
    output = whole_numbers(pl, frame[roles["output"]], rows, loc, minimum=0 if failed_ok else 1, maximum=MAX_TOKENS)
    extra: dict[str, Any] = {}
    if roles.get("priority"):
        extra["priority"] = whole_numbers(pl, frame[roles["priority"]], rows, loc, minimum=None)
    if roles.get("session"):
        extra["session_id"] = session_ids(pl, frame[roles["session"]])
    if roles.get("id"):
        ids = frame[roles["id"]].cast(pl.String).fill_null("")
        if ids.n_unique() < len(ids):
            loc.fail_duplicate(rows, ids.rename(roles["id"]))
        extra["request_id"] = ids.to_numpy().astype(object)
    if roles.get("hash_ids"):
        extra["hash_ids"], extra["hash_offsets"] = hash_lists(pl, frame[roles["hash_ids"]], rows, loc)
        extra["hash_block_size"] = fmt.hash_block_size
    arrival = (
        arrival_seconds(pl, frame[roles["arrival"]], fmt.time_unit, rows, loc)
        if roles["arrival"]
        else np.zeros(len(rows))
    )
    return finish_table(arrival, prompt, output, rows, extra, notes, failed_ok, roles["arrival"] is not None, loc)


def plain_table(cols: dict[str, np.ndarray], fmt: TraceFormat, keep_failed: bool, loc: Locator) -> RequestTable | None:
    """The table from `read_plain_csv`'s columns, through the same checks as polars' columns; None when a value
    fails them, so that the polars reader names its line."""
    failed_ok = fmt.name == "burstgpt" and not keep_failed
    prompt, output = cols["prompt"], cols["output"]
    if not_whole(prompt, 1, MAX_TOKENS).any() or not_whole(output, 0 if failed_ok else 1, MAX_TOKENS).any():
        return None
    if "arrival" in cols:
        if not (np.isfinite(cols["arrival"]).all() and span_ok(cols["arrival"], fmt.time_unit)):
            return None
        arrival = seconds(cols["arrival"], fmt.time_unit)
    else:
        arrival = np.zeros(len(prompt))
    rows = np.arange(len(prompt), dtype=np.int64)
    return finish_table(arrival, prompt.astype(np.int64), output.astype(np.int64), rows, {}, [], failed_ok,
                        "arrival" in cols, loc)


def finish_table(arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray, rows: np.ndarray, extra: dict[str, Any],
                 notes: list[str], failed_ok: bool, has_arrivals: bool, loc: Locator) -> RequestTable:
    """Checked columns to a table: failed requests dropped (BurstGPT), rows sorted by arrival, times from 0."""
    keep = np.flatnonzero(output > 0) if failed_ok else np.arange(len(rows))
    if len(keep) == 0:
        raise WorkloadError(f"{loc.src}: every request failed (0 response tokens); nothing to simulate")
    if len(keep) < len(rows):
        notes.append(
            f"dropped {len(rows) - len(keep):,} failed requests (0 response tokens); --keep-failed makes them an error"
        )
    late = int(np.count_nonzero(np.diff(arrival[keep]) < 0))
    if late:
        notes.append(f"{late:,} timestamps were earlier than the line before them (out of order); sorted by arrival")
        keep = keep[np.argsort(arrival[keep], kind="stable")]  # stable: equal timestamps keep file order
    if len(keep) < len(rows) or late:  # most traces: nothing dropped, already sorted, no copies
        if extra.get("hash_ids") is not None:
            extra["hash_ids"], extra["hash_offsets"] = take_hashes(extra["hash_ids"], extra["hash_offsets"], keep)
        for name in ("priority", "session_id", "request_id"):
            if name in extra:
                extra[name] = extra[name][keep]
        arrival, prompt, output, rows = arrival[keep], prompt[keep], output[keep], rows[keep]
    return RequestTable(
        arrival - arrival[0], prompt, output, row=rows, notes=tuple(notes), has_arrivals=has_arrivals, **extra
    )


def not_whole(values: np.ndarray, minimum: int | None, maximum: int | None = None) -> np.ndarray:
    """Where `values` are not whole numbers in [minimum, maximum] (NaN, for a value that is not a number, never is)."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) > 2**53)
        if minimum is not None:
            bad |= values < minimum
        if maximum is not None:
            bad |= values > maximum
    return bad


def whole_numbers(
    pl: Any, col: Any, rows: np.ndarray, loc: Locator, minimum: int | None, maximum: int | None = None
) -> np.ndarray:
    values = as_float(pl, col)
    bad = not_whole(values, minimum, maximum)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        expected = "a whole number" + (f" >= {minimum}" if minimum is not None else "")
        if minimum == 1 and values[i] == 0:
            expected += " (a request has at least one token each way)"
        if maximum is not None and np.isfinite(values[i]) and values[i] > maximum:
            expected = f"a whole number <= {maximum:,} (no context window comes near it)"
        elif not np.isfinite(values[i]) and loc.is_number(rows, col, i):
            expected = "a finite " + expected.removeprefix("a ")
        loc.fail(rows, col, i, expected)
    return values.astype(np.int64)


def as_float(pl: Any, col: Any) -> np.ndarray:
    if col.dtype == pl.String:
        col = col.str.strip_chars()
    if col.dtype == pl.Boolean or not (col.dtype.is_numeric() or col.dtype == pl.String):
        return np.full(len(col), np.nan)
    return col.cast(pl.Float64, strict=False).fill_null(np.nan).to_numpy()


def arrival_seconds(pl: Any, col: Any, unit: str, rows: np.ndarray, loc: Locator) -> np.ndarray:
    if unit != "datetime":
        values = as_float(pl, col)
        if not (ok := np.isfinite(values)).all():
            loc.fail(rows, col, int(np.argmin(ok)), f"a finite number of {unit_name(unit)}")
        if not span_ok(values, unit):
            loc.fail_span(rows, col, values)
        return seconds(values, unit)
    stamps = col
    if col.dtype == pl.String:
        try:
            stamps = col.str.strip_chars().str.to_datetime(
                AZURE_TIME if col.name == "TIMESTAMP" else None, time_unit="ns", strict=False
            )
        except pl.exceptions.PolarsError:  # no format could be inferred from the first value: none is a date
            stamps = pl.Series(col.name, [None] * len(col), pl.Datetime("ns"))
    ok = stamps.is_not_null().to_numpy() if stamps.dtype.is_temporal() else np.zeros(len(col), bool)
    if not ok.all():
        loc.fail(rows, col, int(np.argmin(ok)), "a date and time such as 2023-11-16 18:17:03.9799600")
    values = stamps.cast(pl.Datetime("ns")).cast(pl.Int64).to_numpy()
    if not span_ok(values, unit):
        loc.fail_span(rows, col, values)
    return seconds(values, unit)


def span_ok(values: np.ndarray, unit: str) -> bool:
    """Whether finite arrival values in `unit` (int64 nanoseconds for datetimes) span at most `MAX_ARRIVAL_S`.
    In Python numbers: a span beyond int64 or float64 does not wrap or overflow here."""
    if len(values) == 0:
        return True
    lo, hi = values.min(), values.max()
    if unit == "datetime":
        return int(hi) - int(lo) <= MAX_ARRIVAL_S * 10**9
    return float(hi) / TIME_UNITS[unit] - float(lo) / TIME_UNITS[unit] <= MAX_ARRIVAL_S


def seconds(values: np.ndarray, unit: str) -> np.ndarray:
    """Arrival values in `unit` (int64 nanoseconds for datetimes) to float seconds; their span is `span_ok`."""
    if unit == "datetime":
        return (values - values.min()).astype(np.float64) / 1e9  # subtract in integers: no precision lost
    return values / TIME_UNITS[unit]  # divide: 3536999 ms is exactly 3536.999 s


def unit_name(unit: str) -> str:
    return {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[unit]


def session_ids(pl: Any, col: Any) -> np.ndarray:
    """Numeric session ids as they are; anything else numbered in order of first appearance."""
    values = as_float(pl, col)
    if np.all(np.isfinite(values)) and np.all(values == np.round(values)):
        return values.astype(np.int64)
    text = col.cast(pl.String).fill_null("").to_numpy().astype(str)
    _, first, inverse = np.unique(text, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first)).astype(np.int64)[inverse.ravel()]


def hash_lists(pl: Any, col: Any, rows: np.ndarray, loc: Locator) -> tuple[np.ndarray, np.ndarray]:
    if col.dtype == pl.String:  # CSV: space-separated integers, as `servesim workload generate` writes them
        col = col.fill_null("").str.strip_chars().str.split(" ").list.eval(pl.element().filter(pl.element() != ""))
        parsed = col.list.eval(pl.element().cast(pl.Int64, strict=False))
        bad = (parsed.list.eval(pl.element().is_null()).list.any()).fill_null(False).to_numpy()
        if bad.any():
            loc.fail(rows, col, int(np.flatnonzero(bad)[0]), "integers separated by spaces")
        col = parsed
    if not isinstance(col.dtype, pl.List) or not (col.dtype.inner.is_integer() or col.dtype.inner == pl.Null):
        loc.fail(rows, col, 0, "a list of integers")  # Parquet: a column of another type
    lengths = col.list.len().fill_null(0).to_numpy().astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    flat = col.explode().drop_nulls().to_numpy().astype(np.int64)  # explode gives a null for an empty list
    if len(flat) != offsets[-1]:  # a null inside a list: dropped above, so the offsets would not match
        holes = col.list.eval(pl.element().is_null()).list.any().fill_null(False).to_numpy()
        loc.fail(rows, col, int(np.flatnonzero(holes)[0]), "a list of integers (without nulls)")
    return flat, offsets


class Locator:
    """Error path only: finds the line of a data row and the text of a cell, by reading the file again."""

    def __init__(self, src: Source) -> None:
        self.src = src

    def fail(self, rows: np.ndarray, col: Any, i: int, expected: str) -> NoReturn:
        """Element i of column `col` (data row rows[i]) is bad: say where, what it is, and what was expected."""
        where, shown = self.cell(rows, col, i)
        raise WorkloadError(f"{self.src}: {where}, column {col.name!r}: got {shown}; expected {expected}")

    def fail_span(self, rows: np.ndarray, col: Any, values: np.ndarray) -> NoReturn:
        """Arrivals spanning more than `MAX_ARRIVAL_S`: name the one furthest from the median, and the other end."""
        x = values.astype(np.float64)
        hi, lo, mid = int(np.argmax(x)), int(np.argmin(x)), np.median(x)
        i, j = (hi, lo) if x[hi] - mid >= mid - x[lo] else (lo, hi)  # the outlier, and the other end
        where, shown = self.cell(rows, col, i)
        other, other_shown = self.cell(rows, col, j)
        raise WorkloadError(
            f"{self.src}: {where}, column {col.name!r}: got {shown}; expected arrival times within 10 years "
            f"({MAX_ARRIVAL_S:,} s, servesim's limit) of each other, and {other} has {other_shown}"
        )

    def fail_duplicate(self, rows: np.ndarray, ids: Any) -> NoReturn:
        """Two rows with one request id: name both lines and the id."""
        seen: dict[str, int] = {}
        for i, value in enumerate(ids.to_list()):
            j = seen.setdefault(value, i)
            if j != i:
                where, shown = self.cell(rows, ids, i)
                first, _ = self.cell(rows, ids, j)
                raise WorkloadError(
                    f"{self.src}: {where}, column {ids.name!r}: got {shown}, the id of {first} too; "
                    "expected a different request id on every row"
                )
        raise AssertionError("fail_duplicate: no duplicate")  # pragma: no cover

    def cell(self, rows: np.ndarray, col: Any, i: int) -> tuple[str, str]:
        """Where element i of column `col` is, and its text as the file has it."""
        where, value = self.locate(int(rows[i]), col.name)
        if value is None:  # Parquet has no lines: show the value as read
            value = col[i]
            value = shorten(value.to_list() if hasattr(value, "to_list") else value)  # a list cell is a Series
        return where, "an empty value" if value in ("''", "'None'") else value

    def is_number(self, rows: np.ndarray, col: Any, i: int) -> bool:
        """Whether element i of `col`, not finite when read, was written as a number (inf, 1e400, NaN), not a word."""
        value = col[i]
        if isinstance(value, float):
            return True
        try:
            float(str(value).strip())
        except ValueError:
            return False
        return True

    def records(self) -> Any:
        """The CSV text as (line number, fields) after the header; a malformed line is an error naming it."""
        reader = csv.reader(io.StringIO(self.src.data.decode("utf-8")))
        try:
            header = next(reader, [])
            yield 0, header
            for record in reader:
                yield reader.line_num, record
        except csv.Error as exc:
            raise WorkloadError(f"{self.src}: line {reader.line_num}: malformed CSV ({csv_problem(exc)})") from None

    def locate(self, row: int, column: str) -> tuple[str, str | None]:
        if self.src.container == "csv":
            records = self.records()
            _, header = next(records)
            for i, (line, record) in enumerate(records):
                if i == row:
                    j = header.index(column) if column in header else -1
                    return f"line {line}", shorten(record[j] if 0 <= j < len(record) else "")
        if self.src.container == "jsonl":
            k = -1
            for n, line in enumerate(self.src.data.split(b"\n"), start=1):
                if line.strip():
                    k += 1
                    if k == row:
                        obj = parse_json_line(line, self.src.path, n)
                        return f"line {n}", shorten(json.dumps(obj[column])) if column in obj else "no such key"
        return f"row {row + 1}", None

    def raise_csv_shape_problem(self) -> None:
        """A row with more fields than the header, or unbalanced quotes: name its line."""
        records = self.records()
        _, header = next(records)
        for line, record in records:
            if len(record) > len(header):
                raise WorkloadError(
                    f"{self.src}: line {line}: {len(record)} fields, but the header has "
                    f"{len(header)}; expected one value per column"
                )

    def raise_jsonl_problem(self, hash_col: str | None) -> None:
        for n, line in enumerate(self.src.data.split(b"\n"), start=1):
            if not line.strip():
                continue
            obj = parse_json_line(line, self.src.path, n)
            if hash_col and hash_col in obj:
                h = obj[hash_col]
                if not (isinstance(h, list) and all(type(x) is int and -(2**63) <= x < 2**63 for x in h)):
                    raise WorkloadError(
                        f"{self.src}: line {n}, column {hash_col!r}: got {shorten(json.dumps(h))}; "
                        "expected a list of integers"
                    )
