"""The user's measurements (docs/accuracy.md, "Your own measurements"): one CSV row a measured point.

Columns: `model`, `gpu`, `engine` (a servesim policy: vllm, sglang, ...), `tp`, `client` (`vllm-bench`,
`aiperf`, `sglang-bench` or `guidellm`), the load (`concurrency`, a closed loop of identical requests, or
`request_rate`, Poisson), `isl`, `osl`, `num_requests`, and at least one measured metric: `ttft_ms`, `tpot_ms`,
`itl_ms`, `e2el_ms` (means, the client's own definitions), `output_throughput` (tokens/s). Optional: `warmup_requests`
(excluded from the metrics, as the client excludes them), `max_num_seqs`, `max_num_batched_tokens`,
`quantization`, `cost` (a servesim cost model: default `roofline`; `toy` makes predictions derivable by hand),
`engine_version` (carried into the groups), `start` (`together`, the default: a closed loop's users all start at
0, and identical requests stay in waves; `staggered`: they start a C-th of a lone request's latency apart, a
desynchronised stream), `frontend` (the path outside the engine core, `servesim.engine.frontend`: vllm, sglang
or none, the default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.errors import WorkloadError

REQUIRED = ("model", "gpu", "engine", "client", "isl", "osl", "num_requests")
METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_throughput")
OPTIONAL = ("tp", "concurrency", "request_rate", "warmup_requests", "max_num_seqs", "max_num_batched_tokens",
            "quantization", "cost", "engine_version", "id", "start", "frontend")
INTS = ("tp", "isl", "osl", "num_requests", "concurrency", "warmup_requests", "max_num_seqs",
        "max_num_batched_tokens")


@dataclass(frozen=True, slots=True)
class Point:
    """One measured deployment: `fields` as given (ints and floats parsed), `measured` metric -> value; `line`
    the CSV line, or the run file's path with `run` its requests (`servesim.measured.run.MeasuredRun`)."""

    line: int | str
    fields: dict
    measured: dict
    run: Any = None


def read_points(path: str | Path) -> list[Point]:
    """Every row, checked: a malformed value is one line naming the file, line and column."""
    import polars as pl

    path = Path(path)
    try:
        df = pl.read_csv(path, infer_schema_length=0)  # all text: parsed here, with the line of each error
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise WorkloadError(f"{path}: not a readable CSV ({exc}); expected the format of docs/accuracy.md") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise WorkloadError(f"{path}: missing column {missing[0]!r}; expected {', '.join(REQUIRED)} and a metric "
                            f"({', '.join(METRICS)})")
    if not any(m in df.columns for m in METRICS):
        raise WorkloadError(f"{path}: no measured metric; expected one of {', '.join(METRICS)}")
    unknown = [c for c in df.columns if c not in (*REQUIRED, *METRICS, *OPTIONAL)]
    if unknown:
        raise WorkloadError(f"{path}: unknown column {unknown[0]!r}; expected the columns of docs/accuracy.md")
    return [_point(path, i + 2, row) for i, row in enumerate(df.iter_rows(named=True))]


def _point(path: Path, line: int, row: dict) -> Point:
    fields, measured = {}, {}
    for name, text in row.items():
        if text is None or text == "":
            if name in REQUIRED:
                raise WorkloadError(f"{path}:{line}: {name}: empty; expected a value")
            continue
        if name in INTS:
            fields[name] = _number(path, line, name, text, int)
        elif name in METRICS or name == "request_rate":
            value = _number(path, line, name, text, float)
            (measured if name in METRICS else fields)[name] = value
        else:
            fields[name] = text.strip()
    if not measured:
        raise WorkloadError(f"{path}:{line}: no measured metric; expected one of {', '.join(METRICS)}")
    if fields.get("start", "together") not in ("together", "staggered"):
        raise WorkloadError(f"{path}:{line}: start: got {fields['start']!r}; expected together or staggered")
    if ("concurrency" in fields) == ("request_rate" in fields):
        raise WorkloadError(f"{path}:{line}: give one of concurrency and request_rate (the client's load)")
    return Point(line, fields, measured)


def _number(path: Path, line: int, name: str, text: str, kind: type) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0 and name != "warmup_requests" or value < 0:
        what = "an integer" if kind is int else "a number"
        raise WorkloadError(f"{path}:{line}: {name}: got {text!r}; expected {what} > 0")
    return value
