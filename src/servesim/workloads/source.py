"""Reading a trace file's bytes: gzip undone, UTF-8 checked, and the container (CSV, JSONL, Parquet) recognised.

Every problem here is reported with the file and, where there is one, the line; nothing is guessed silently.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.errors import WorkloadError

CONTAINERS = ("csv", "jsonl", "parquet")
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
        raw = path.read_bytes()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    data = gunzip(raw, path) if raw[:2] == b"\x1f\x8b" else raw
    container = container or detect_container(path, data)
    if container == "parquet":
        return Source(path, data, container, parquet_columns(path, data))
    check_utf8(data, path)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    if not data or data.isspace():  # isspace: no copy of a large file
        raise WorkloadError(f"{path}: empty file; expected a header line (or a JSON object) and at least one request")
    header = jsonl_keys(data, path) if container == "jsonl" else csv_header(data)
    return Source(path, data, container, header)


def gunzip(raw: bytes, path: Path) -> bytes:
    """Decompress every gzip member; a truncated or corrupt stream says after which line it broke."""
    parts: list[bytes] = []
    rest = raw
    while rest:
        d = zlib.decompressobj(wbits=31)
        try:
            parts.append(d.decompress(rest))
        except zlib.error as exc:
            line = b"".join(parts).count(b"\n") + 1
            raise WorkloadError(f"{path}: corrupt gzip data at line {line} of the decompressed text ({exc})") from None
        if not d.eof:
            lines = b"".join(parts).count(b"\n")
            raise WorkloadError(
                f"{path}: truncated gzip file: the compressed stream ends after line {lines} without its "
                "end-of-stream marker; expected a complete .gz file (was the download or copy cut short?)"
            )
        rest = d.unused_data
    return b"".join(parts)


def check_utf8(data: bytes, path: Path) -> None:
    if data.isascii():
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        bad = data[exc.start : exc.end]
        header = csv_header(data) if line > 1 else ()
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


def csv_header(data: bytes) -> tuple[str, ...]:
    first = data.split(b"\n", 1)[0].decode("utf-8", errors="replace").rstrip("\r")
    return tuple(next(csv.reader([first]), []))


def jsonl_keys(data: bytes, path: Path) -> tuple[str, ...]:
    for n, line in enumerate(data.split(b"\n", 50), start=1):
        if line.strip():
            obj = parse_json_line(line, path, n)
            return tuple(obj)
    raise WorkloadError(f"{path}: empty file; expected one JSON object per line")


def parse_json_line(line: bytes, path: Path, n: int) -> dict:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        msg = getattr(exc, "msg", type(exc).__name__)
        raise WorkloadError(f"{path}: line {n}: not valid JSON ({msg}): {shorten(line)}") from None
    if not isinstance(obj, dict):
        raise WorkloadError(f"{path}: line {n}: got {shorten(line)}; expected a JSON object ({{...}}) on every line")
    return obj


def parquet_columns(path: Path, data: bytes) -> tuple[str, ...]:
    pl = require_polars()
    try:
        return tuple(pl.read_parquet_schema(io.BytesIO(data)))
    except Exception as exc:  # noqa: BLE001  polars raises many types for a bad file
        raise WorkloadError(f"{path}: not a readable Parquet file ({first_line(exc)})") from None


def shorten(value: object, limit: int = 60) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
