"""`vllm bench serve --save-result [--save-detailed]`'s result file as a measured run (vLLM 0.33,
vllm/benchmarks/serve.py; servesim's own result file is a superset).

Read: `model_id`; the load (`request_rate`, a number or "inf"; `burstiness`; `max_concurrency`; the ramp-up's
`ramp_up_strategy`, `ramp_up_start_rps`, `ramp_up_end_rps`); the means vLLM reports (`mean_ttft_ms`,
`mean_tpot_ms`, `mean_itl_ms`, `mean_e2el_ms`, `output_throughput`); the deployment from `--metadata KEY=VALUE`
keys (`gpu`, `tp`, `engine`, ...: `servesim.measured.run.DEPLOYMENT_KEYS`), which vLLM writes at the top level.
With `--save-detailed`, the per-request arrays in send order: `input_lens`, `output_lens`, `ttfts` (seconds),
`itls` (seconds per request), `errors` (a failed request: a non-empty error, TTFT 0, no ITLs), and where the file
has them `start_times` (each request's send on the client's clock, which newer vLLM writes). Without them the
lengths are the means (`total_input_tokens` and `total_output_tokens` over `completed`), and `per_request` is
False.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from servesim.cost.specs import is_finite, is_int, parse_json_input, read_input_text, show
from servesim.errors import ConfigError
from servesim.measured.run import DEPLOYMENT_KEYS, MeasuredRun

WHAT = "a vllm bench serve --save-result file (JSON with completed, total_input_tokens, mean_ttft_ms, ...)"
ARRAYS = ("input_lens", "output_lens", "ttfts", "itls")
MEANS = {"mean_ttft_ms": "ttft_ms", "mean_tpot_ms": "tpot_ms", "mean_itl_ms": "itl_ms", "mean_e2el_ms": "e2el_ms",
         "output_throughput": "output_throughput"}


def read(path: str | Path) -> MeasuredRun:
    path = Path(path)
    data = parse_json_input(path, read_input_text(path, WHAT), WHAT)
    if not isinstance(data, dict) or not ("completed" in data or "ttfts" in data):
        raise ConfigError(f"{path}: not a vllm bench serve result (no completed, no ttfts); expected {WHAT}")
    means = {}
    for key, name in MEANS.items():
        v = data.get(key)
        if v is not None:
            if not (is_finite(v) and v >= 0):
                raise ConfigError(f"{path}: {key}: expected a number >= 0, got {show(v)}")
            means[name] = float(v)
    deployment = {k: str(data[k]).strip() for k in DEPLOYMENT_KEYS if data.get(k) not in (None, "")}
    common = dict(path=path, client="vllm-bench", model_id=_text(data.get("model_id")), deployment=deployment,
                  load=_load(path, data), means=means)
    if all(k in data for k in ARRAYS):
        return MeasuredRun(**common, **detailed(path, data))
    return MeasuredRun(**common, **_summary(path, data))


def _text(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def _load(path: Path, data: dict) -> dict:
    rate = data.get("request_rate", "inf")
    if rate == "inf" or rate is None:
        rate = math.inf
    elif not (is_finite(rate) and rate > 0):
        raise ConfigError(f"{path}: request_rate: expected a rate > 0 requests/s or \"inf\", got {show(rate)}")
    b = data.get("burstiness", 1.0)
    b = 1.0 if b is None else math.inf if b == "inf" else b
    if not (isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0):
        raise ConfigError(f"{path}: burstiness: expected a gamma shape > 0, got {show(b)}")
    cap = data.get("max_concurrency")
    if cap is not None and not (is_int(cap) and cap >= 1):
        raise ConfigError(f"{path}: max_concurrency: expected null or a count >= 1, got {show(cap)}")
    load = {"request_rate": float(rate), "burstiness": float(b), "max_concurrency": cap}
    if data.get("ramp_up_strategy") is not None:
        for key in ("ramp_up_start_rps", "ramp_up_end_rps"):
            if not (is_finite(data.get(key)) and data[key] >= 0):
                raise ConfigError(f"{path}: {key}: expected a rate >= 0 with ramp_up_strategy, got "
                                  f"{show(data.get(key))}")
        load |= {"ramp_up_strategy": str(data["ramp_up_strategy"]), "ramp_up_start_rps":
                 float(data["ramp_up_start_rps"]), "ramp_up_end_rps": float(data["ramp_up_end_rps"])}
    return load


def detailed(path: Path, data: dict) -> dict:
    """The successful requests' arrays of a --save-detailed file, checked (`MeasuredRun`'s fields)."""
    n = None
    for key in (*ARRAYS, "errors", "start_times"):
        value = data.get(key)
        if key in ("errors", "start_times") and value is None:
            continue
        if not isinstance(value, list):
            raise ConfigError(f"{path}: {key}: expected a list with one entry per request, got {show(value)}")
        if n is not None and len(value) != n:
            raise ConfigError(f"{path}: {key}: {len(value)} entries, input_lens has {n}; expected one per request")
        n = len(value)
    errors = data.get("errors") or [""] * n
    starts = data.get("start_times")
    keep = [i for i in range(n) if not errors[i]]
    ins, outs, ttfts, e2els, sends, mean_itls = [], [], [], [], [], []
    for i in keep:
        p, o, t, gaps = (data[k][i] for k in ARRAYS)
        if not (is_int(p) and p >= 1 and is_int(o) and o >= 1):
            raise ConfigError(f"{path}: input_lens[{i}], output_lens[{i}]: expected token counts >= 1 for a "
                              f"successful request, got {show(p)}, {show(o)}")
        if not (is_finite(t) and t > 0):
            raise ConfigError(f"{path}: ttfts[{i}]: expected seconds > 0, got {show(t)}")
        if not (isinstance(gaps, list) and all(is_finite(g) and g >= 0 for g in gaps)):
            raise ConfigError(f"{path}: itls[{i}]: expected a list of seconds >= 0, got {show(gaps)}")
        if starts is not None and not is_finite(starts[i]):
            raise ConfigError(f"{path}: start_times[{i}]: expected seconds, got {show(starts[i])}")
        ins.append(int(p))
        outs.append(int(o))
        ttfts.append(float(t))
        e2els.append(float(t) + float(sum(gaps)))  # vLLM: latency = last chunk - start = ttft + the ITLs
        mean_itls.append(float(np.mean(gaps)) if gaps and sum(gaps) > 0 else math.nan)
        if starts is not None:
            sends.append(float(starts[i]))
    if not keep:
        raise ConfigError(f"{path}: no successful request (every entry of errors is set); expected at least one")
    send = None if starts is None else np.array(sends)  # (as written: a shift would round sends off step ends)
    return {"input_lens": np.array(ins), "output_lens": np.array(outs), "send": send, "ttft": np.array(ttfts),
            "e2el": np.array(e2els), "mean_itl": np.array(mean_itls), "failed": n - len(keep)}


def _summary(path: Path, data: dict) -> dict:
    values = {}
    for key in ("completed", "total_input_tokens", "total_output_tokens"):
        v = data.get(key)
        if not (is_int(v) and v >= (1 if key == "completed" else 0)):
            raise ConfigError(f"{path}: {key}: expected a count (>= 1 completed), got {show(v)}")
        values[key] = v
    n = values["completed"]
    isl, osl = round(values["total_input_tokens"] / n), round(values["total_output_tokens"] / n)
    if isl < 1 or osl < 1:
        raise ConfigError(f"{path}: total_input_tokens, total_output_tokens: mean lengths {isl}, {osl} tokens; "
                          "expected at least 1 each")
    failed = data.get("failed", 0)
    return {"input_lens": np.full(n, isl), "output_lens": np.full(n, osl), "send": None, "ttft": None,
            "e2el": None, "failed": failed if is_int(failed) else 0, "per_request": False}
