"""One row per point: simulate the point, measure it as `vllm bench serve` does, price it.

`evaluate` is what every executor runs: a top-level function of one picklable `Task`, so that a process pool or
a Ray worker runs exactly what this process would. The base is a `servesim.cli.options.SimOptions` (the same
object for the command line and the API): the point replaces its swept fields, and its `requests()`,
`engine_config()` and `cost_model()` resolve the rest, as `servesim run` does. A point with a cluster layout or a
router runs `SimOptions.simulate_cluster`, as `servesim run --num-replicas N` does (`plan.layouts`).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from servesim.analysis.benchmark import DEFAULT_PERCENTILES, benchmark_metrics, spec_decode_json, to_json
from servesim.analysis.overload import detect_overload
from servesim.analysis.speculation import plain_run, speculates, speedup
from servesim.engine import simulate
from servesim.engine.result import SimResult
from servesim.errors import ServesimError
from servesim.plan.layouts import cluster_fields, is_cluster
from servesim.plan.pareto import pareto_mask
from servesim.plan.points import Point
from servesim.plan.prices import DEFAULT_GPU_COST, cost_per_million_tokens

POINT_COLUMNS = ("policy", "model", "gpu", "tp", "layout", "num_replicas", "router", "num_gpus", "request_rate",
                 "rate_scale")


@dataclass(frozen=True, slots=True)
class Measure:
    """What every row measures: the SLOs (vLLM's --goodput, ms), the percentiles, the $/GPU-hour table."""

    goodput: dict[str, float] = field(default_factory=dict)
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    gpu_cost: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_GPU_COST))

    def __post_init__(self) -> None:
        if 99.0 not in self.percentiles:  # the Pareto front is drawn on p99s
            object.__setattr__(self, "percentiles", (*self.percentiles, 99.0))


@dataclass(frozen=True, slots=True)
class Task:
    base: Any  # SimOptions
    point: Point
    measure: Measure


_REQUESTS: dict[tuple, list] = {}  # per process: one workload per offered load, shared by its configurations


def point_options(base: Any, point: Point) -> Any:
    """The base options with the point's swept fields in place."""
    swept = {k: getattr(point, k) for k in ("request_rate", "rate_scale", "model", "gpu", "tp")
             if getattr(point, k) is not None}
    return replace(base, **swept, **cluster_fields(point.layout, point.router))


def requests_of(opts: Any) -> list:
    """The point's requests; what loading changed is not printed again (the sweep prints it once)."""
    key = (repr(opts),)
    if key not in _REQUESTS:
        with contextlib.redirect_stderr(io.StringIO()):
            reqs = opts.requests()
        _REQUESTS.clear()  # one at a time: a sweep's points come ordered with the rate innermost
        _REQUESTS[key] = reqs
    return _REQUESTS[key]


def simulate_point(base: Any, point: Point, record: str = "summary") -> tuple[Any, Any]:
    """The point's simulation (a `SimResult`, or a `ClusterResult` for a cluster) and its cost model. A user
    error names the point."""
    try:
        opts = point_options(base, point)
        cost = opts.cost_model(point.policy)
        config = opts.engine_config(point.policy)
        if point.knobs:
            config = config.with_knobs(dict(point.knobs))
        if opts.is_cluster():
            return opts.simulate_cluster(requests_of(opts), config, point.policy, cost, record), cost
        return simulate(requests_of(opts), config, point.policy, cost, record=record), cost
    except ServesimError as exc:
        raise type(exc)(f"{point.label()}: {exc}") from None


def evaluate(task: Task) -> dict[str, Any]:
    """The point's row; a speculating engine's also says what speculation did against the same run without it
    (`speculation_columns`: a second run of the point)."""
    result, cost = simulate_point(task.base, task.point)
    row = measure(task.point, result, cost, task.measure)
    if speculates(result) and not is_cluster(result):
        plain = plain_run(result, requests_of(point_options(task.base, task.point)), cost)
        row.update(speculation_columns(result, plain))
    return row


def speculation_columns(result: SimResult, plain: SimResult) -> dict[str, Any]:
    """The same point without speculative decoding (its config otherwise the same, the same KV pool): its mean
    TPOT and output throughput, and `speculation_speedup`, mean TPOT without over with (below 1: verifying drafts
    cost more than they saved); and vllm bench serve's spec_decode_* counts, its per-position rates left out."""
    m = benchmark_metrics(plain)
    counts = {k: v for k, v in spec_decode_json(result.spec_decoding).items()
              if k != "spec_decode_per_position_acceptance_rates"}  # (a row is flat: CSV and Parquet columns)
    return counts | {"mean_tpot_ms_without_speculation": m["tpot"].mean,
            "output_throughput_without_speculation": m.output_throughput,
            "speculation_speedup": speedup(result, plain)}


def measure(point: Point, result: SimResult | Any, cost: Any, how: Measure) -> dict[str, Any]:
    """The row: the point, every `vllm bench serve` metric (its JSON keys), SLO attainment, the overload verdict,
    throughput per GPU and the cost per million output tokens. A cluster's: over all its requests."""
    cluster = is_cluster(result)
    m = (result.benchmark(how.percentiles, how.goodput) if cluster
         else benchmark_metrics(result, how.percentiles, how.goodput))
    gpu = getattr(getattr(cost, "gpu", None), "name", None)
    model = getattr(getattr(cost, "model", None), "name", None)
    tp = getattr(cost, "tp", None)
    num_gpus = point.replicas * (tp or 1)
    row: dict[str, Any] = {"policy": point.policy, "model": model or point.model, "gpu": gpu or point.gpu,
                           "tp": tp, "layout": point.layout, "num_replicas": point.replicas,
                           "router": result.router if cluster else None, "num_gpus": num_gpus,
                           "request_rate": point.request_rate,
                           "rate_scale": point.rate_scale}
    for knob, value in point.knobs:
        row[knob if knob not in row else f"engine_{knob}"] = value
    row.update(to_json(m))
    total = m.completed + m.failed
    good = round(m.request_goodput * m.duration) if m.request_goodput is not None else None
    row["slo_attainment"] = None if good is None else (100.0 * good / total if total else 0.0)
    row["overloaded"] = (any(detect_overload(r).overloaded for r in result.replicas) if cluster
                         else detect_overload(result).overloaded)
    row["output_throughput_per_gpu"] = m.output_throughput / num_gpus
    price = how.gpu_cost.get(gpu) if gpu is not None else None
    row["usd_per_gpu_hour"] = price
    row["cost_per_million_output_tokens"] = cost_per_million_tokens(price, num_gpus, m.output_throughput)
    return row


def speculation_lines(rows: Sequence[dict[str, Any]], axes: Sequence[str]) -> list[str]:
    """Per configuration (the swept axes but the offered load) that speculated: its speedup at the lowest and
    highest load, and the first load at which it fell below 1 (verifying drafts cost more than they saved)."""
    load = [a for a in ("request_rate", "rate_scale") if a in axes]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("speculation_speedup") is not None:
            key = tuple((a, r.get(a, r.get(f"engine_{a}"))) for a in axes if a not in load)
            groups.setdefault(key, []).append(r)
    out = []
    for key, group in groups.items():
        name = ", ".join(f"{a}={v}" for a, v in key)
        at = (lambda r: f"{load[0]} {r[load[0]]:g}") if load else (lambda r: "this load")
        first, last = group[0], group[-1]
        text = (f"{name + ': ' if name else ''}speculation's speedup (mean TPOT without it / with it) "
                f"{first['speculation_speedup']:.2f}x at {at(first)}")
        if last is not first:
            text += f", {last['speculation_speedup']:.2f}x at {at(last)}"
        losing = [r for r in group if r["speculation_speedup"] < 1]
        text += (f"; from {at(losing[0])} on it cost more than it saved" if losing
                 else "; it paid at every load swept")
        out.append(text + ".")
    return out


def run_points(base: Any, points: Sequence[Point], how: Measure, executor: Any,
               done: dict[str, dict[str, Any]] | None = None,
               on_row: Callable[[Point, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Every point's row in point order, the Pareto front marked. `done` (by `Point.key()`): rows kept from an
    interrupted sweep, not run again. `on_row` sees each new row as it arrives (a checkpoint, a progress bar)."""
    done = dict(done or {})
    todo = [p for p in points if p.key() not in done]
    for i, row in executor.run(evaluate, [Task(base, p, how) for p in todo]):
        done[todo[i].key()] = row
        if on_row is not None:
            on_row(todo[i], row)
    rows = [done[p.key()] for p in points]
    return mark_pareto(rows)


def mark_pareto(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r | {"pareto": on} for r, on in zip(rows, pareto_mask(rows))]
