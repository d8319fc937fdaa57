"""`servesim.sweep(...)` and `servesim.capacity(...)`: the command line's sweep and capacity for notebooks.

    import servesim
    df = servesim.sweep("azure-conv-sample", request_rates=[1, 2, 4], knobs={"max_num_seqs": [64, 256]},
                        goodput="ttft:500 tpot:50", workers=2)     # polars, one row per point
    cap = servesim.capacity("azure-conv-sample", goodput="ttft:500 tpot:50", attainment=99)
    cap.max_request_rate, cap.table, cap.configs[0]["points"]
    df = servesim.sweep("azure-conv-sample", request_rates=[8], layouts=[1, 2, 4, "1P3D"], routers=["round-robin"])

Any other keyword is a simulating command's option by its field name (`servesim.cli.options.SimOptions`:
`num_requests`, `cost`, `max_num_batched_tokens`, `seed`, ...), so the API and the command line resolve a point
the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from servesim.errors import ConfigError
from servesim.plan.capacity import CapacityTask, Search, fewest_gpus, search_config
from servesim.plan.checkpoint import Checkpoint, fingerprint
from servesim.plan.executors import make_executor
from servesim.plan.points import Axes, Point, axes_from, product
from servesim.plan.sweep import Measure, run_points
from servesim.plan.target import fewest_simulated, search_replicas, target_tasks

SWEPT = ("request_rate", "rate_scale", "model", "gpu", "tp")  # SimOptions fields that are axes here
LAYOUT_FIELDS = ("num_replicas", "prefill_replicas", "decode_replicas")  # the `layouts` axis here
ROUTER_FIELD = "router"  # the `routers` axis


def run_sweep(base: Any, axes: Axes, how: Measure, executor: Any, checkpoint: str | None = None,
              resume: bool = False, on_row: Callable[[Point, dict], None] | None = None) -> list[dict[str, Any]]:
    """The sweep's rows in point order. With `checkpoint`, each finished row is appended to it as it arrives;
    with `resume`, the rows already there are kept and their points not run again."""
    points = product(axes)
    if resume and checkpoint is None:
        raise ConfigError("--resume reads the finished rows of an interrupted sweep: give --checkpoint PATH "
                          "(or the --output it was written beside)")
    if checkpoint is None:
        return run_points(base, points, how, executor, on_row=on_row)
    ckpt = Checkpoint(checkpoint, fingerprint(base, how))
    done = ckpt.load() if resume else {}
    ckpt.open(resume)

    def keep(point: Point, row: dict) -> None:
        ckpt.add(point.key(), row)
        if on_row is not None:
            on_row(point, row)

    try:
        return run_points(base, points, how, executor, done, keep)
    finally:
        ckpt.close()


@dataclass(slots=True)
class CapacityResult:
    """Each configuration's capacity (`configs`: dicts with `max_request_rate`, `points`, `binding`, ...), and
    for a target rate the fewest GPUs that serve it (`target`)."""

    configs: list[dict[str, Any]]
    search: Search
    target: dict[str, Any] | None = None  # simulated: the cluster at the target rate (plan.target)
    target_rate: float | None = None
    target_estimate: dict[str, Any] | None = None  # the even split's answer (capacity.fewest_gpus)

    @property
    def max_request_rate(self) -> float:
        """The highest capacity over the configurations (req/s)."""
        return max(c["max_request_rate"] for c in self.configs)

    @property
    def table(self) -> Any:
        import polars as pl

        return pl.DataFrame([{k: v for k, v in c.items() if k not in ("points", "bound_steps", "target")}
                             for c in self.configs], infer_schema_length=None)

    def to_json(self) -> dict[str, Any]:
        return {"goodput": self.search.goodput, "attainment": self.search.attainment,
                "rate_tolerance": self.search.tolerance, "max_request_rate": self.max_request_rate,
                "configs": self.configs, "target_rate": self.target_rate, "target": self.target,
                "target_estimate": self.target_estimate}


def run_capacity(base: Any, axes: Axes, search: Search, how: Measure, executor: Any,
                 target_rate: float | None = None,
                 on_config: Callable[[Point, dict], None] | None = None) -> CapacityResult:
    """A capacity search for each configuration of the axes (no request-rate axis: the rate is searched); with
    `target_rate`, the fewest replicas of each behind its router that serve it, simulated (`plan.target`)."""
    check_no_rate(base, axes)
    if target_rate is not None:
        check_target(axes, target_rate)
    points = product(axes)
    tasks = [CapacityTask(base, p, search, how) for p in points]
    found: list[dict[str, Any] | None] = [None] * len(tasks)
    for i, out in executor.run(search_config, tasks):
        found[i] = out
        if on_config is not None:
            on_config(points[i], out)
    configs = [f for f in found if f is not None]
    if target_rate is None:
        return CapacityResult(configs, search)
    tasks = target_tasks(base, points, configs, search, how, target_rate)
    for k, out in executor.run(search_replicas, [t for _, t in tasks]):
        configs[tasks[k][0]]["target"] = out
    return CapacityResult(configs, search, fewest_simulated(configs, target_rate), target_rate,
                          fewest_gpus(configs, target_rate))


def check_target(axes: Axes, target_rate: float) -> None:
    fewest_gpus([], target_rate)  # the rate's own check
    if axes.layouts:
        raise ConfigError("--target-rate searches the number of data-parallel replicas itself: drop "
                          "--num-replicas/--prefill-replicas/--decode-replicas (capacity without --target-rate "
                          "gives a layout's capacity)")


def check_no_rate(base: Any, axes: Axes) -> None:
    if axes.request_rates or axes.rate_scales or base.request_rate is not None or base.rate_scale is not None:
        raise ConfigError("capacity searches the request rate: drop --request-rate/--rate-scale "
                          "(--start-rate and --max-rate bound the search)")
    if getattr(base, "ramp_up_strategy", None) is not None:
        raise ConfigError("--ramp-up-strategy: capacity searches a steady request rate; drop the ramp-up")


def base_options(workload: str, options: dict[str, Any]) -> Any:
    """A `SimOptions` from the API's keywords; a swept field or an unknown name is refused."""
    from servesim.cli.options import SimOptions

    names = {f.name for f in fields(SimOptions)}
    swept = [k for k in options if k in SWEPT]
    if swept:
        raise ConfigError(f"{swept[0]}: an axis here; give it as {swept[0]}s=[...] (one value: a list of one)")
    cluster = [k for k in options if k in (*LAYOUT_FIELDS, ROUTER_FIELD)]
    if cluster:
        axis = "routers=[...]" if cluster[0] == ROUTER_FIELD else "layouts=[...] (e.g. [1, 2, 4, '1P3D'])"
        raise ConfigError(f"{cluster[0]}: an axis here; give it as {axis}")
    unknown = sorted(set(options) - names)
    if unknown:
        valid = sorted(names - set(SWEPT) - set(LAYOUT_FIELDS) - {ROUTER_FIELD})
        raise ConfigError(f"unknown option {unknown[0]!r}; valid: {', '.join(valid)}")
    return SimOptions(workload=workload, **options)


def _goodput(goodput: str | dict[str, float] | None) -> dict[str, float]:
    from servesim.analysis.benchmark import parse_goodput

    if isinstance(goodput, dict):
        return parse_goodput([" ".join(f"{k}:{v}" for k, v in goodput.items())])
    return parse_goodput([goodput] if goodput else [])


def sweep(workload: str = "seed", *, policies: Sequence[str] | str = ("vllm",),
          request_rates: Sequence[float] | None = None, rate_scales: Sequence[float] | None = None,
          models: Sequence[str] | None = None, gpus: Sequence[str] | None = None, tps: Sequence[int] | None = None,
          knobs: dict[str, Sequence[object]] | None = None, layouts: Sequence[str | int] | None = None,
          routers: Sequence[str] | None = None, goodput: str | dict[str, float] | None = None,
          percentiles: Sequence[float] = (50.0, 90.0, 99.0), gpu_cost: dict[str, float] | None = None,
          executor: str = "local", workers: int | None = None, ray_address: str | None = None,
          checkpoint: str | None = None, resume: bool = False, **options: Any) -> Any:
    """The cartesian product of the axes, one polars row per point (see `servesim sweep --help`)."""
    import polars as pl

    from servesim.plan.prices import parse_gpu_cost

    base = base_options(workload, options)
    axes = axes_from(policies, models, gpus, tps, request_rates, rate_scales, knobs, layouts, routers, base.seed)
    how = Measure(_goodput(goodput), tuple(float(p) for p in percentiles), parse_gpu_cost(gpu_cost))
    rows = run_sweep(base, axes, how, make_executor(executor, workers, ray_address), checkpoint, resume)
    return pl.DataFrame(rows, infer_schema_length=None)


def capacity(workload: str = "seed", *, goodput: str | dict[str, float], attainment: float = 99.0,
             rate_tolerance: float = 0.01, start_rate: float = 1.0, max_rate: float = 10_000.0,
             target_rate: float | None = None, policies: Sequence[str] | str = ("vllm",),
             models: Sequence[str] | None = None, gpus: Sequence[str] | None = None,
             tps: Sequence[int] | None = None, knobs: dict[str, Sequence[object]] | None = None,
             layouts: Sequence[str | int] | None = None, routers: Sequence[str] | None = None,
             executor: str = "local", workers: int | None = None, ray_address: str | None = None,
             **options: Any) -> CapacityResult:
    """The highest request rate meeting the SLOs for `attainment` % of requests, per configuration (see
    `servesim capacity --help`)."""
    base = base_options(workload, options)
    axes = axes_from(policies, models, gpus, tps, None, None, knobs, layouts, routers, base.seed)
    slos = _goodput(goodput)
    search = Search(slos, attainment, rate_tolerance, start_rate, max_rate)
    return run_capacity(base, axes, search, Measure(slos), make_executor(executor, workers, ray_address),
                        target_rate)


__all__ = ["CapacityResult", "capacity", "run_capacity", "run_sweep", "sweep"]
