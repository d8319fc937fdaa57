"""The points of a sweep: the cartesian product of the axes a user names, in one fixed order.

A point is everything that differs between two rows of a sweep; everything else (the workload, its seed, the
options not swept) is the sweep's base and the same for every point. The order is the product's, with the request
rate innermost, so a table reads as `vllm bench serve` is run by hand: one configuration at rising rates.

Cluster layouts (`plan.layouts`): a point's `layout` (`4` replicas, `1P3D` prefill/decode) and `router` make it a
cluster run (`servesim.cluster`); None for both is one engine, simulated as `servesim run` without the cluster
options. A point has `replicas` x `tp` GPUs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from servesim.errors import ConfigError
from servesim.lists import split_items
from servesim.plan.layouts import layout_name, num_replicas, parse_routers


@dataclass(frozen=True, slots=True)
class Point:
    """One configuration at one offered load. None: not swept (the base's value, or the default, applies)."""

    policy: str = "vllm"
    model: str | None = None
    gpu: str | None = None
    tp: int | None = None
    request_rate: float | None = None
    rate_scale: float | None = None
    knobs: tuple[tuple[str, object], ...] = ()  # EngineConfig fields, in the order the user named them
    layout: str | None = None  # a cluster layout: `4` (replicas) or `1P3D` (plan.layouts); None: one engine
    router: str | None = None  # the cluster's router (servesim routers); None: the base's, else round-robin

    @property
    def replicas(self) -> int:
        return num_replicas(self.layout)

    @property
    def num_gpus(self) -> int:
        return self.replicas * (self.tp or 1)

    def key(self) -> str:
        """A stable text identity (a checkpoint's rows are matched to points by it)."""
        knobs = ",".join(f"{k}={v!r}" for k, v in self.knobs)
        return (f"{self.policy}|{self.model}|{self.gpu}|{self.tp}|{self.request_rate!r}|{self.rate_scale!r}|"
                f"{knobs}|{self.layout}" + ("" if self.router is None else f"|{self.router}"))

    def label(self) -> str:
        parts = [self.policy]
        parts += [f"{name} {v}" for name, v in (("model", self.model), ("gpu", self.gpu), ("tp", self.tp))
                  if v is not None]
        if self.layout is not None:
            parts.append(f"layout {self.layout}")
        if self.router is not None:
            parts.append(f"router {self.router}")
        parts += [f"{k}={v}" for k, v in self.knobs]
        if self.request_rate is not None:
            parts.append(f"{self.request_rate:g} req/s")
        if self.rate_scale is not None:
            parts.append(f"rate x{self.rate_scale:g}")
        return ", ".join(parts)

    def config_only(self) -> Point:
        """The point without its offered load: what `capacity` searches a rate for."""
        return Point(self.policy, self.model, self.gpu, self.tp, None, None, self.knobs, self.layout, self.router)


@dataclass(frozen=True, slots=True)
class Axes:
    """The values of each swept axis (an empty tuple: not swept)."""

    policies: tuple[str, ...] = ("vllm",)
    models: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    tps: tuple[int, ...] = ()
    request_rates: tuple[float, ...] = ()
    rate_scales: tuple[float, ...] = ()
    knobs: tuple[tuple[str, tuple[object, ...]], ...] = ()
    layouts: tuple[str, ...] = ()  # `4`, `1P3D` (plan.layouts)
    routers: tuple[str, ...] = ()

    def swept(self) -> list[str]:
        """The names of the axes with more than one value, in the product's order (the table's point columns)."""
        named = [("model", self.models), ("gpu", self.gpus), ("tp", self.tps), ("layout", self.layouts),
                 ("router", self.routers), ("policy", self.policies),
                 *self.knobs, ("rate_scale", self.rate_scales), ("request_rate", self.request_rates)]
        return [n for n, v in named if len(v) > 1]


def product(axes: Axes) -> list[Point]:
    """Every point, model x gpu x tp x layout x router x policy x knobs (in the order named) x rate scale x
    request rate."""
    if axes.request_rates and axes.rate_scales:
        raise ConfigError("--request-rate replaces the arrivals and --rate-scale scales a trace's: sweep one")
    if not axes.policies:
        raise ConfigError("--policies: name at least one policy")
    names = [k for k, _ in axes.knobs]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"--set {dup}: given twice; give each knob once with all its values")
    opt = lambda values: values or (None,)  # noqa: E731
    points = []
    for model, gpu, tp, layout, router, policy, *rest in itertools.product(
            opt(axes.models), opt(axes.gpus), opt(axes.tps), opt(axes.layouts), opt(axes.routers), axes.policies,
            *(v for _, v in axes.knobs), opt(axes.rate_scales), opt(axes.request_rates)):
        *knob_values, scale, rate = rest
        points.append(Point(policy, model, gpu, tp, rate, scale, tuple(zip(names, knob_values)), layout, router))
    return points


def parse_set(spec: str) -> tuple[str, tuple[object, ...]]:
    """`max_num_seqs=64,128` -> ("max_num_seqs", (64, 128)); any EngineConfig field, vLLM's name (compare's
    parser)."""
    from servesim.analysis.compare import parse_set as parse

    knob, values = parse(spec)
    return knob, tuple(values)


def parse_list(text: str | None, option: str, kind: type = str) -> tuple:
    """`1,2,4` -> (1.0, 2.0, 4.0) for kind float; None -> () (not swept)."""
    if text is None:
        return ()
    items = split_items(text, option)
    out = []
    for item in items:
        try:
            value = kind(item)
        except ValueError:
            raise ConfigError(f"{option} {item!r}: expected {'an integer' if kind is int else 'a number'}") \
                from None
        if kind is not str and not (value > 0 and (kind is int or not math.isnan(value))):
            raise ConfigError(f"{option} {item!r}: expected a value > 0")
        out.append(value)
    if len(set(out)) != len(out):
        raise ConfigError(f"{option} {text!r}: a value is given twice")
    return tuple(out)


def axes_from(policies: Sequence[str] | str = ("vllm",), models: Sequence[str] | str | None = None,
              gpus: Sequence[str] | str | None = None, tps: Sequence[int] | str | None = None,
              request_rates: Sequence[float] | str | None = None, rate_scales: Sequence[float] | str | None = None,
              knobs: Sequence[str] | dict[str, Sequence[object]] | None = None,
              layouts: Sequence[str | int] | str | None = None, routers: Sequence[str] | str | None = None,
              seed: int = 0) -> Axes:
    """Axes from the command line's text (`"1,2,4"`, `["max_num_seqs=64,128"]`) or the API's lists and dict.
    `layouts`: `4` or `1P3D` each (`plan.layouts`); `routers`: `servesim routers`' names."""
    def listed(value, option, kind):
        if value is None or isinstance(value, str):
            return parse_list(value, option, kind)
        return parse_list(",".join(map(str, value)), option, kind) if len(value) else ()

    if isinstance(knobs, dict):
        sets = tuple((parse_set(f"{k}=x")[0], tuple(v)) for k, v in knobs.items())
    else:
        sets = tuple(parse_set(s) for s in (knobs or ()))
    lays = tuple(layout_name(v) for v in listed(layouts, "--layout", str))
    if len(set(lays)) != len(lays):
        raise ConfigError(f"layouts {list(layouts or ())}: a layout is given twice")
    return Axes(listed(policies, "--policies", str), listed(models, "--model", str), listed(gpus, "--gpu", str),
                listed(tps, "--tensor-parallel-size", int), listed(request_rates, "--request-rate", float),
                listed(rate_scales, "--rate-scale", float), sets, lays, parse_routers(routers, seed))
