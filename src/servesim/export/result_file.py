"""`vllm bench serve --save-result`'s result file, written by `servesim run --json/--save-result`.

A superset of vLLM 0.33's file (vllm/benchmarks/serve.py, `save_to_pytorch_benchmark_format` aside): its scalar
keys (`date`, `backend`, `model_id`, `num_prompts`, `request_rate`, `burstiness`, `max_concurrency`, with
`--ramp-up-strategy` `ramp_up_strategy`, `ramp_up_start_rps` and `ramp_up_end_rps`, `duration`,
`completed`, `failed`, the throughputs and every `mean_/median_/std_/pNN_` latency key), with `--save-detailed`
its per-request arrays (`input_lens`, `output_lens`, `ttfts` and `itls` in seconds, `errors`, and newer vLLM's
`start_times`: each request's send, here in seconds from the start), so any script that reads vLLM's files reads
servesim's. servesim adds `config` (the engine configuration in force), `policy`,
`cost_model`, `overloaded` and `num_steps`.

`date` is when the file was written (vLLM's `%Y%m%d-%H%M%S`), the one wall-clock value, outside the results;
`SOURCE_DATE_EPOCH` pins it for reproducible files.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import Any

from servesim.analysis.benchmark import BenchmarkMetrics, spec_decode_json, to_json
from servesim.engine.result import SimResult
from servesim.workloads.synthetic import RampUp

BACKEND = "servesim"


def model_id(cost: object) -> str:
    model = getattr(cost, "model", None)
    return getattr(model, "name", None) or getattr(cost, "name", "unknown")


def _date() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    t = time.gmtime(int(epoch)) if epoch and epoch.isdigit() else time.localtime()
    return time.strftime("%Y%m%d-%H%M%S", t)


def default_filename(cost: object, request_rate: float | None, max_concurrency: int | None = None,
                     ramp_up: RampUp | None = None) -> str:
    """vLLM's default: `{backend}-{request_rate}qps[-concurrency{C}]-{model}-{date}.json`; with ramp-up
    `{backend}-ramp-up-{strategy}-{start}qps-{end}qps[-concurrency{C}]-{model}-{date}.json`."""
    rate = "inf" if request_rate is None or request_rate == float("inf") else f"{request_rate:g}"
    if ramp_up is not None:
        rate = f"ramp-up-{ramp_up.strategy}-{ramp_up.start_rps:g}qps-{ramp_up.end_rps:g}"
    cap = "" if max_concurrency is None else f"-concurrency{max_concurrency}"
    return f"{BACKEND}-{rate}qps{cap}-{model_id(cost).split('/')[-1]}-{_date()}.json"


def result_file(result: SimResult, m: BenchmarkMetrics, metrics: tuple[str, ...], cost: object,
                request_rate: float | None, burstiness: float, overloaded: bool,
                detailed: bool = False, ramp_up: RampUp | None = None) -> dict[str, Any]:
    if ramp_up is not None:  # vLLM: --request-rate stays at its default, inf
        request_rate = float("inf")
    rate = None if request_rate is None else "inf" if request_rate == float("inf") else request_rate
    data: dict[str, Any] = {
        "date": _date(), "endpoint_type": BACKEND, "backend": BACKEND, "label": None, "model_id": model_id(cost),
        "tokenizer_id": model_id(cost), "num_prompts": len(result.requests), "request_rate": rate,
        "burstiness": burstiness if rate is not None else None,
        "max_concurrency": result.config.max_concurrency,  # the client's cap (None: open loop)
    }
    if ramp_up is not None:
        data |= {"ramp_up_strategy": ramp_up.strategy, "ramp_up_start_rps": int(ramp_up.start_rps),
                 "ramp_up_end_rps": int(ramp_up.end_rps)}
    data |= to_json(m, metrics)
    if detailed:
        data |= per_request(result)
    data |= spec_decode_json(result.spec_decoding)
    if result.prefix_cache is not None:  # vLLM's prefix-cache counters (its /metrics), not in its result file
        pc = result.prefix_cache
        data |= {"prefix_cache_queries": pc.query_tokens, "prefix_cache_hits": pc.hit_tokens,
                 "prefix_cache_hit_rate": pc.hit_rate, "prefix_cache_evicted_blocks": pc.evicted_blocks}
    config = asdict(result.config)
    data |= {"policy": result.policy, "cost_model": result.cost_model, "overloaded": overloaded,
             "num_steps": len(result.step_log) if result.step_log is not None else len(result.steps),
             "config": config}
    return data


def per_request(result: SimResult) -> dict[str, list]:
    """vLLM's detailed arrays, one entry per request in workload order. A request that did not finish has
    vLLM's failed-request values: TTFT 0, no ITLs, 0 output tokens and its error."""
    rejected = set(result.rejected)
    input_lens, output_lens, ttfts, itls, errors = [], [], [], [], []
    for r in result.requests:
        input_lens.append(r.prompt_len)
        times = r.token_times
        if r.finish_time is None or not times:
            output_lens.append(0)
            ttfts.append(0.0)
            itls.append([])
            errors.append(f"This model's maximum context length is {result.config.max_model_len} tokens"
                          if r.id in rejected else "did not finish")
            continue
        output_lens.append(len(times))
        ttfts.append(times[0] - r.arrival_time)
        itls.append([b - a for a, b in zip(times, times[1:])])
        errors.append("")
    return {"input_lens": input_lens, "output_lens": output_lens, "ttfts": ttfts, "itls": itls, "errors": errors,
            "start_times": result.timelines.arrival_time.tolist()}  # (the send: after --max-concurrency's wait)
