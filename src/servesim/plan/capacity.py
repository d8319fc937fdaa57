"""Capacity: the highest request rate at which at least P % of requests meet the SLOs, per configuration.

A rate passes when at least `attainment` % of its requests meet the SLOs AND its run is not overloaded
(`analysis.overload`): an overloaded run's attainment measures how long it lasted, so it never passes, whatever
its attainment. The search: arrivals are `vllm bench serve`'s process at the rate being tried (Poisson by default,
the workload's `--burstiness` otherwise) with the sweep's fixed seed, so each rate is one deterministic simulation
and the same seed always gives the same answer. Bracketing doubles the rate from `start_rate` while it passes (or
halves it while it fails), then bisection narrows [passing, failing] until the failing rate is within `tolerance`
(relative) of the passing one. The answer is the highest passing rate tried: the true boundary lies in
[max_request_rate, max_request_rate x (1 + tolerance)], provided attainment falls as the rate rises (at a fixed
seed a higher rate is the same arrivals squeezed in time, which in practice it does).

At the answer the configuration runs once more with every step's record (`record="full"`) and the steps are
counted by what bound them (`analysis.breakdown.bound_by`): the KV cache, seats (max_num_seqs), the token budget,
or nothing, in which case the GPU's step time, compute, is the limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from servesim.analysis.breakdown import Bound, bound_by
from servesim.errors import ConfigError
from servesim.plan.layouts import steps_of
from servesim.plan.points import Point
from servesim.plan.sweep import Measure, measure, simulate_point

LIMITS = {  # a step's bound -> the limit it names at capacity
    Bound.KV_BLOCKS: "KV cache", Bound.MAX_NUM_SEQS: "seats (max_num_seqs)",
    Bound.TOKEN_BUDGET: "token budget (max_num_batched_tokens)",
    Bound.PREFILL_THRESHOLD: "long_prefill_token_threshold", Bound.BATCH_CLOSED: "static batch",
    Bound.NOTHING: "compute",
}


@dataclass(frozen=True, slots=True)
class Search:
    """How a capacity is searched for: at least `attainment` % of requests meet every `goodput` SLO (ms)."""

    goodput: dict[str, float]
    attainment: float = 99.0
    tolerance: float = 0.01  # relative: stop when failing - passing <= tolerance x passing
    start_rate: float = 1.0
    max_rate: float = 10_000.0
    min_rate: float = 0.001

    def __post_init__(self) -> None:
        if not self.goodput:
            raise ConfigError("capacity needs SLOs: give --goodput, e.g. --goodput 'ttft:500 tpot:50'")
        if not 0 < self.attainment <= 100:
            raise ConfigError(f"--attainment {self.attainment}: expected a percentage in (0, 100]")
        if not 0 < self.tolerance < 1:
            raise ConfigError(f"--rate-tolerance {self.tolerance}: expected a fraction in (0, 1), e.g. 0.01")
        if not 0 < self.min_rate <= self.start_rate <= self.max_rate < math.inf:
            raise ConfigError(f"--start-rate {self.start_rate}, --max-rate {self.max_rate}: expected finite rates "
                              f"with {self.min_rate} <= start <= max")


@dataclass(frozen=True, slots=True)
class CapacityTask:
    base: Any  # SimOptions
    point: Point  # a configuration: no request rate
    search: Search
    measure: Measure


def search_config(task: CapacityTask) -> dict[str, Any]:
    """One configuration's capacity, the points tried, and the binding limit at it (JSON-able). Without a layout
    the configuration is one engine: its router (kept for `--target-rate`) routes nothing, so it runs as the plain
    engine (one replica behind a router is that engine record for record, docs/cluster.md)."""
    s, tried, config = task.search, [], {}
    alone = task.point if task.point.layout is not None else replace(task.point, router=None)

    def passes(rate: float) -> bool:
        point = replace(alone, request_rate=rate)
        result, cost = simulate_point(task.base, point)
        row = measure(point, result, cost, task.measure)
        ok = row["slo_attainment"] >= s.attainment and not row["overloaded"]  # overloaded: SLOs measure its length
        if not config:  # the configuration's columns: the row's, before the metrics, less the offered load
            keys = list(row)[:list(row).index("duration")]
            config.update({k: row[k] for k in keys if k not in ("request_rate", "rate_scale")})
            if task.point.router is not None:
                config["router"] = task.point.router
        tried.append({"request_rate": rate, "slo_attainment": row["slo_attainment"], "passed": ok,
                      "overloaded": row["overloaded"], "p99_ttft_ms": row["p99_ttft_ms"],
                      "p99_tpot_ms": row["p99_tpot_ms"], "output_throughput": row["output_throughput"]})
        return ok

    lo, hi = _bracket(passes, s)
    if lo is not None and hi is not None:
        while hi - lo > s.tolerance * lo:
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    out = config | {"max_request_rate": 0.0 if lo is None else lo, "failing_rate": hi,
                    "bracketed": lo is not None and hi is not None, "binding": None, "bound_steps": {}}
    if lo is not None:
        result, _ = simulate_point(task.base, replace(alone, request_rate=lo), record="full")
        out["bound_steps"] = bound_shares(result)
        out["binding"] = next(iter(out["bound_steps"]), None)
    return out | {"points": tried}


def _bracket(passes: Any, s: Search) -> tuple[float | None, float | None]:
    """(a passing rate, a failing rate) from doubling or halving; None where the limits were reached first."""
    lo = hi = None
    rate = s.start_rate
    while True:
        if passes(rate):
            lo = rate
            if hi is not None or rate >= s.max_rate:
                return lo, hi
            rate = min(2 * rate, s.max_rate)
        else:
            hi = rate
            if lo is not None or rate <= s.min_rate:
                return lo, hi
            rate = max(rate / 2, s.min_rate)


def bound_shares(result: Any) -> dict[str, float]:
    """Share of steps (%) by the limit that bound them, most common first (a cluster: every replica's steps)."""
    counts: dict[str, int] = {}
    for step in steps_of(result):
        name = LIMITS[bound_by(step)]
        counts[name] = counts.get(name, 0) + 1
    total = sum(counts.values())
    return {k: 100.0 * v / total for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def even_split_replicas(capacity: float, target_rate: float) -> int:
    """ceil(R / c): replicas of capacity c, each sent an even share of R (a random split of a Poisson process is
    a Poisson process at the share's rate). The estimate `plan.target` starts its simulated search from."""
    return max(1, math.ceil(target_rate / capacity - 1e-9))


def fewest_gpus(found: Sequence[dict[str, Any]], target_rate: float) -> dict[str, Any] | None:
    """The even-split estimate: the configuration that serves `target_rate` with the fewest GPUs (replicas x TP)
    if each of ceil(R / c) replicas of capacity c serves an even share. Ties: the higher capacity per GPU, then
    sweep order. None: no configuration serves any rate. `plan.target` simulates the layouts instead."""
    if not (target_rate > 0 and math.isfinite(target_rate)):
        raise ConfigError(f"--target-rate {target_rate}: expected a finite rate > 0 requests/s")
    best = None
    for i, f in enumerate(found):
        c = f["max_request_rate"]
        if c <= 0:
            continue
        replicas = even_split_replicas(c, target_rate)
        gpus = replicas * f["num_gpus"]
        key = (gpus, -c / f["num_gpus"], i)
        if best is None or key < best[0]:
            best = (key, {"index": i, "replicas": replicas, "num_gpus": gpus, "max_request_rate": c,
                          "target_rate": target_rate})
    return None if best is None else best[1]
