"""GuideLLM as a client (pinned: vllm-project/guidellm at ee7a774, v0.7.3-12), read in its source
(`scheduler/strategies.py`, `benchmark/profiles/`, `schemas/request_stats.py`, `statistics.py`,
`data/deserializers/synthetic.py`, `data/config.py`), with its own option strings: `--profile kind=...,rate=...`,
`--constraint kind=max_requests,count=N`, `--data kind=synthetic_text,prompt_tokens=...,output_tokens=...` (or
the same as a JSON or YAML mapping, or a data config file: .json, .yaml, .yml, .config).

How it sends: `synchronous`, one request at a time, the next at the last's completion; `concurrent` (`rate` =
streams), N in flight, each freed stream sending its next at once; `throughput`, everything at once (at most
`max_concurrency`, 10240 by default, in flight); `constant`, request i at (i + 1) / rate, whatever completes;
`poisson`, exponential gaps of mean 1 / rate from the start; `sweep` (`rate` = the number of benchmarks, 10),
synchronous, then throughput, then constant rates evenly spaced between their measured request rates, the last
being throughput's. Each benchmark sends `count` requests. Synthetic lengths: Gaussian (`*_stdev`) clamped to
[min, max] (default the mean +- 5 stdev, at least 1) and rounded; without a stdev, the mean.

What it measures, per benchmark: TTFT, request latency, TPOT = (last token - start) / output tokens (the first
token included), ITL = (last token - first token) / (output tokens - 1); TPOT's distribution weighted by output
tokens and ITL's by output tokens - 1 (token-weighted means), TTFT and latency per request; a percentile is the
lower value at which the weighted cumulative share reaches it (no interpolation); concurrency time-weighted;
rates over the benchmark's span (first start to last end).

Differences, on purpose: numpy's generator seeded by `--seed` (GuideLLM: Python's `random.Random(seed)`, 42);
GuideLLM's 1 s scheduler start delay shifts every send alike and is left out; warm-up and cool-down phases and
duration constraints are not modelled yet (refused).
"""

# Annotations stay objects (no `from __future__ import annotations`): typer reads the flags on every start.

import math
from dataclasses import dataclass, replace
from typing import Annotated, Any

import numpy as np

from servesim.errors import ConfigError
from servesim.flags import opt as _opt

NAME = "guidellm"
VERSION = "v0.7.3-12 (vllm-project/guidellm ee7a774)"
KINDS = ("synchronous", "concurrent", "throughput", "constant", "poisson", "sweep")
THROUGHPUT_MAX_CONCURRENCY, SWEEP_SIZE = 10240, 10
PERCENTILES = (0.001, 0.01, 0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 0.999)


@dataclass
class GuideLLMFlags:
    """GuideLLM's option strings (`--client guidellm`)."""

    profile: Annotated[str | None, _opt("--profile", help="guidellm: kind=synchronous|concurrent|throughput|"
                                        "constant|poisson|sweep[,rate=R][,max_concurrency=C].")] = None
    constraint: Annotated[str | None, _opt("--constraint", help="guidellm: kind=max_requests,count=N.")] = None
    data: Annotated[str | None, _opt("--data", help="guidellm: kind=synthetic_text,prompt_tokens=P,output_tokens=O"
                                     "[,prompt_tokens_stdev=...,_min=...,_max=...].")] = None


FLAGS = GuideLLMFlags


def given(opts: Any) -> list[str]:
    return [f"--{name}" for name in ("profile", "constraint", "data") if getattr(opts, name) is not None]


def _pairs(text: str | None, option: str) -> dict[str, str]:
    from servesim.lists import split_items

    if text is None:
        raise ConfigError(f"--client guidellm: give {option} kind=...")
    out = {}
    for item in split_items(text, option):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


DATA_KEYS = {"kind", *(f"{n}{s}" for n in ("prompt_tokens", "output_tokens") for s in ("", "_stdev", "_min", "_max"))}
DATA_FILES = (".json", ".yaml", ".yml", ".config")


def _data(text: str | None) -> dict[str, str]:
    """GuideLLM's `--data` (guidellm/data/config.py): a config file (.json; .yaml, .yml, .config as YAML), a
    JSON or YAML mapping, or key=value pairs."""
    from pathlib import Path

    if text is not None and Path(text).suffix.lower() in DATA_FILES:
        path = Path(text)
        if not path.is_file():
            raise ConfigError(f"--data {text}: no such file; expected a GuideLLM data config (.json, .yaml)")
        return _mapping(path.read_text(encoding="utf-8"), str(path), in_file=True)
    if text is not None and text.lstrip().startswith("{"):
        return _mapping(text, "--data")
    return _pairs(text, "--data")


def _mapping(text: str, where: str, in_file: bool = False) -> dict[str, str]:
    import yaml

    try:
        data = yaml.safe_load(text)  # (JSON is YAML)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        at = f":{line + 1}" if line is not None and in_file else ""
        raise ConfigError(f"{where}{at}: not valid JSON or YAML; expected GuideLLM data arguments") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of GuideLLM data arguments (kind: synthetic_text, ...)")
    return {str(k): str(v) for k, v in data.items()}


def _number(pairs: dict, key: str, option: str, kind: type = float, default: Any = None) -> Any:
    if key not in pairs:
        if default is None:
            raise ConfigError(f"{option}: give {key}=...")
        return default
    try:
        value = kind(pairs[key])
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise ConfigError(f"{option} {key}={pairs[key]}: expected a number > 0")
    return value


@dataclass(frozen=True, slots=True)
class Load:
    kind: str
    rate: float | None
    count: int
    requests: tuple  # the data, in order
    max_concurrency: int
    seed: int


def plan(opts: Any) -> Load:
    profile, constraint, data = (_pairs(opts.profile, "--profile"), _pairs(opts.constraint, "--constraint"),
                                 _data(opts.data))
    kind = profile.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"--profile kind={kind}: expected one of {', '.join(KINDS)}")
    extra = set(profile) - {"kind", "rate", "max_concurrency"}
    if extra:
        raise ConfigError(f"--profile {sorted(extra)[0]}=...: not modelled yet (warm-up, cool-down, rampup); drop it")
    if constraint.get("kind") != "max_requests":
        raise ConfigError("--constraint: servesim models kind=max_requests,count=N (a duration is not modelled yet)")
    count = _number(constraint, "count", "--constraint", int)
    rate = None
    if kind in ("concurrent", "constant", "poisson"):
        rate = _number(profile, "rate", "--profile")
    elif kind == "sweep":
        rate = _number(profile, "rate", "--profile", int, SWEEP_SIZE)
    cap = _number(profile, "max_concurrency", "--profile", int, THROUGHPUT_MAX_CONCURRENCY)
    if data.get("kind") != "synthetic_text":
        raise ConfigError("--data: servesim models kind=synthetic_text,prompt_tokens=...,output_tokens=...")
    unread = sorted(set(data) - DATA_KEYS)
    if unread:
        raise ConfigError(f"--data {unread[0]}: not modelled yet (servesim reads {', '.join(sorted(DATA_KEYS))}); "
                          "drop it")
    rng = np.random.default_rng(opts.seed)
    ins, outs = (_lengths(rng, data, name, count) for name in ("prompt_tokens", "output_tokens"))
    from servesim.engine.request import Request

    reqs = tuple(Request(f"g{i}", 0.0, int(a), int(b)) for i, (a, b) in enumerate(zip(ins, outs, strict=True)))
    return Load(kind, rate, count, reqs, cap, opts.seed)


def _lengths(rng: np.random.Generator, data: dict, name: str, n: int) -> np.ndarray:
    """IntegerRangeSampler: Gaussian clamped to [min, max] (mean +- 5 stdev by default, at least 1), rounded."""
    mean = _number(data, name, "--data")
    stdev = float(data.get(f"{name}_stdev", 0) or 0)
    low = float(data.get(f"{name}_min", max(1.0, mean - 5 * stdev) if stdev else mean))
    high = float(data.get(f"{name}_max", mean + 5 * stdev if stdev else mean))
    if low == high:
        return np.full(n, max(1, round(low)), np.int64)
    if stdev == 0:  # a range without a stdev: uniform integers
        return rng.integers(int(low), int(high) + 1, n)
    return np.maximum(1, np.rint(np.clip(rng.normal(mean, stdev, n), low, high))).astype(np.int64)


def _benchmark(load: Load, kind: str, rate: float | None, config: Any, simulate: Any) -> Any:
    """One benchmark of the profile: its send times and cap, simulated."""
    n = load.count
    cap = {"synchronous": 1, "concurrent": int(rate or 1)}.get(kind, load.max_concurrency)
    if kind == "constant":
        times = (np.arange(n) + 1) / rate
    elif kind == "poisson":
        times = np.cumsum(np.random.default_rng(load.seed).exponential(1.0 / rate, n))
    else:
        times = np.zeros(n)
    reqs = [replace(r, arrival_time=float(t)) for r, t in zip(load.requests, times, strict=True)]
    return simulate(reqs, replace(config, max_concurrency=cap))


def run(load: Load, config: Any, policy: str, cost: Any, server: Any = None) -> tuple[list, list]:
    """Every benchmark of the profile, in order: (their results, their (kind, rate) labels)."""
    from servesim.clients import engine_server

    sim = engine_server(policy, cost, server)
    if load.kind != "sweep":
        return [_benchmark(load, load.kind, load.rate, config, sim)], [(load.kind, load.rate)]
    first = _benchmark(load, "synchronous", None, config, sim)
    most = _benchmark(load, "throughput", None, config, sim)
    low, high = (_metrics(r)["requests_per_second"] for r in (first, most))
    rates = [float(x) for x in np.linspace(low, high, int(load.rate) - 1)[1:]]
    labels = [("synchronous", None), ("throughput", None)] + [("constant", x) for x in rates]
    return [first, most] + [_benchmark(load, "constant", x, config, sim) for x in rates], labels


def summarize(results: Any, labels: Any, load: Load, opts: Any) -> list[dict[str, Any]]:
    return [{"strategy": kind, "rate": rate, **_metrics(r)} for (kind, rate), r in zip(labels, results, strict=True)]


def _metrics(result: Any) -> dict[str, Any]:
    ok = [r for r in result.requests if r.finish_time is not None]
    start = np.array([r.arrival_time for r in ok])
    end = np.array([r.finish_time for r in ok])
    span = float(end.max() - start.min()) if ok else 0.0
    osl = np.array([r.num_tokens for r in ok], float)
    first = np.array([r.token_times[0] for r in ok])
    last = np.array([r.token_times[-1] for r in ok])
    many = osl > 1
    per_s = (lambda x: x / span) if span > 0 else (lambda x: 0.0)
    return {"requests": len(ok), "requests_per_second": per_s(len(ok)), "output_tokens_per_second": per_s(osl.sum()),
            "request_concurrency": per_s(float((end - start).sum())),
            "request_latency": _dist(end - start), "time_to_first_token_ms": _dist((first - start) * 1e3),
            "time_per_output_token_ms": _dist((last - start) * 1e3 / osl, osl),
            "inter_token_latency_ms": _dist((last - first)[many] * 1e3 / (osl[many] - 1), osl[many] - 1)}


def percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """GuideLLM's: the lower value at which the weighted cumulative share reaches q (no interpolation)."""
    order = np.argsort(values, kind="stable")
    cdf = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][min(int(np.searchsorted(cdf, q - 1e-12, side="left")), len(values) - 1)])


def _dist(values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float] | None:
    if not values.size:
        return None
    w = np.ones_like(values) if weights is None else weights
    out = {"mean": float(np.average(values, weights=w)), "min": float(values.min()), "max": float(values.max()),
           "median": percentile(values, w, 0.5)}
    return out | {f"p{q * 100:g}": percentile(values, w, q) for q in PERCENTILES}


def format_metrics(rows: list[dict[str, Any]]) -> str:
    lines = [f"GuideLLM benchmarks (simulated by servesim; {VERSION})",
             f"{'strategy':<22}{'req/s':>8}{'out tok/s':>11}{'conc':>7}{'TTFT mean':>11}{'TTFT p99':>10}"
             f"{'ITL mean':>10}{'TPOT mean':>11}{'latency':>9}"]
    for r in rows:
        name = r["strategy"] + (f"@{r['rate']:.3g}" if r["rate"] is not None else "")

        def mean(key, stat="mean", r=r):
            return f"{r[key][stat]:.2f}" if r[key] else "-"

        lines.append(f"{name:<22}{r['requests_per_second']:>8.3f}{r['output_tokens_per_second']:>11.1f}"
                     f"{r['request_concurrency']:>7.2f}{mean('time_to_first_token_ms'):>11}"
                     f"{mean('time_to_first_token_ms', 'p99'):>10}{mean('inter_token_latency_ms'):>10}"
                     f"{mean('time_per_output_token_ms'):>11}{mean('request_latency'):>9}")
    return "\n".join(lines)
