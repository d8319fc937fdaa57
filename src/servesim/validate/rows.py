"""The user's measurements (docs/accuracy.md, "Your own measurements"): one CSV row a measured point, or a JSON
list of objects with the same keys (or an object holding that list under "points").

Columns: `model`, `gpu`, `engine` (a servesim policy: vllm, sglang, ...), `tp`, `client` (`vllm-bench`,
`aiperf`, `sglang-bench`, `guidellm`, `inference-perf` or `mlperf`), the load (`concurrency`, a closed loop of
identical requests, or `request_rate`: Poisson, inference-perf's constant stage, MLPerf Server's target QPS),
`isl`, `osl`, `num_requests`, and at least one measured metric: `ttft_ms`, `tpot_ms`, `itl_ms`, `e2el_ms`,
`ntpot_ms` (inference-perf's latency / output tokens) (means, the client's own definitions), `output_throughput`
(tokens/s). Optional: `warmup_requests`
(excluded from the metrics, as the client excludes them), `max_num_seqs`, `max_num_batched_tokens`,
`quantization`, the parallel layout under the engine's own flags (vLLM's `enable_expert_parallel` true/false
and `data_parallel_size`; SGLang's `ep_size`, `enable_dp_attention`, `dp_size`: `servesim.cost.layout`), `cost`
(a servesim cost model: default `roofline`; `toy` makes predictions derivable by hand),
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
METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "ntpot_ms", "output_throughput")
OPTIONAL = ("tp", "concurrency", "request_rate", "warmup_requests", "max_num_seqs", "max_num_batched_tokens",
            "quantization", "cost", "engine_version", "id", "start", "frontend", "enable_expert_parallel",
            "data_parallel_size", "ep_size", "enable_dp_attention", "dp_size")
INTS = ("tp", "isl", "osl", "num_requests", "concurrency", "warmup_requests", "max_num_seqs",
        "max_num_batched_tokens", "data_parallel_size", "ep_size", "dp_size")
BOOLS = ("enable_expert_parallel", "enable_dp_attention")


@dataclass(frozen=True, slots=True)
class Point:
    """One measured deployment: `fields` as given (ints and floats parsed), `measured` metric -> value; `line`
    the CSV line, or the run file's path with `run` its requests (`servesim.measured.run.MeasuredRun`)."""

    line: int | str
    fields: dict
    measured: dict
    run: Any = None


def read_points(path: str | Path) -> list[Point]:
    """Every row, checked: a malformed value is one line naming the file, line and column (a JSON file's point,
    counted from 1, and key)."""
    import polars as pl

    path = Path(path)
    if path.suffix.lower() == ".json":
        return _json_points(path)
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
    _check_columns(path, df.columns, "column")
    return [_point(path, i + 2, row) for i, row in enumerate(df.iter_rows(named=True))]


def is_points_json(path: Path) -> bool:
    """Whether a .json file holds the user's points (a list, or an object with "points") rather than a run file
    (vllm bench serve's result, an object of its keys)."""
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False  # (read as a run file, which names what is wrong with it)
    return isinstance(doc, list) or isinstance(doc, dict) and "points" in doc


def _json_points(path: Path) -> list[Point]:
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"{path}: not readable JSON ({exc}); expected the format of docs/accuracy.md") from None
    rows = doc.get("points") if isinstance(doc, dict) else doc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise WorkloadError(f"{path}: expected a list of objects (one a measured point), or an object holding "
                            "that list under 'points'")
    points = []
    for i, row in enumerate(rows, 1):
        _check_columns(path, list(row), "key", f"point {i}")
        missing = [c for c in REQUIRED if c not in row]
        if missing:
            raise WorkloadError(f"{path}:point {i}: missing key {missing[0]!r}; expected {', '.join(REQUIRED)}")
        text = {k: None if v is None else v if isinstance(v, str) else json.dumps(v) for k, v in row.items()}
        points.append(_point(path, f"point {i}", text))
    return points


def _check_columns(path: Path, names: list, what: str, where: str = "") -> None:
    unknown = [c for c in names if c not in (*REQUIRED, *METRICS, *OPTIONAL)]
    if unknown:
        raise WorkloadError(f"{path}{':' + where if where else ''}: unknown {what} {unknown[0]!r}; expected the "
                            f"columns of docs/accuracy.md")


def _point(path: Path, line: int | str, row: dict) -> Point:
    fields, measured = {}, {}
    for name, text in row.items():
        if text is None or text == "":
            if name in REQUIRED:
                raise WorkloadError(f"{path}:{line}: {name}: empty; expected a value")
            continue
        if name in INTS:
            fields[name] = _number(path, line, name, text, int)
        elif name in BOOLS:
            if text.strip().lower() not in ("true", "false"):
                raise WorkloadError(f"{path}:{line}: {name}: got {text!r}; expected true or false")
            fields[name] = text.strip().lower() == "true"
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


def _number(path: Path, line: int | str, name: str, text: str, kind: type) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0 and name != "warmup_requests" or value < 0:
        what = "an integer" if kind is int else "a number"
        raise WorkloadError(f"{path}:{line}: {name}: got {text!r}; expected {what} > 0")
    return value
