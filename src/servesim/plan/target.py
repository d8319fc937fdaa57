"""`capacity --target-rate R`: the fewest GPUs that serve R req/s at the SLO, by simulating the cluster at R.

The even split (`capacity.even_split_replicas`: ceil(R / c) replicas of a configuration of capacity c) assumes
each replica sees an independent share of the arrivals. A router does better or worse than that: round-robin
sends each replica every N-th arrival, a far smoother stream than a random share of a Poisson process, so fewer
replicas can meet the SLO; a router that piles requests onto one replica needs more. So for each configuration
(and router) of the sweep, N replicas behind the router are simulated at R itself (`servesim.cluster`), starting
from the even-split estimate N0:
- N0 passes: try N0 - 1 (a tight estimate: done in two runs), then halve, (N0 - 1) / 2, / 4, ..., down to the
  first that fails (or 1): a loose estimate (ceil(R / c) at 100 % attainment under Poisson arrivals can be
  hundreds of times too many) costs a few runs, the largest first;
- N0 fails: try 2 N0, 4 N0, ... up to the first that passes (at most MAX_REPLICAS);
then bisect on the replica count between the failing and the passing one. A count passes when the SLOs are met
and no replica's run is overloaded (as `capacity.search_config`'s rates). The answer is the fewest replicas
that passed, provided attainment does not fall as replicas are added (each replica's share of R only shrinks).
Over the configurations the answer is the fewest GPUs (replicas x TP); ties: the higher single-replica capacity
per GPU, then sweep order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from servesim.cluster.replicas import MAX_REPLICAS
from servesim.errors import ConfigError
from servesim.plan.capacity import Search, even_split_replicas
from servesim.plan.points import Point
from servesim.plan.sweep import Measure, measure, simulate_point


@dataclass(frozen=True, slots=True)
class TargetTask:
    base: Any  # SimOptions
    point: Point  # a configuration with its router, no layout and no rate (both are set here)
    search: Search
    measure: Measure
    target_rate: float
    estimate: int  # the even split's replica count, the search's start


def search_replicas(task: TargetTask) -> dict[str, Any]:
    """The fewest replicas of `task.point` behind its router that serve the target rate at the SLO (JSON-able)."""
    tried: list[dict[str, Any]] = []
    seen: dict[int, bool] = {}

    def passes(n: int) -> bool:
        if n not in seen:
            point = replace(task.point, layout=str(n), request_rate=task.target_rate)
            result, cost = simulate_point(task.base, point)
            row = measure(point, result, cost, task.measure)
            seen[n] = row["slo_attainment"] >= task.search.attainment and not row["overloaded"]
            tried.append({"num_replicas": n, "num_gpus": row["num_gpus"], "router": row["router"],
                          "slo_attainment": row["slo_attainment"], "passed": seen[n], "overloaded": row["overloaded"],
                          "p99_ttft_ms": row["p99_ttft_ms"], "p99_tpot_ms": row["p99_tpot_ms"]})
        return seen[n]

    fail, ok = _bracket(passes, task.estimate)
    if ok is not None:
        while ok - fail > 1:
            mid = (fail + ok) // 2
            fail, ok = (fail, mid) if passes(mid) else (mid, ok)
    best = None if ok is None else next(t for t in tried if t["num_replicas"] == ok)
    return {"num_replicas": ok, "num_gpus": None if best is None else best["num_gpus"],
            "router": tried[0]["router"], "estimate_replicas": task.estimate, "simulated": True, "tried": tried}


def _bracket(passes: Any, start: int) -> tuple[int, int | None]:
    """(a failing count, 0 when none fails down to 1; a passing count, None when none up to MAX_REPLICAS)."""
    if passes(start):
        ok, n = start, start - 1
        while n >= 1:
            if not passes(n):
                return n, ok
            ok, n = n, n // 2
        return 0, ok
    fail = start
    while fail < MAX_REPLICAS:
        n = min(2 * fail, MAX_REPLICAS)
        if passes(n):
            return fail, n
        fail = n
    return fail, None


def target_tasks(base: Any, points: Sequence[Point], configs: Sequence[dict[str, Any]], search: Search,
                 how: Measure, target_rate: float) -> list[tuple[int, TargetTask]]:
    """(config index, task) for each configuration that serves some rate, its search started at the even
    split of its single-replica capacity."""
    serving = [(i, p, even_split_replicas(c["max_request_rate"], target_rate))
               for i, (p, c) in enumerate(zip(points, configs)) if c["max_request_rate"] > 0]
    if serving and all(n > MAX_REPLICAS for _, _, n in serving):
        best = max(c["max_request_rate"] for c in configs)
        raise ConfigError(f"--target-rate {target_rate:g}: the best configuration serves {best:g} req/s per "
                          f"replica, so about {min(n for _, _, n in serving):,} replicas; servesim simulates at most "
                          f"{MAX_REPLICAS:,} (each is an engine in this process)")
    return [(i, TargetTask(base, p, search, how, target_rate, n)) for i, p, n in serving if n <= MAX_REPLICAS]


def fewest_simulated(configs: Sequence[dict[str, Any]], target_rate: float) -> dict[str, Any] | None:
    """The configuration whose simulated cluster serves `target_rate` with the fewest GPUs (None: none does)."""
    best = None
    for i, c in enumerate(configs):
        t = c.get("target")
        if not t or t["num_replicas"] is None:
            continue
        key = (t["num_gpus"], -c["max_request_rate"] / c["num_gpus"], i)
        if best is None or key < best[0]:
            best = (key, {"index": i, "replicas": t["num_replicas"], "num_gpus": t["num_gpus"],
                          "layout": str(t["num_replicas"]), "router": t["router"],
                          "max_request_rate": c["max_request_rate"], "target_rate": target_rate,
                          "estimate_replicas": t["estimate_replicas"],
                          "estimate_num_gpus": t["estimate_replicas"] * c["num_gpus"], "simulated": True})
    return None if best is None else best[1]
