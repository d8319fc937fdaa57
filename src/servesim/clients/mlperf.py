"""MLPerf Inference LoadGen as a client (pinned: mlcommons/inference at b66003e, LoadGen 6.0.17), read in its
source (`loadgen/loadgen.cc`, `results.cc`, `logging.cc`, `early_stopping.cc`, `mlperf.conf`).

How it sends:
- `--scenario Server`: queries at Poisson times of rate `--target-qps` (exponential gaps), the first at 0; as many
  as it takes for the last one's scheduled time to reach `--min-duration-ms` and for `--min-query-count`, in
  equal-issue mode (every LLM benchmark) rounded up to whole passes over the loaded samples (the `--workload`'s
  requests, `--performance-sample-count` of them), each query a sample of one seeded permutation (`i % N`);
- `--scenario Offline`: every sample at 0 in one query: max(`--min-query-count`, 1.1 x min duration x target
  QPS) samples, rounded up to whole passes.
Latencies count from the scheduled time. TTFT is the first token's; TPOT = (latency - TTFT) / (tokens - 1)
(integer nanoseconds); a percentile is the sorted values' element floor(N p), no interpolation; a mean the
integer division of the nanoseconds' sum by the samples (`ProcessLatencies`, `ProcessTokenLatencies`).

The Server verdict (`results.cc`): VALID when the p99 TTFT and TPOT are within `--ttft-latency` /
`--tpot-latency` (ms; `--mlperf-model` gives mlperf.conf's pair), the last query's scheduled time reached the
min duration, at least `--min-query-count` queries were issued, and early stopping passes for both: with t
queries over the limit, at least h + t issued, h the least with I_0.99(h, 1 + t) < 0.01 (the regularized
incomplete beta; with none over, h = 459). Offline: VALID when the run lasted the min duration and issued the
min query count; its metric is tokens per second over the longest latency.

Differences, on purpose: the gaps are numpy's exponential draws seeded by `--seed` (LoadGen: libstdc++'s
`exponential_distribution` over `mt19937(schedule_rng_seed)`), so not LoadGen's own times.
"""

# Annotations stay objects (no `from __future__ import annotations`): typer reads the flags on every start.

import math
from dataclasses import dataclass, replace
from typing import Annotated, Any

import numpy as np

from servesim.errors import ConfigError
from servesim.flags import opt as _opt

NAME = "mlperf"
VERSION = "LoadGen 6.0.17 (mlcommons/inference b66003e)"
TAKES_WORKLOAD = True  # the samples are the --workload's requests (their lengths; their arrival times are not)
# mlperf.conf: Server ttft_latency / tpot_latency (ms) per model
MODELS = {"llama2-70b": (2000, 200), "llama2-70b-interactive": (450, 40), "llama3_1-8b": (2000, 100),
          "llama3_1-8b-interactive": (500, 30), "llama3_1-405b": (6000, 175),
          "llama3_1-405b-interactive": (4500, 80)}
PERCENTILES = (0.50, 0.90, 0.95, 0.97, 0.99, 0.999)
MS = 1_000_000  # ns


@dataclass
class MLPerfFlags:
    """LoadGen's test settings, under its names (`--client mlperf`)."""

    scenario: Annotated[str, _opt("--scenario", help="mlperf: Server | Offline.")] = "Server"
    target_qps: Annotated[float | None, _opt("--target-qps", help="mlperf: Server's Poisson rate, Offline's "
                                             "expected throughput (queries/s; required).")] = None
    min_duration_ms: Annotated[int, _opt("--min-duration-ms", help="mlperf: the run's minimum (mlperf.conf: "
                                         "600000).")] = 600_000
    min_query_count: Annotated[int, _opt("--min-query-count", help="mlperf: the least queries (LoadGen's default "
                                         "100).")] = 100
    performance_sample_count: Annotated[int | None, _opt("--performance-sample-count", help="mlperf: the loaded "
                                                         "samples (default: the workload's requests).")] = None
    mlperf_model: Annotated[str, _opt("--mlperf-model", help="mlperf: the benchmark whose Server latency limits "
                                      "apply: " + ", ".join(MODELS) + ".")] = "llama2-70b"
    ttft_latency: Annotated[float | None, _opt("--ttft-latency", help="mlperf: p99 TTFT limit, ms (default: the "
                                               "model's).")] = None
    tpot_latency: Annotated[float | None, _opt("--tpot-latency", help="mlperf: p99 TPOT limit, ms (default: the "
                                               "model's).")] = None


FLAGS = MLPerfFlags
OWN = {"scenario": "--scenario", "target_qps": "--target-qps", "min_duration_ms": "--min-duration-ms",
       "min_query_count": "--min-query-count", "performance_sample_count": "--performance-sample-count",
       "mlperf_model": "--mlperf-model", "ttft_latency": "--ttft-latency", "tpot_latency": "--tpot-latency"}


def given(opts: Any) -> list[str]:
    return [flag for name, flag in OWN.items() if getattr(opts, name) != getattr(MLPerfFlags, name)]


@dataclass(frozen=True, slots=True)
class Load:
    queries: tuple  # Requests, sent at their arrival times (the scheduled times)
    scenario: str
    settings: dict


def _check(opts: Any) -> None:
    if opts.scenario not in ("Server", "Offline"):
        raise ConfigError(f"--scenario {opts.scenario!r}: expected Server or Offline (Interactive is Server with a "
                          "-interactive --mlperf-model)")
    if opts.target_qps is None or not 0 < opts.target_qps < math.inf:
        raise ConfigError("--client mlperf: give --target-qps, a rate > 0 (queries/s)")
    if opts.mlperf_model not in MODELS:
        raise ConfigError(f"--mlperf-model {opts.mlperf_model!r}: expected one of {', '.join(MODELS)}")
    for flag, v in (("--min-duration-ms", opts.min_duration_ms), ("--min-query-count", opts.min_query_count)):
        if v < 0:
            raise ConfigError(f"{flag} {v}: expected an integer >= 0")


def plan(opts: Any, samples: list) -> Load:
    """The queries LoadGen issues, each one of `samples` (one seeded permutation, `i % N`)."""
    _check(opts)
    n_loaded = opts.performance_sample_count or len(samples)
    if not 1 <= n_loaded <= len(samples):
        raise ConfigError(f"--performance-sample-count {n_loaded}: expected 1 to the workload's {len(samples)}")
    rng = np.random.default_rng(opts.seed)
    order = rng.permutation(n_loaded)
    qps, duration = opts.target_qps, opts.min_duration_ms / 1000
    if opts.scenario == "Offline":
        count = _passes(max(opts.min_query_count, math.floor(1.1 * duration * qps)), n_loaded)
        times = np.zeros(count)
    else:
        times = _server_times(rng, qps, duration, opts.min_query_count, n_loaded)
    queries = tuple(replace(samples[order[i % n_loaded]], request_id=f"q{i}", arrival_time=float(t), after=None,
                            think_time=0.0) for i, t in enumerate(times))
    ttft, tpot = MODELS[opts.mlperf_model]
    settings = {"target_qps": qps, "min_duration_ms": opts.min_duration_ms, "min_query_count": opts.min_query_count,
                "performance_sample_count": n_loaded,
                "ttft_latency_ms": ttft if opts.ttft_latency is None else opts.ttft_latency,
                "tpot_latency_ms": tpot if opts.tpot_latency is None else opts.tpot_latency}
    return Load(queries, opts.scenario, settings)


def _passes(n: int, n_loaded: int) -> int:
    """Equal issue: whole passes over the loaded samples."""
    return max(1, -(-n // n_loaded)) * n_loaded


def _server_times(rng: np.random.Generator, qps: float, duration: float, min_queries: int, n_loaded: int):
    """Poisson schedule from 0 until the last scheduled time reaches `duration` and the count `min_queries`, in
    whole passes over the loaded samples."""
    times = [0.0]
    while times[-1] < duration or len(times) < min_queries or len(times) % n_loaded:
        times.append(times[-1] + float(rng.exponential(1.0 / qps)))
        if len(times) > 10_000_000:
            raise ConfigError("--client mlperf: more than 10,000,000 queries; lower --min-duration-ms or raise "
                              "--target-qps")
    return np.array(times)


def run(load: Load, config: Any, policy: str, cost: Any, server: Any = None) -> tuple[Any, np.ndarray]:
    from servesim.clients import engine_server

    result = engine_server(policy, cost, server)(list(load.queries), config)
    return result, np.ones(len(load.queries), bool)


def percentile(sorted_ns: list[int], p: float) -> int:
    """LoadGen's: the sorted values' element floor(N p)."""
    return sorted_ns[min(len(sorted_ns) - 1, int(len(sorted_ns) * p))] if sorted_ns else 0


def min_passing(t: int, p: float = 0.99, c: float = 0.99) -> int:
    """Early stopping's least h with I_p(h, 1 + t) < 1 - c: the chance that at most t of h + t queries break the
    limit, when each does with probability 1 - p (`early_stopping.cc`, `find_min_passing`)."""
    lo, hi = 1, 1
    while _odds(hi, t, p) >= 1 - c:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _odds(mid, t, p) < 1 - c else (mid + 1, hi)
    return lo


def _odds(h: int, t: int, p: float) -> float:
    """I_p(h, 1 + t) = P(Binomial(h + t, p) >= h): at most t failures in h + t trials."""
    n = h + t
    logs = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log1p(-p)
            + (n - k) * math.log(p) for k in range(t + 1)]
    top = max(logs)
    return math.exp(top) * sum(math.exp(x - top) for x in logs)


def metrics(result: Any, measured: np.ndarray, load: Load) -> dict[str, Any]:
    """The summary's figures and the verdict (`results.cc`), latencies in ns as LoadGen logs them."""
    done = [r for r in result.requests if r.finish_time is not None]
    latency = [round((r.finish_time - r.arrival_time) * 1e9) for r in done]
    ttft = [round((r.token_times[0] - r.arrival_time) * 1e9) for r in done]
    tpot = [(lat - f) // (r.num_tokens - 1) if r.num_tokens > 1 else 0 for r, lat, f in zip(done, latency, ttft)]
    tokens = sum(r.num_tokens for r in done)
    s = load.settings
    out: dict[str, Any] = {"scenario": load.scenario, "queries_issued": len(load.queries),
                           "sample_count": len(done), "settings": s}
    if load.scenario == "Offline":
        longest = max(latency, default=0) / 1e9
        out |= {"samples_per_second": len(done) / longest if longest else 0.0,
                "tokens_per_second": tokens / longest if longest else 0.0,
                "min_duration_met": longest * 1000 >= s["min_duration_ms"],
                "min_queries_met": len(done) >= s["min_query_count"]}
        out["valid"] = out["min_duration_met"] and out["min_queries_met"]
        return out
    last = max(load.queries, key=lambda q: q.arrival_time)
    done_at = max((r.finish_time for r in done if r.id == last.request_id), default=0.0)
    ttft_s, tpot_s = sorted(ttft), sorted(tpot)
    limits = (s["ttft_latency_ms"] * MS, s["tpot_latency_ms"] * MS)
    over = (sum(x > limits[0] for x in ttft), sum(x > limits[1] for x in tpot))
    n = max(len(done), 1)  # (LoadGen's means are integer divisions of int64 nanoseconds: `ProcessLatencies`)
    out |= {"mean_latency_ns": sum(latency) // n, "mean_first_token_latency_ns": sum(ttft) // n,
            "mean_time_per_output_token_ns": sum(tpot) // n,
            "completed_samples_per_second": (len(done) - 1) / done_at if done_at else 0.0,
            "completed_tokens_per_second": tokens / done_at if done_at else 0.0,
            "ttft_p99_ns": percentile(ttft_s, 0.99), "tpot_p99_ns": percentile(tpot_s, 0.99),
            "latency_percentiles_ns": {f"{p * 100:.2f}": percentile(sorted(latency), p) for p in PERCENTILES},
            "perf_constraints_met": percentile(ttft_s, 0.99) <= limits[0] and percentile(tpot_s, 0.99) <= limits[1],
            "min_duration_met": last.arrival_time * 1000 >= s["min_duration_ms"],
            "min_queries_met": len(load.queries) >= s["min_query_count"],
            "early_stopping_met": all(len(load.queries) >= min_passing(t) + t for t in over)}
    out["valid"] = all(out[k] for k in ("perf_constraints_met", "min_duration_met", "min_queries_met",
                                        "early_stopping_met"))
    return out


def summarize(result: Any, measured: np.ndarray, load: Load, opts: Any) -> dict[str, Any]:
    """The client's report of a run (every client has one): LoadGen's figures and verdict."""
    return metrics(result, measured, load)


def format_metrics(m: dict[str, Any]) -> str:
    """LoadGen's summary, its labels (`results.cc`, `LogSummary`)."""
    yes = {True: "Yes", False: "NO"}
    lines = ["================================================", "MLPerf Results Summary (simulated by servesim)",
             "================================================", f"Scenario : {m['scenario']}",
             "Mode     : PerformanceOnly"]
    if m["scenario"] == "Offline":
        lines += [f"Samples per second: {m['samples_per_second']:.2f}",
                  f"Tokens per second: {m['tokens_per_second']:.2f}"]
    else:
        lines += [f"Completed samples per second    : {m['completed_samples_per_second']:.2f}",
                  f"Completed tokens per second: {m['completed_tokens_per_second']:.2f}"]
    lines.append(f"Result is : {'VALID' if m['valid'] else 'INVALID'}")
    if m["scenario"] == "Server":
        lines.append(f"  Performance constraints satisfied : {yes[m['perf_constraints_met']]}")
    lines += [f"  Min duration satisfied : {yes[m['min_duration_met']]}",
              f"  Min queries satisfied : {yes[m['min_queries_met']]}"]
    if m["scenario"] == "Server":
        lines += [f"  Early stopping satisfied: {yes[m['early_stopping_met']]}",
                  f"Mean latency (ns)               : {m['mean_latency_ns']}",
                  f"Mean First Token latency (ns)               : {m['mean_first_token_latency_ns']}",
                  f"99.00 percentile first token latency (ns)   : {m['ttft_p99_ns']}",
                  f"Mean Time per Output Token (ns)               : {m['mean_time_per_output_token_ns']}",
                  f"99.00 percentile time to output token (ns)   : {m['tpot_p99_ns']}"]
    return "\n".join(lines)
