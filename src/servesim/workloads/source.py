"""Reading a trace file's bytes: gzip undone, UTF-8 checked, and the container (CSV, JSONL, Parquet) recognised.

Every problem here is reported with the file and, where there is one, the line; nothing is guessed silently.

Limits: gzip data may decompress to at most `MAX_DECOMPRESSED_BYTES` (4 GiB), so a small hostile file (a "gzip
bomb") is refused before it fills the memory; a larger trace loads once decompressed by hand (`gunzip`), since then
its size is plain to see. The Parquet columns read may decode to at most as much (declared rows x 8 bytes a value).
Only regular files are read (not directories, pipes or devices, which could block or never end). Line breaks are
`\n` or `\r\n`; a text file whose first line ends in a bare `\r` (old Mac) has every `\r` read as a line break.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import os
import re
import stat
import sys
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.errors import WorkloadError

CONTAINERS = ("csv", "jsonl", "parquet")
MAX_DECOMPRESSED_BYTES = 4 << 30  # 4 GiB of text from a .gz (deflate expands up to ~1000x: a 4 MiB file can do it)
NEEDS_POLARS = "reading trace files needs polars: pip install 'servesim[data]'"


def require_polars() -> Any:
    """polars, imported on first use (small plain CSV files are read without it)."""
    try:
        import polars as pl
    except ImportError:
        raise WorkloadError(NEEDS_POLARS) from None
    return pl


@dataclass(frozen=True, slots=True)
class Source:
    path: Path
    data: bytes  # decompressed, BOM stripped; for CSV and JSONL known to be valid UTF-8
    container: str  # "csv" | "jsonl" | "parquet"
    header: tuple[str, ...]  # CSV header fields, or the keys of the first JSON object, or Parquet columns

    def __str__(self) -> str:
        return str(self.path)


def read_source(path: Path, container: str | None = None) -> Source:
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise WorkloadError(f"{path}: is a directory; expected a trace file")
        if not stat.S_ISREG(mode):  # a pipe may never end (or never start), a device like /dev/zero never ends
            raise WorkloadError(f"{path}: not a regular file (a pipe, socket or device); expected a trace file")
        raw = path.read_bytes()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except MemoryError:
        raise WorkloadError(f"{path}: not enough memory to read the file") from None
    data = gunzip(raw, path) if raw[:2] == b"\x1f\x8b" else raw
    container = container or detect_container(path, data)
    if container == "parquet":
        return Source(path, data, container, parquet_columns(path, data))
    data = mac_line_breaks(data)
    check_utf8(data, path)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    if not data or data.isspace():  # isspace: no copy of a large file
        raise WorkloadError(f"{path}: empty file; expected a header line (or a JSON object) and at least one request")
    header = jsonl_keys(data, path) if container == "jsonl" else csv_header(data, path)
    return Source(path, data, container, header)


def gunzip(raw: bytes, path: Path) -> bytes:
    """Decompress every gzip member; a truncated or corrupt stream says after which line it broke. More than
    `MAX_DECOMPRESSED_BYTES` of output in all is refused as soon as it is produced: memory stays bounded."""
    limit = MAX_DECOMPRESSED_BYTES
    parts: list[bytes] = []
    size = 0
    rest = raw
    while rest:
        d = zlib.decompressobj(wbits=31)
        try:  # at most one byte over what is left: more output than that is the sign to stop
            parts.append(d.decompress(rest, limit - size + 1))
        except MemoryError:
            raise WorkloadError(f"{path}: not enough memory to decompress the gzip data") from None
        except zlib.error as exc:
            line = b"".join(parts).count(b"\n") + 1
            raise WorkloadError(f"{path}: corrupt gzip data at line {line} of the decompressed text ({exc})") from None
        size += len(parts[-1])
        if size > limit:
            raise WorkloadError(
                f"{path}: gzip data decompresses to more than {format_bytes(limit)}, servesim's limit "
                "(servesim.workloads.source.MAX_DECOMPRESSED_BYTES); expected a smaller trace, or decompress it "
                "first (gunzip) if it really is that large"
            )
        if not d.eof:
            lines = b"".join(parts).count(b"\n")
            raise WorkloadError(
                f"{path}: truncated gzip file: the compressed stream ends after line {lines} without its "
                "end-of-stream marker; expected a complete .gz file (was the download or copy cut short?)"
            )
        rest = d.unused_data
    return b"".join(parts)


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:,} bytes"


def mac_line_breaks(data: bytes) -> bytes:
    """Old Mac text, whose lines end in a bare CR, with LF line breaks instead (every CR or CRLF becomes one LF).
    Decided by the first line, so other files cost one search of their first line; a stray CR later in an LF or
    CRLF file is left for the readers, which name its line."""
    cr = data.find(b"\r", 0, 1 << 16)
    if cr < 0:
        return data
    lf = data.find(b"\n", 0, cr + 2)
    if 0 <= lf <= cr + 1:  # the first line ends in LF or CRLF before (or at) this CR
        return data
    return re.sub(rb"\r\n?", b"\n", data)


def check_utf8(data: bytes, path: Path) -> None:
    if data.isascii():
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        bad = data[exc.start : exc.end]
        try:
            header = csv_header(data) if line > 1 else ()
        except WorkloadError:
            header = ()
        field = data.count(b",", start, exc.start)  # the CSV column, counting delimiters before the byte
        col = f", column {header[field]!r}" if field < len(header) else ""
        raise WorkloadError(
            f"{path}: line {line}{col}, byte {exc.start - start + 1}: undecodable bytes {bad!r}; expected UTF-8 text"
        ) from None


def detect_container(path: Path, data: bytes) -> str:
    if data[:4] == b"PAR1":
        return "parquet"
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    if suffixes and suffixes[-1] == ".parquet":
        return "parquet"
    if suffixes and suffixes[-1] in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if data[:4096].lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":
        return "jsonl"
    return "csv"


def csv_header(data: bytes, path: Path | None = None) -> tuple[str, ...]:
    end = data.find(b"\n")
    first = data[: end if end >= 0 else len(data)].decode("utf-8", errors="replace").rstrip("\r")
    try:
        return tuple(next(csv.reader([first]), []))
    except csv.Error as exc:  # a stray CR in the header, or a field beyond the csv module's size limit
        raise WorkloadError(f"{path}: line 1: malformed CSV header ({csv_problem(exc)})") from None


def csv_problem(exc: csv.Error) -> str:
    """What a csv.Error means, in words that fit this file (the csv module's mention universal-newline mode)."""
    if "new-line character" in str(exc):
        return "a carriage return (\\r) inside a line; expected line breaks \\n or \\r\\n, or \\r throughout"
    return str(exc)


def jsonl_keys(data: bytes, path: Path) -> tuple[str, ...]:
    """The keys of the first object (within the first 50 lines), found without copying the rest of the file."""
    start = 0
    for n in range(1, 51):
        end = data.find(b"\n", start)
        line = data[start : end if end >= 0 else len(data)]
        if line.strip():
            return tuple(parse_json_line(line, path, n))
        if end < 0:
            break
        start = end + 1
    raise WorkloadError(f"{path}: empty file; expected one JSON object per line")


class NonFinite(str):
    """A JSON number no float holds (1e400, a 400-digit integer) or NaN/Infinity, which JSON does not have."""


def parse_json_line(line: bytes, path: Path, n: int) -> dict:
    """One JSON object. NaN, Infinity and numbers beyond a float's range are refused, naming the key holding them:
    polars cannot read them, and no arrival time or length is infinite."""
    bad: list[NonFinite] = []

    def number(text: str, kind: type) -> object:
        value = float(text)
        if math.isfinite(value):
            return kind(text)
        bad.append(NonFinite(text))
        return bad[-1]

    def constant(text: str) -> object:
        bad.append(NonFinite(text))
        return bad[-1]

    try:
        obj = json.loads(
            line,
            parse_float=lambda t: number(t, float),
            parse_int=lambda t: number(t, int),
            parse_constant=constant,
        )
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        msg = getattr(exc, "msg", first_line(exc) if isinstance(exc, ValueError) else type(exc).__name__)
        raise WorkloadError(f"{path}: line {n}: not valid JSON ({msg}): {shorten(line)}") from None
    if not isinstance(obj, dict):
        raise WorkloadError(f"{path}: line {n}: got {shorten(line)}; expected a JSON object ({{...}}) on every line")
    if bad:
        key = next((k for k, v in obj.items() if holds(v, bad[0])), None)
        where = f"line {n}, column {key!r}" if key is not None else f"line {n}"
        raise WorkloadError(
            f"{path}: {where}: got {shorten(str(bad[0]))}; expected a finite number "
            "(NaN, Infinity and numbers beyond +-1.8e308 are not valid JSON values here)"
        )
    return obj


def holds(value: object, item: object) -> bool:
    """Whether `item` (by identity) is `value` or inside it."""
    if value is item:
        return True
    if isinstance(value, list):
        return any(holds(v, item) for v in value)
    if isinstance(value, dict):
        return any(holds(v, item) for v in value.values())
    return False


def pyarrow_parquet() -> Any:
    """pyarrow.parquet (of the data extra), or None. Parquet is read with it where it is installed: polars' own
    reader aborts the whole process on some corrupt pages (asking for 2**61 bytes), pyarrow reports them."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    return pq


def parquet_columns(path: Path, data: bytes) -> tuple[str, ...]:
    pl = require_polars()
    pq = pyarrow_parquet()
    with HeldStderr() as held:
        try:
            if pq is not None:
                return tuple(pq.read_schema(io.BytesIO(data)).names)
            return tuple(pl.read_parquet_schema(io.BytesIO(data)))
        except (Exception, pl.exceptions.PanicException) as exc:  # noqa: BLE001  polars raises many types
            held.drop()
            raise WorkloadError(f"{path}: not a readable Parquet file ({first_line(exc)})") from None


def read_parquet(pl: Any, data: bytes, columns: list[str]) -> Any:
    """The columns of a Parquet file as a polars frame, through pyarrow where it is installed (see above)."""
    pq = pyarrow_parquet()
    if pq is None:
        return pl.read_parquet(io.BytesIO(data), columns=columns)
    return pl.from_arrow(pq.read_table(io.BytesIO(data), columns=columns))


class HeldStderr:
    """While polars reads a file, what native code writes to file descriptor 2 is held back: passed on afterwards,
    or dropped (`drop()`) when the read failed. A Rust panic on a corrupt file prints its message and backtrace
    there; the one-line WorkloadError that follows says what went wrong instead. Costs one temporary file.

    File descriptor 2 belongs to the whole process: while one thread holds it, others entering pass through (their
    output is held with the first one's), and only the first restores it."""

    _lock = threading.Lock()
    _held = False

    def __enter__(self) -> HeldStderr:
        self.saved: int | None = None
        self.keep = True
        with HeldStderr._lock:
            if HeldStderr._held:
                return self
            tmp = None
            try:
                import tempfile  # here: ~8 ms to import, and only reading with polars needs it

                sys.stderr.flush()
                tmp = tempfile.TemporaryFile()
                self.saved = os.dup(2)
                os.dup2(tmp.fileno(), 2)
            except (OSError, ValueError, AttributeError):  # no file descriptor 2, no room for a file: write as is
                if self.saved is not None:
                    os.close(self.saved)
                if tmp is not None:
                    tmp.close()
                self.saved = None
                return self
            self.tmp = tmp
            HeldStderr._held = True
        return self

    def drop(self) -> None:
        self.keep = False

    def __exit__(self, *exc: object) -> None:
        if self.saved is None:
            return
        with HeldStderr._lock:
            try:
                sys.stderr.flush()
            except (OSError, ValueError, AttributeError):
                pass
            os.dup2(self.saved, 2)
            os.close(self.saved)
            HeldStderr._held = False
        with self.tmp:
            self.tmp.seek(0)
            held = self.tmp.read()
        if held and self.keep:
            os.write(2, held)


def check_parquet_size(pl: Any, path: Path, data: bytes, columns: int) -> None:
    """Refuse Parquet whose declared rows decode to more than `MAX_DECOMPRESSED_BYTES` (8 bytes a value): Parquet
    compresses a constant column ~10,000x, so a small file can ask for more memory than any machine has."""
    pq = pyarrow_parquet()
    if pq is not None:
        rows = pq.read_metadata(io.BytesIO(data)).num_rows
    else:
        rows = pl.scan_parquet(io.BytesIO(data)).select(pl.len()).collect().item()
    if rows * 8 * columns > MAX_DECOMPRESSED_BYTES:
        raise WorkloadError(
            f"{path}: Parquet file of {rows:,} rows: its {columns} columns decode to more than "
            f"{format_bytes(MAX_DECOMPRESSED_BYTES)}, servesim's limit (servesim.workloads.source."
            "MAX_DECOMPRESSED_BYTES); expected a smaller trace"
        )


def shorten(value: object, limit: int = 60) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
