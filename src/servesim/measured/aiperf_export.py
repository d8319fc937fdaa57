"""AIPerf's per-request export as a measured run (ai-dynamo/aiperf 0.1.1 at db4f639:
docs/tutorials/working-with-profile-exports.md, aiperf/common/models/record_models.py).

`profile_export.jsonl`: one record a line, `{"metadata": {...}, "metrics": {...}, "error": ...}`. Read from each
profiling-phase record (`metadata.benchmark_phase`; others are AIPerf's warm-up, not measured): the send
(`metadata.request_start_ns`, epoch nanoseconds), `metrics.input_sequence_length`, `output_sequence_length`,
`time_to_first_token` and `request_latency` (`{"value", "unit"}`, display units: ms). A record with an `error`
failed. Records are written as they complete; the run is put back in send order. The aggregates (`means`) are
AIPerf's: the mean over the records of TTFT, request latency and inter-token latency (request latency - TTFT) /
(OSL - 1); output token throughput = the OSLs' sum over the first send to the last response.

`profile_export_aiperf.json` beside it, where present, gives the load (`input_config.loadgen`: `concurrency`,
`request_rate`, `request_count`, `warmup_request_count`) and the model (`input_config.endpoint.model_names`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from servesim.cost.specs import is_finite, is_int, parse_json_input, read_input_text, show
from servesim.errors import ConfigError
from servesim.measured.run import MeasuredRun

RECORDS_FILE, SUMMARY_FILE = "profile_export.jsonl", "profile_export_aiperf.json"
WHAT = "AIPerf's profile_export.jsonl (one {metadata, metrics, error} record a line)"
TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1.0, "s": 1.0}


def read(path: str | Path) -> MeasuredRun:
    path = Path(path)
    text = read_input_text(path, WHAT)
    rows, failed = [], 0
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{line_no}: not valid JSON: {exc.msg}; expected {WHAT}") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("metadata"), dict):
            raise ConfigError(f"{path}:{line_no}: metadata: missing; expected {WHAT}")
        if rec["metadata"].get("benchmark_phase", "profiling") != "profiling":
            continue
        if rec.get("error") is not None:
            failed += 1
            continue
        rows.append(_row(path, line_no, rec))
    if not rows:
        raise ConfigError(f"{path}: no successful profiling record; expected {WHAT}")
    rows.sort(key=lambda r: r[0])
    start_ns, isl, osl, ttft, e2el, end_ns = (np.array(c) for c in zip(*rows))
    t0 = int(start_ns.min())  # (epoch nanoseconds: differences taken as integers, then seconds)
    start, end = (start_ns - t0) * 1e-9, (end_ns - t0) * 1e-9
    load, model = _summary(path.with_name(SUMMARY_FILE))
    with np.errstate(invalid="ignore", divide="ignore"):
        itl = np.where(osl > 1, (e2el - ttft) / np.maximum(osl - 1, 1), np.nan)
    duration = float(end.max())
    means = {"ttft_ms": float(ttft.mean() * 1e3), "e2el_ms": float(e2el.mean() * 1e3),
             "output_throughput": float(osl.sum() / duration) if duration > 0 else float("nan")}
    if np.isfinite(itl).any():
        means["itl_ms"] = means["tpot_ms"] = float(np.nanmean(itl) * 1e3)  # AIPerf's ITL is per request
    return MeasuredRun(path, "aiperf", model, {}, load, isl.astype(np.int64), osl.astype(np.int64),
                       start, ttft, e2el, means, failed)


def _row(path: Path, line_no: int, rec: dict) -> tuple:
    start, end = rec["metadata"].get("request_start_ns"), rec["metadata"].get("request_end_ns")
    if not (is_int(start) and is_int(end) and end >= start):
        raise ConfigError(f"{path}:{line_no}: metadata.request_start_ns, request_end_ns: expected epoch "
                          f"nanoseconds, end >= start, got {show(start)}, {show(end)}")
    metrics = rec.get("metrics")
    if not isinstance(metrics, dict):
        raise ConfigError(f"{path}:{line_no}: metrics: expected an object of {{value, unit}}, got {show(metrics)}")
    isl, osl = (_value(path, line_no, metrics, k, count=True) for k in ("input_sequence_length",
                                                                          "output_sequence_length"))
    ttft, e2el = (_value(path, line_no, metrics, k) for k in ("time_to_first_token", "request_latency"))
    return start, isl, osl, ttft, e2el, end


def _value(path: Path, line_no: int, metrics: dict, key: str, count: bool = False) -> float:
    m = metrics.get(key)
    if not isinstance(m, dict) or "value" not in m:
        raise ConfigError(f"{path}:{line_no}: metrics.{key}: missing; expected {{\"value\": ..., \"unit\": ...}} "
                          "(a streaming run's record)")
    v, unit = m["value"], m.get("unit")
    if count:
        if not (is_int(v) and v >= 1):
            raise ConfigError(f"{path}:{line_no}: metrics.{key}: expected tokens >= 1, got {show(v)}")
        return v
    if unit not in TO_SECONDS or not (is_finite(v) and v >= 0):
        raise ConfigError(f"{path}:{line_no}: metrics.{key}: expected a time >= 0 in one of "
                          f"{', '.join(TO_SECONDS)}, got {show(v)} {show(unit)}")
    return float(v) * TO_SECONDS[unit]


def _summary(path: Path) -> tuple[dict, str | None]:
    """The load and model from profile_export_aiperf.json, where it is beside the records."""
    if not path.is_file():
        return {}, None
    data = parse_json_input(path, read_input_text(path, "AIPerf's profile_export_aiperf.json"), "a JSON object")
    cfg = data.get("input_config") if isinstance(data, dict) else None
    loadgen = cfg.get("loadgen", {}) if isinstance(cfg, dict) else {}
    load = {k: loadgen[k] for k in ("concurrency", "request_rate", "request_count", "warmup_request_count")
            if isinstance(loadgen, dict) and loadgen.get(k) is not None}
    names = (cfg.get("endpoint") or {}).get("model_names") if isinstance(cfg, dict) else None
    return load, names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
