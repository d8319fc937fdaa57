"""NVIDIA AIPerf as a client (pinned: ai-dynamo/aiperf 0.1.1, main at db4f639, 2025-10-10), read in its source.

How it sends (`aiperf/timing/request_rate_strategy.py`, `credit_issuing_strategy.py`):
- `--concurrency N` alone: N requests at once, and each next one the moment one completes (servesim models no
  IPC gap between a completion and the next send; AIPerf's `credit_drop_latency` measures it);
- `--request-rate R`: the first request at the phase's start, then one after each gap, Poisson
  (`random.expovariate(R)`, the default `--request-rate-mode poisson`) or constant (1 / R); a gap is drawn after
  every send. `--request-rate` with `--concurrency C`: a send first waits for one of C slots, and the next gap
  starts only after it, so a held send pushes every later one back (`EngineConfig.client_sends_in_order`).
- `--warmup-request-count W` (default 0) runs first as its own phase, with the same load and generator; the
  `--request-count` (default 10) profiling requests start only once every warm-up response is back, and only
  they are measured.
- `--input-file` with `--custom-dataset-type mooncake_trace`: its fixed schedule, or its entries as the dataset
  (`servesim.clients.aiperf_input`).
- Lengths (`aiperf/dataset/utils.py`): a pool of `--num-dataset-entries` (100) entries, each ISL and OSL
  ceil(normal(mean, stddev)) kept when >= 0 (`--isl` 550, `--osl`: given), each request picking an entry with
  replacement. The output length is each request's `max_tokens`: servesim's requests generate to it.

What it measures and how (`aiperf/metrics/types/`): per successful profiling request, TTFT (first token - send),
time to second token (second - first), request latency (last token - send), inter-token latency (request
latency - TTFT) / (OSL - 1) when OSL >= 2, output token throughput per user 1 / ITL; each summarised over
requests as avg, min, max, p1 ... p99 (numpy's linear percentiles) and std (population). The benchmark duration
runs from the first profiling send to the last profiling response; request throughput = requests / duration,
output token throughput = the OSLs' sum / duration. Without `--streaming` (AIPerf's default) the token-timing
metrics are not reported, as AIPerf does not.

Differences, on purpose: servesim's generator is numpy's, seeded by `--seed` (AIPerf seeds Python's and numpy's
with `--random-seed`, 0 meaning unseeded), so the same seed does not give AIPerf's lengths or gaps; OSL is the
engine's count (AIPerf re-tokenises the streamed text).
"""

# Annotations stay objects (no `from __future__ import annotations`): typer reads the flags on every start.

import math
from dataclasses import dataclass, replace
from typing import Annotated, Any

import numpy as np

from servesim.errors import ConfigError
from servesim.flags import opt as _opt

NAME = "aiperf"
VERSION = "0.1.1 (db4f639)"
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
DEFAULT_REQUEST_COUNT, DEFAULT_ISL, DEFAULT_ENTRIES = 10, 550, 100


@dataclass
class AIPerfFlags:
    """AIPerf's load and dataset options, under its own names (`--client aiperf`)."""

    concurrency: Annotated[int | None, _opt("--concurrency", help="aiperf: requests in flight (closed loop). "
                                            "Default 1 without --request-rate.")] = None
    request_count: Annotated[int | None, _opt("--request-count", help="aiperf: profiling requests (default "
                                              "10).")] = None
    warmup_request_count: Annotated[int, _opt("--warmup-request-count", help="aiperf: warm-up requests, a phase of "
                                              "their own before profiling, never measured.")] = 0
    isl: Annotated[int | None, _opt("--isl", "--synthetic-input-tokens-mean", help="aiperf: mean input tokens "
                                    "(default 550).")] = None
    isl_stddev: Annotated[float, _opt("--isl-stddev", help="aiperf: their standard deviation.")] = 0.0
    osl: Annotated[int | None, _opt("--osl", "--output-tokens-mean", help="aiperf: mean output tokens "
                                    "(max_tokens; required with --client aiperf).")] = None
    osl_stddev: Annotated[float, _opt("--osl-stddev", help="aiperf: their standard deviation.")] = 0.0
    num_dataset_entries: Annotated[int | None, _opt("--num-dataset-entries", help="aiperf: the pool requests pick "
                                                    "from, with replacement (default 100).")] = None
    request_rate_mode: Annotated[str, _opt("--request-rate-mode", help="aiperf: poisson | constant gaps at "
                                           "--request-rate.")] = "poisson"
    streaming: Annotated[bool, _opt("--streaming", help="aiperf: stream tokens, so TTFT and ITL are "
                                    "measured.")] = False
    input_file: Annotated[str | None, _opt("--input-file", help="aiperf: a dataset file (with "
                                           "--custom-dataset-type mooncake_trace).")] = None
    custom_dataset_type: Annotated[str | None, _opt("--custom-dataset-type", help="aiperf: the --input-file's "
                                                    "format: mooncake_trace.")] = None
    fixed_schedule: Annotated[bool, _opt("--fixed-schedule", help="aiperf: send each entry at its timestamp (on "
                                         "by itself for a mooncake_trace with timestamps).")] = False
    fixed_schedule_auto_offset: Annotated[bool, _opt("--fixed-schedule-auto-offset", help="aiperf: the first "
                                                     "timestamp is the schedule's 0.")] = False
    fixed_schedule_start_offset: Annotated[int | None, _opt("--fixed-schedule-start-offset", help="aiperf: ms; "
                                                            "entries before it dropped, and it is the 0.")] = None
    fixed_schedule_end_offset: Annotated[int | None, _opt("--fixed-schedule-end-offset", help="aiperf: ms; "
                                                          "entries after it dropped.")] = None
    isl_block_size: Annotated[int, _opt("--isl-block-size", "--prompt-input-tokens-block-size", help="aiperf: "
                                        "tokens per hash_ids block (default 512).")] = 512


FLAGS = AIPerfFlags
OWN = {"concurrency": "--concurrency", "request_count": "--request-count",
       "warmup_request_count": "--warmup-request-count", "isl": "--isl", "isl_stddev": "--isl-stddev",
       "osl": "--osl", "osl_stddev": "--osl-stddev", "num_dataset_entries": "--num-dataset-entries",
       "request_rate_mode": "--request-rate-mode", "streaming": "--streaming", "input_file": "--input-file",
       "custom_dataset_type": "--custom-dataset-type", "fixed_schedule": "--fixed-schedule",
       "fixed_schedule_auto_offset": "--fixed-schedule-auto-offset",
       "fixed_schedule_start_offset": "--fixed-schedule-start-offset",
       "fixed_schedule_end_offset": "--fixed-schedule-end-offset", "isl_block_size": "--isl-block-size"}
FILE_ONLY = ("custom_dataset_type", "fixed_schedule", "fixed_schedule_auto_offset", "fixed_schedule_start_offset",
             "fixed_schedule_end_offset", "isl_block_size")
SYNTHETIC_ONLY = ("request_count", "isl", "isl_stddev", "osl", "osl_stddev", "num_dataset_entries")


def given(opts: Any) -> list[str]:
    """AIPerf's flags given (not at their defaults)."""
    return [flag for name, flag in OWN.items() if getattr(opts, name) != getattr(AIPerfFlags, name)]


@dataclass(frozen=True, slots=True)
class Load:
    """What AIPerf sends: each phase's requests with send times from its own start, and the concurrency cap."""

    warmup: tuple
    profiling: tuple
    concurrency: int | None
    in_order: bool = False  # --request-rate with --concurrency: sends paced one after another


def plan(opts: Any) -> Load:
    """The warm-up and profiling requests AIPerf would send with these flags (`--seed` for the generator)."""
    from servesim.engine.request import Request

    if opts.input_file is not None:
        return _plan_file(opts)
    file_only = [OWN[k] for k in FILE_ONLY if getattr(opts, k) != getattr(AIPerfFlags, k)]
    if file_only:
        raise ConfigError(f"{file_only[0]}: an option of an --input-file's dataset; add --input-file")
    n_w = opts.warmup_request_count
    n_p = DEFAULT_REQUEST_COUNT if opts.request_count is None else opts.request_count
    _check(opts, n_p)
    rng = np.random.default_rng(opts.seed)
    entries = DEFAULT_ENTRIES if opts.num_dataset_entries is None else opts.num_dataset_entries
    isl = _lengths(rng, DEFAULT_ISL if opts.isl is None else opts.isl, opts.isl_stddev, entries)
    osl = _lengths(rng, opts.osl, opts.osl_stddev, entries)
    pool = [Request("", 0.0, int(i), int(o)) for i, o in zip(isl, osl, strict=True)]
    return _timed(opts, rng, pool, rng.integers(0, entries, n_w + n_p), n_w, n_p)


def _timed(opts: Any, rng: np.random.Generator, pool: list, picks: np.ndarray, n_w: int, n_p: int) -> Load:
    """Each phase's requests, entry `picks[i]` of `pool` sent by --concurrency or --request-rate."""
    rate = opts.request_rate
    if rate is None:
        gaps = np.zeros(n_w + n_p)
    elif opts.request_rate_mode == "constant" or math.isinf(rate):
        gaps = np.full(n_w + n_p, 0.0 if math.isinf(rate) else 1.0 / rate)
    else:
        gaps = rng.exponential(1.0 / rate, n_w + n_p)

    def phase(name: str, k: slice) -> tuple:
        # the first send at the phase's start, each next one a gap after the one before
        times = np.concatenate([[0.0], np.cumsum(gaps[k])[:-1]]) if k.stop > k.start else np.zeros(0)
        return tuple(replace(pool[j], request_id=f"{name}-{i}", arrival_time=float(t))
                     for i, (t, j) in enumerate(zip(times, picks[k], strict=True)))

    concurrency = (opts.concurrency or 1) if rate is None else opts.concurrency
    return Load(phase("warmup", slice(0, n_w)), phase("profiling", slice(n_w, n_w + n_p)), concurrency,
                in_order=rate is not None and opts.concurrency is not None)


def _plan_file(opts: Any) -> Load:
    """An --input-file's requests: its fixed schedule, or its entries as the dataset (`aiperf_input`)."""
    from servesim.clients.aiperf_input import fixed_schedule, read_entries, send_times
    from servesim.engine.request import Request

    synthetic = [OWN[k] for k in SYNTHETIC_ONLY if getattr(opts, k) != getattr(AIPerfFlags, k)]
    if synthetic:
        raise ConfigError(f"{synthetic[0]}: an option of AIPerf's synthetic data; a mooncake_trace --input-file "
                          "gives the lengths, and as many requests as entries")
    entries = read_entries(opts)
    pool = [Request("", 0.0, e.input_length, e.output_length, hash_ids=e.hash_ids,
                    hash_block_size=opts.isl_block_size if e.hash_ids else None) for e in entries]
    if fixed_schedule(opts, entries):
        given = [f for f, v in (("--concurrency", opts.concurrency), ("--request-rate", opts.request_rate),
                                ("--warmup-request-count", opts.warmup_request_count or None)) if v is not None]
        if given:
            raise ConfigError(f"{given[0]} with a fixed schedule (--input-file with timestamps): not modelled yet")
        times = send_times(opts, entries)
        order = sorted(range(len(pool)), key=lambda i: times[i])  # AIPerf sends in timestamp order
        return Load((), tuple(replace(pool[i], request_id=f"profiling-{k}", arrival_time=times[i])
                              for k, i in enumerate(order)), None)
    _check_load(opts)
    rng = np.random.default_rng(opts.seed)
    n_w, n_p = opts.warmup_request_count, len(pool)
    return _timed(opts, rng, pool, rng.integers(0, len(pool), n_w + n_p), n_w, n_p)


def _check_load(opts: Any) -> None:
    if opts.request_rate_mode not in ("poisson", "constant"):
        raise ConfigError(f"--request-rate-mode {opts.request_rate_mode!r}: expected poisson or constant")
    for flag, v, low in (("--warmup-request-count", opts.warmup_request_count, 0),
                         ("--concurrency", opts.concurrency, 1)):
        if v is not None and v < low:
            raise ConfigError(f"{flag} {v}: expected an integer >= {low}")


def _check(opts: Any, n_p: int) -> None:
    if opts.osl is None:
        raise ConfigError("--client aiperf: give --osl (AIPerf sends no max_tokens without it, and servesim "
                          "needs each request's output length)")
    _check_load(opts)
    for flag, v, low in (("--request-count", n_p, 1), ("--isl", opts.isl, 1), ("--osl", opts.osl, 1),
                         ("--num-dataset-entries", opts.num_dataset_entries, 1)):
        if v is not None and v < low:
            raise ConfigError(f"{flag} {v}: expected an integer >= {low}")
    for flag, v in (("--isl-stddev", opts.isl_stddev), ("--osl-stddev", opts.osl_stddev)):
        if not 0 <= v < math.inf:
            raise ConfigError(f"{flag} {v}: expected a finite number >= 0")


def _lengths(rng: np.random.Generator, mean: float, stddev: float, n: int) -> np.ndarray:
    """AIPerf's sample: normal(mean, stddev) drawn until >= 0, then rounded up (and at least 1 token here)."""
    if stddev == 0:
        return np.full(n, max(1, math.ceil(mean)), np.int64)
    out = rng.normal(mean, stddev, n)
    while (bad := out < 0).any():
        out[bad] = rng.normal(mean, stddev, int(bad.sum()))
    return np.maximum(1, np.ceil(out)).astype(np.int64)


def run(load: Load, config: Any, policy: str, cost: Any, server: Any = None) -> tuple[Any, np.ndarray]:
    """Simulate both phases as AIPerf runs them, and the mask of the requests it measures (the profiling phase).
    The profiling phase starts when the warm-up's last response is back: the warm-up alone is simulated first
    for that time; then both in one run, which gives the warm-up the very same steps (nothing else arrives
    before it ends)."""
    from servesim.clients import engine_server

    simulate = engine_server(policy, cost, server)
    cfg = replace(config, max_concurrency=load.concurrency, client_sends_in_order=load.in_order)
    start = 0.0
    if load.warmup:
        w = simulate(list(load.warmup), cfg)
        t = w.timelines
        start = float(np.nanmax(np.where(np.isnan(t.finish_time), t.arrival_time, t.finish_time)))
    profiling = [replace(r, arrival_time=start + r.arrival_time) for r in load.profiling]
    if load.in_order and load.warmup:
        # the profiling phase paces its own sends from its start, which one run with the warm-up would shift by
        # the warm-up's held sends: it runs alone on the engine the warm-up left empty (AIPerf's prompts share
        # no prefix blocks, so nothing it left cached could hit)
        result = simulate(profiling, cfg)
        return result, np.ones(len(profiling), bool)
    requests = [*load.warmup, *profiling]
    result = simulate(requests, cfg)
    return result, np.array([r.request_id.startswith("profiling-") for r in requests])


def means(m: dict[str, dict[str, float]]) -> dict[str, float]:
    """AIPerf's averages (`metrics`, streamed) under validate's metric names: TTFT, request latency as E2EL,
    output token throughput, and its per-request ITL as both ITL and TPOT (its (latency - TTFT) / (OSL - 1))."""
    out = {"ttft_ms": m["time_to_first_token"].get("avg"), "e2el_ms": m["request_latency"].get("avg"),
           "output_throughput": m["output_token_throughput"]["avg"]}
    itl = m["inter_token_latency"].get("avg")
    if itl is not None:
        out["tpot_ms"] = out["itl_ms"] = itl
    return {k: v for k, v in out.items() if v is not None}


def metrics(result: Any, measured: np.ndarray, streaming: bool) -> dict[str, dict[str, float]]:
    """AIPerf's metrics of the measured requests, by its metric tags (see the module's docstring)."""
    done = [r for r, m in zip(result.requests, measured, strict=True) if m and r.finish_time is not None]
    send = np.array([r.arrival_time for r in done])
    finish = np.array([r.finish_time for r in done])
    osl = np.array([r.output_len for r in done])
    isl = np.array([r.prompt_len for r in done])
    duration = float(finish.max() - send.min()) if done else 0.0
    out: dict[str, dict[str, float]] = {}
    latency = (finish - send) * 1e3
    if streaming:
        ttft = np.array([r.token_times[0] - r.arrival_time for r in done]) * 1e3
        two = osl >= 2
        out["time_to_first_token"] = _stats(ttft, "ms")
        out["time_to_second_token"] = _stats(np.array([r.token_times[1] - r.token_times[0] for r, k in
                                                       zip(done, two, strict=True) if k]) * 1e3, "ms")
        itl = (latency[two] - ttft[two]) / (osl[two] - 1)
        out["inter_token_latency"] = _stats(itl, "ms")
        out["output_token_throughput_per_user"] = _stats(1e3 / itl, "tokens/sec/user")
    out["request_latency"] = _stats(latency, "ms")
    out["output_sequence_length"] = _stats(osl.astype(float), "tokens")
    out["input_sequence_length"] = _stats(isl.astype(float), "tokens")
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    out["output_token_throughput"] = {"unit": "tokens/sec", "avg": per_s(float(osl.sum()))}
    out["request_throughput"] = {"unit": "requests/sec", "avg": per_s(float(len(done)))}
    out["request_count"] = {"unit": "requests", "avg": float(len(done))}
    out["benchmark_duration"] = {"unit": "sec", "avg": duration}
    return out


def summarize(result: Any, measured: np.ndarray, load: Load, opts: Any) -> dict[str, dict[str, float]]:
    """The client's report of a run (every client has one): AIPerf's metrics."""
    return metrics(result, measured, opts.streaming)


def _stats(values: np.ndarray, unit: str) -> dict[str, float]:
    if not values.size:
        return {"unit": unit}
    pct = np.percentile(values, PERCENTILES)
    return {"unit": unit, "avg": float(values.mean()), "min": float(values.min()), "max": float(values.max()),
            **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct, strict=True)}, "std": float(values.std())}


TITLES = {"time_to_first_token": "Time to First Token", "time_to_second_token": "Time to Second Token",
          "request_latency": "Request Latency", "inter_token_latency": "Inter Token Latency",
          "output_token_throughput_per_user": "Output Token Throughput Per User",
          "output_sequence_length": "Output Sequence Length", "input_sequence_length": "Input Sequence Length",
          "output_token_throughput": "Output Token Throughput", "request_throughput": "Request Throughput",
          "request_count": "Request Count", "benchmark_duration": "Benchmark Duration"}


def format_metrics(m: dict[str, dict[str, float]]) -> str:
    """AIPerf's console table: a row per metric, avg min max p99 p90 p50 std."""
    cols = ("avg", "min", "max", "p99", "p90", "p50", "std")
    lines = ["NVIDIA AIPerf | LLM Metrics (simulated by servesim)",
             f"{'Metric':<52}" + "".join(f"{c:>11}" for c in cols)]
    for tag, s in m.items():
        cells = "".join(f"{s[c]:>11,.2f}" if c in s else f"{'N/A':>11}" for c in cols)
        lines.append(f"{TITLES[tag] + ' (' + s['unit'] + ')':<52}" + cells)
    return "\n".join(lines)
