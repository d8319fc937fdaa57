"""`python -m sglang.bench_serving` as a client (read in `sglang/benchmark/serving.py` at 8905cbd, 2026-07-20, a
fork tracking SGLang's main: the pinned 0.5.23 release's tree could not be read, so the rules are main's).

How it sends, with vllm bench serve's own option names: the first request at the benchmark's start, then an
exponential gap of mean 1 / `--request-rate` after each send (no burstiness, no rescaling; `inf`, the default,
all at once); `--max-concurrency C`: a request waits for a free slot before it is sent, and its times count from
then. Before the benchmark, `--warmup-requests` (default 1) copies of the first request's prompt with at most
32 output tokens, all at once and past the cap, awaited, then a 1 s pause. `--dataset-name random`: input and
output lengths uniform integers in [max(int(L x `--random-range-ratio`), 1), L] (ratio default 0; `ignore_eos`
on, as servesim's requests always are); else the `--workload`'s requests.

What it measures (`calculate_metrics`), successful requests of the benchmark only: TTFT, TPOT = (latency - TTFT)
/ (output - 1) per request when output > 1, ITL over every gap of every request, E2E latency; mean, median,
std, p90, p95, p99 (numpy); throughputs over the benchmark's duration (its start to the last response);
concurrency = the E2E latencies' sum / the duration. Its "Serving Benchmark Result" block and JSON keys.

Differences, on purpose: numpy's generator seeded by `--seed` (SGLang's default seed is 42, servesim's 0).
"""

# Annotations stay objects (no `from __future__ import annotations`): typer reads the flags on every start.

import math
from dataclasses import dataclass, replace
from typing import Annotated, Any

import numpy as np
import typer

from servesim.errors import ConfigError

NAME = "sglang-bench"
VERSION = "sglang.bench_serving at 8905cbd (main, 2026-07-20)"
TAKES_WORKLOAD = True  # without --dataset-name random the requests are the --workload's
# vllm bench serve's load options it takes under the same names (refused under the other clients)
SHARES_VLLM_LOAD = ("max_concurrency", "num_requests", "dataset_name", "random_input_len", "random_output_len",
                    "random_range_ratio")
WARMUP_MAX_TOKENS, WARMUP_PAUSE_S = 32, 1.0


@dataclass
class SGLangBenchFlags:
    """sglang.bench_serving's options servesim's vllm bench serve options do not have."""

    warmup_requests: Annotated[int, typer.Option("--warmup-requests", help="sglang-bench: warm-up requests before "
                                                 "the benchmark (default 1), not measured.")] = 1


FLAGS = SGLangBenchFlags


def given(opts: Any) -> list[str]:
    return ["--warmup-requests"] if opts.warmup_requests != 1 else []


@dataclass(frozen=True, slots=True)
class Load:
    warmup: tuple
    benchmark: tuple  # send times from the benchmark's start
    concurrency: int | None
    rate: float


def plan(opts: Any, samples: list) -> Load:
    from servesim.engine.request import Request

    rate = math.inf if opts.request_rate is None else opts.request_rate
    if opts.warmup_requests < 0:
        raise ConfigError(f"--warmup-requests {opts.warmup_requests}: expected an integer >= 0")
    if opts.max_concurrency is not None and opts.warmup_requests > opts.max_concurrency:
        raise ConfigError("--warmup-requests above --max-concurrency: SGLang's warm-up goes past the cap, which is "
                          "not modelled yet")
    rng = np.random.default_rng(opts.seed)
    if opts.dataset_name == "random" or opts.workload == "random":
        n = 1000 if opts.num_requests is None else opts.num_requests
        ins = _lengths(rng, 1024 if opts.random_input_len is None else opts.random_input_len, opts, n)
        outs = _lengths(rng, 1024 if opts.random_output_len is None else opts.random_output_len, opts, n)
        base = [Request(f"b{i}", 0.0, int(a), int(b)) for i, (a, b) in enumerate(zip(ins, outs, strict=True))]
    else:
        base = [replace(r, request_id=f"b{i}", arrival_time=0.0, after=None, think_time=0.0)
                for i, r in enumerate(samples[:opts.num_requests] if opts.num_requests else samples)]
    gaps = np.zeros(len(base)) if math.isinf(rate) else rng.exponential(1.0 / rate, len(base))
    times = np.concatenate([[0.0], np.cumsum(gaps)[:-1]]) if base else np.zeros(0)
    benchmark = tuple(replace(r, arrival_time=float(t)) for r, t in zip(base, times, strict=True))
    first = base[0]
    warmup = tuple(replace(first, request_id=f"w{i}", output_len=min(first.output_len, WARMUP_MAX_TOKENS))
                   for i in range(opts.warmup_requests))
    return Load(warmup, benchmark, opts.max_concurrency, rate)


def _lengths(rng: np.random.Generator, length: int, opts: Any, n: int) -> np.ndarray:
    ratio = 0.0 if opts.random_range_ratio is None else opts.random_range_ratio
    if length < 1 or not 0 <= ratio <= 1:
        raise ConfigError(f"random length {length} with range ratio {ratio}: expected a length >= 1 and a ratio "
                          "in [0, 1]")
    return rng.integers(max(int(length * ratio), 1), length + 1, n)


def run(load: Load, config: Any, policy: str, cost: Any, server: Any = None) -> tuple[Any, np.ndarray]:
    """The warm-up alone (all at once, past the cap) for its end; the benchmark starts 1 s after; both in one
    run (nothing of the benchmark arrives before the warm-up is over)."""
    from servesim.clients import engine_server

    simulate = engine_server(policy, cost, server)

    start = 0.0
    if load.warmup:
        t = simulate(list(load.warmup), config).timelines
        start = float(np.nanmax(np.where(np.isnan(t.finish_time), t.arrival_time, t.finish_time))) + WARMUP_PAUSE_S
    requests = [*load.warmup, *(replace(r, arrival_time=start + r.arrival_time) for r in load.benchmark)]
    result = simulate(requests, replace(config, max_concurrency=load.concurrency))
    measured = np.array([r.request_id.startswith("b") for r in requests])
    return result, measured


def summarize(result: Any, measured: np.ndarray, load: Load, opts: Any) -> dict[str, Any]:
    """`calculate_metrics`' figures under its JSON keys."""
    mine = [r for r, m in zip(result.requests, measured, strict=True) if m]
    ok = [r for r in mine if r.finish_time is not None]
    begin = min((r.arrival_time for r in mine), default=0.0)  # the first request goes at the benchmark's start
    dur = max((r.finish_time for r in ok), default=begin) - begin
    e2e = np.array([r.finish_time - r.arrival_time for r in ok]) * 1e3
    ttft = np.array([r.token_times[0] - r.arrival_time for r in ok]) * 1e3
    tpot = np.array([(lat - f) / (r.num_tokens - 1) for r, lat, f in zip(ok, e2e, ttft) if r.num_tokens > 1])
    itl = np.concatenate([np.diff(r.token_times) for r in ok]) * 1e3 if ok else np.zeros(0)
    ins, outs = sum(r.prompt_len for r in ok), sum(r.num_tokens for r in ok)
    per_s = (lambda x: x / dur) if dur > 0 else (lambda x: 0.0)
    out: dict[str, Any] = {"backend": "servesim", "request_rate": load.rate, "max_concurrency": load.concurrency,
                           "duration": dur, "completed": len(ok), "total_input_tokens": ins,
                           "total_output_tokens": outs, "request_throughput": per_s(len(ok)),
                           "input_throughput": per_s(ins), "output_throughput": per_s(outs),
                           "total_throughput": per_s(ins + outs), "concurrency": per_s(float(e2e.sum()) / 1e3)}
    for name, v in (("e2e_latency", e2e), ("ttft", ttft), ("tpot", tpot), ("itl", itl)):
        for stat, f in (("mean", np.mean), ("median", np.median), ("std", np.std)):
            out[f"{stat}_{name}_ms"] = float(f(v)) if v.size else 0.0
        for p in (90, 95, 99):
            out[f"p{p}_{name}_ms"] = float(np.percentile(v, p)) if v.size else 0.0
    out["max_itl_ms"] = float(itl.max()) if itl.size else 0.0
    return out


def format_metrics(m: dict[str, Any]) -> str:
    """SGLang's "Serving Benchmark Result" block (its labels)."""
    rate = "inf" if math.isinf(m["request_rate"]) else f"{m['request_rate']:g}"

    def row(label: str, value: Any) -> str:
        return f"{label:<40}{value:<10}"

    lines = ["\n{s:{c}^{n}}".format(s=" Serving Benchmark Result (simulated by servesim) ", n=50, c="="),
             row("Backend:", "servesim"), row("Traffic request rate:", rate),
             row("Max request concurrency:", m["max_concurrency"] if m["max_concurrency"] else "not set"),
             row("Successful requests:", m["completed"]), row("Benchmark duration (s):", f"{m['duration']:.2f}"),
             row("Total input tokens:", m["total_input_tokens"]),
             row("Total generated tokens:", m["total_output_tokens"]),
             row("Request throughput (req/s):", f"{m['request_throughput']:.2f}"),
             row("Input token throughput (tok/s):", f"{m['input_throughput']:.2f}"),
             row("Output token throughput (tok/s):", f"{m['output_throughput']:.2f}"),
             row("Total token throughput (tok/s):", f"{m['total_throughput']:.2f}"),
             row("Concurrency:", f"{m['concurrency']:.2f}")]
    for title, key, stats in (("End-to-End Latency", "e2e_latency", ("mean", "median", "p90", "p99")),
                              ("Time to First Token", "ttft", ("mean", "median", "p99")),
                              ("Time per Output Token (excl. 1st token)", "tpot", ("mean", "median", "p99")),
                              ("Inter-Token Latency", "itl", ("mean", "median", "p95", "p99"))):
        lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        short = {"e2e_latency": "E2E Latency", "ttft": "TTFT", "tpot": "TPOT", "itl": "ITL"}[key]
        for s in stats:
            label = f"{s.capitalize() if s in ('mean', 'median') else s.upper()} {short} (ms):"
            lines.append(row(label, f"{m[f'{s}_{key}_ms']:.2f}"))
    lines.append(row("Max ITL (ms):", f"{m['max_itl_ms']:.2f}"))
    lines.append("=" * 50)
    return "\n".join(lines)
