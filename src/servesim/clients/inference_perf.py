"""Kubernetes SIG inference-perf as a client (pinned: kubernetes-sigs/inference-perf at 7de5ef2, v0.6.1-29),
read in its source (`inference_perf/loadgen/load_timer.py`, `load_generator.py`, `datagen/`, `reportgen/base.py`).

How it sends: load `stages`, each `rate` x `duration` requests (`int(rate * duration)`), one stage after another:
- a stage's schedule starts 1 s after the stage does; `constant`: exponential gaps scaled to sum to the
  duration (the first after one gap, the last at the end); `poisson`: each second a Poisson(rate) count, spread
  over that second the same way (none: the second is skipped), until the stage's count is sent;
- a stage ends when all its responses are back (inference-perf looks every second from the stage's start), then
  `interval` seconds (default 1) pass before the next starts;
- each stage's data starts again from its first entry: `random` lengths (normal(mean, std_dev) clipped to
  [min, max] and rounded, drawn once), `shared_prefix` (num_groups system prompts of system_prompt_len tokens,
  num_prompts_per_group questions each of question_len, output_len; shuffled once, request i takes entry
  i mod N; the system prompt's 16-token blocks are shared, so the prefix cache can serve them), or, without a
  config file, the `--workload`'s requests in order.
What it measures (`reportgen/base.py`), per stage and over the run, successful requests only: request latency,
TTFT, TPOT = (last token - first token) / (tokens - 1), NTPOT = latency / output tokens, ITL over every gap of
every request; mean, min, max and numpy's linear percentiles (p0.1 ... p99.9, p50 as "median"); throughputs over
max(end) - min(start).

Differences, on purpose: inference-perf's timers draw from an unseeded generator; servesim's are numpy's seeded
by `--seed` (and `data.seed`/`base_seed` are not read).
"""

# Annotations stay objects (no `from __future__ import annotations`): typer reads the flags on every start.

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from servesim.errors import ConfigError, WorkloadError
from servesim.flags import opt as _opt

NAME = "inference-perf"
VERSION = "v0.6.1-29 (kubernetes-sigs/inference-perf 7de5ef2)"
TAKES_WORKLOAD = True  # without a config file's data section the requests are the --workload's
PERCENTILES = (0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9)
HEAD_START_S, POLL_S, PREFIX_BLOCK = 1.0, 1.0, 16


@dataclass
class InferencePerfFlags:
    """inference-perf's load, from its config file or inline (`--client inference-perf`)."""

    config_file: Annotated[Path | None, _opt("--config-file", help="inference-perf: its YAML config (load: type, "
                                             "stages, interval; data: random or shared_prefix).")] = None
    stages: Annotated[str | None, _opt("--stages", help="inference-perf: RATE:DURATION,... (req/s : s), without "
                                       "a config file.")] = None
    load_type: Annotated[str | None, _opt("--load-type", help="inference-perf: constant (default) | "
                                          "poisson.")] = None


FLAGS = InferencePerfFlags
OWN = {"config_file": "--config-file", "stages": "--stages", "load_type": "--load-type"}


def given(opts: Any) -> list[str]:
    return [flag for name, flag in OWN.items() if getattr(opts, name) != getattr(InferencePerfFlags, name)]


@dataclass(frozen=True, slots=True)
class Load:
    stages: tuple  # (rate, duration) per stage
    kind: str  # constant | poisson
    interval: float
    data: tuple  # the requests each stage sends, from its first (lengths and block identities)
    offsets: tuple  # per stage: its sends' times after its schedule starts


def plan(opts: Any, samples: list, config: dict | None = None) -> Load:
    """The stages, their data and their send times (`--seed` for the generator); `config` a config file's
    content already read (else `--config-file`'s)."""
    if config is None:
        config = _read(opts.config_file) if opts.config_file is not None else {}
    load = config.get("load", {})
    if opts.stages is not None and load.get("stages"):
        raise ConfigError("--stages and --config-file's load.stages: give one")
    stages = _stages(opts.stages) if opts.stages is not None else tuple(
        (float(s["rate"]), float(s["duration"])) for s in load.get("stages", ()))
    if not stages:
        raise ConfigError("--client inference-perf: give --stages RATE:DURATION,... or a --config-file with "
                          "load.stages")
    kind = opts.load_type or load.get("type", "constant")
    if kind not in ("constant", "poisson"):
        raise ConfigError(f"load type {kind!r}: servesim models inference-perf's constant and poisson loads")
    rng = np.random.default_rng(opts.seed)
    counts = [int(rate * duration) for rate, duration in stages]
    data = _data(config.get("data"), samples, max(counts), rng)
    offsets = tuple(tuple(_times(rng, kind, rate, duration, n)) for (rate, duration), n in zip(stages, counts))
    return Load(stages, kind, float(load.get("interval", 1.0)), tuple(data), offsets)


def _read(path: Path) -> dict:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise WorkloadError(f"{path}: not a readable inference-perf config ({exc}); expected YAML with 'load' and "
                            "'data'") from None
    if not isinstance(doc, dict):
        raise WorkloadError(f"{path}: expected a YAML mapping with 'load' (and 'data')")
    return doc


def _stages(text: str) -> tuple:
    from servesim.lists import split_items

    out = []
    for item in split_items(text, "--stages"):
        rate, sep, duration = item.partition(":")
        try:
            r, d = float(rate), float(duration)
        except ValueError:
            r = d = math.nan
        if not sep or not (0 < r < math.inf and 0 < d < math.inf):
            raise ConfigError(f"--stages {item!r}: expected RATE:DURATION, both > 0 (req/s : s)")
        out.append((r, d))
    return tuple(out)


def _times(rng: np.random.Generator, kind: str, rate: float, duration: float, n: int) -> np.ndarray:
    """A stage's send times after its schedule starts (`load_timer.py`)."""
    if kind == "constant":
        return _spread(rng, n, rate, duration)
    out: list[float] = []
    second = 0
    while len(out) < n:
        k = int(rng.poisson(rate))
        if k:
            out.extend(second + _spread(rng, k, k, 1.0))
        second += 1
    return np.array(out[:n])


def _spread(rng: np.random.Generator, n: int, rate: float, span: float) -> np.ndarray:
    """ConstantLoadTimer: n exponential gaps of mean 1 / rate, scaled to sum to `span`; the times after each."""
    if n == 0:
        return np.zeros(0)
    gaps = rng.exponential(1.0 / rate, n)
    return np.cumsum(gaps * (span / gaps.sum()))


def _data(spec: dict | None, samples: list, n: int, rng: np.random.Generator) -> list:
    from servesim.engine.request import Request

    if spec is None:  # the workload's requests, in order
        if n > len(samples):
            raise ConfigError(f"--client inference-perf: a stage sends {n:,} requests and the workload has "
                              f"{len(samples):,}; give a longer workload or a config file's data section")
        return [replace(r, request_id=f"d{i}", after=None, think_time=0.0) for i, r in enumerate(samples[:n])]
    kind = spec.get("type")
    if kind == "random":
        ins = _distribution(rng, spec.get("input_distribution", {}), n)
        outs = _distribution(rng, spec.get("output_distribution", {}), n)
        return [Request(f"d{i}", 0.0, int(a), int(b)) for i, (a, b) in enumerate(zip(ins, outs))]
    if kind == "shared_prefix":
        return _shared_prefix(rng, spec.get("shared_prefix", {}))
    raise ConfigError(f"data type {kind!r}: servesim models inference-perf's random and shared_prefix data (or "
                      "none: the --workload's requests)")


def _distribution(rng: np.random.Generator, d: dict, n: int) -> np.ndarray:
    """`generate_distribution`'s normal: clipped to [min, max], rounded (defaults 10, 1024, 512, 200)."""
    low, high = d.get("min", 10), d.get("max", 1024)
    if d.get("type", "normal") != "normal":
        raise ConfigError(f"distribution type {d.get('type')!r}: servesim models inference-perf's normal one")
    values = rng.normal(d.get("mean", 512), d.get("std_dev", 200), n)
    return np.maximum(1, np.rint(np.clip(values, low, high))).astype(np.int64)


def _shared_prefix(rng: np.random.Generator, p: dict) -> list:
    from servesim.engine.request import Request

    groups = p.get("num_groups", p.get("num_unique_system_prompts", 10))
    per = p.get("num_prompts_per_group", p.get("num_users_per_system_prompt", 10))
    system, question, output = p.get("system_prompt_len", 100), p.get("question_len", 50), p.get("output_len", 50)
    for name, v in (("system_prompt_len", system), ("question_len", question), ("output_len", output)):
        if not isinstance(v, int) or v < 0:
            raise ConfigError(f"shared_prefix.{name} {v!r}: servesim takes a fixed length, an integer >= 0")
    prompts = []
    shared = system // PREFIX_BLOCK
    for g in range(groups):
        for j in range(per):
            n = -(-(system + question) // PREFIX_BLOCK)
            ids = tuple(("system", g, k) if k < shared else ("question", g, j, k) for k in range(n))
            prompts.append((system + question, max(1, output), ids))
    order = rng.permutation(len(prompts))
    return [Request(f"d{i}", 0.0, prompts[k][0], prompts[k][1], hash_ids=prompts[k][2],
                    hash_block_size=PREFIX_BLOCK) for i, k in enumerate(order)]


def run(load: Load, config: Any, policy: str, cost: Any, server: Any = None) -> tuple[Any, np.ndarray]:
    """Stage after stage: each starts once the one before has every response back (seen at inference-perf's
    next look, every second from that stage's start) and `interval` has passed. The stages so far are simulated
    together for each next start, so each stage's steps are the final run's."""
    from servesim.clients import engine_server

    simulate = engine_server(policy, cost, server)

    start, requests, result = 0.0, [], None
    for k, (offsets, n) in enumerate(zip(load.offsets, (len(o) for o in load.offsets))):
        data = load.data  # (request i takes entry i mod N: shared_prefix's prompts repeat)
        requests += [replace(data[i % len(data)], request_id=f"s{k}-{i}", arrival_time=start + HEAD_START_S + t)
                     for i, t in zip(range(n), offsets)]
        result = simulate(requests, config)
        t = result.timelines
        mine = np.array([r.request_id.startswith(f"s{k}-") for r in requests])
        ends = np.where(np.isnan(t.finish_time), t.arrival_time, t.finish_time)[mine]
        done = float(ends.max()) if ends.size else start
        start += max(0.0, math.ceil((done - start) / POLL_S - 1e-9) * POLL_S) + load.interval
    return result, np.array([int(r.request_id.split("-")[0][1:]) for r in requests])


def summarize(result: Any, stage_of: np.ndarray, load: Load, opts: Any) -> dict[str, Any]:
    """inference-perf's lifecycle metrics, per stage and over the run (`stage_N_...`, `summary_...`)."""
    out = {f"stage_{k}_lifecycle_metrics": _lifecycle(result, stage_of == k, load.stages[k])
           for k in range(len(load.stages))}
    out["summary_lifecycle_metrics"] = _lifecycle(result, np.ones_like(stage_of, bool), None)
    return out


def _lifecycle(result: Any, mask: np.ndarray, stage: tuple | None) -> dict[str, Any]:
    mine = [r for r, m in zip(result.requests, mask, strict=True) if m]
    ok = [r for r in mine if r.finish_time is not None and r.num_tokens]
    start = np.array([r.arrival_time for r in mine])
    end = np.array([r.finish_time if r.finish_time is not None else r.arrival_time for r in mine])
    total = float(end.max() - start.min()) if mine else 0.0
    lat = np.array([r.finish_time - r.arrival_time for r in ok])
    times = [r.token_times for r in ok]
    ttft = np.array([ts[0] - r.arrival_time for r, ts in zip(ok, times) if len(ts) > 1])
    tpot = np.array([(ts[-1] - ts[0]) / (len(ts) - 1) for ts in times if len(ts) > 1])
    itl = np.concatenate([np.diff(ts) for ts in times]) if times else np.zeros(0)
    out_tokens = sum(r.num_tokens for r in ok)
    per_s = (lambda x: x / total) if total > 0 else (lambda x: 0.0)
    summary = {"count": len(mine)}
    if stage is not None:
        sends = float(start.max() - start.min()) if mine else 0.0
        summary |= {"requested_rate": stage[0], "send_duration": sends,
                    "achieved_rate": len(mine) / sends if sends > 0 else 0.0}
    return {"benchmark_time_seconds": total, "load_summary": summary, "successes": {
        "count": len(ok),
        "latency": {"request_latency": _dist(lat), "normalized_time_per_output_token":
                    _dist(lat / np.array([r.num_tokens for r in ok])) if ok else None,
                    "time_per_output_token": _dist(tpot), "time_to_first_token": _dist(ttft),
                    "inter_token_latency": _dist(itl)},
        "throughput": {"input_tokens_per_sec": per_s(sum(r.prompt_len for r in ok)),
                       "output_tokens_per_sec": per_s(out_tokens),
                       "total_tokens_per_sec": per_s(out_tokens + sum(r.prompt_len for r in ok)),
                       "requests_per_sec": per_s(len(ok))}}}


def _dist(values: np.ndarray) -> dict[str, float] | None:
    """`summarize()`: mean, min, max and numpy's percentiles, p50 as "median"."""
    if not values.size:
        return None
    pct = np.percentile(values, PERCENTILES)
    return {"mean": float(values.mean()), "min": float(values.min()), "max": float(values.max()),
            **{("median" if p == 50 else f"p{p:g}"): float(v) for p, v in zip(PERCENTILES, pct, strict=True)}}


def format_metrics(m: dict[str, Any]) -> str:
    """A line per stage and one for the run: what inference-perf's lifecycle reports hold (seconds)."""
    lines = [f"inference-perf lifecycle metrics (simulated by servesim; {VERSION})",
             f"{'':<10}{'requests':>9}{'req/s':>9}{'out tok/s':>11}{'TTFT p50':>10}{'TTFT p99':>10}"
             f"{'TPOT p50':>10}{'NTPOT p50':>11}{'e2e p99':>9}"]
    for key, s in m.items():
        name = "summary" if key.startswith("summary") else key.split("_")[0] + " " + key.split("_")[1]
        lat, thr = s["successes"]["latency"], s["successes"]["throughput"]

        def get(d, k):
            return f"{d[k]:.4f}" if d else "-"

        lines.append(f"{name:<10}{s['successes']['count']:>9}{thr['requests_per_sec']:>9.3f}"
                     f"{thr['output_tokens_per_sec']:>11.1f}{get(lat['time_to_first_token'], 'median'):>10}"
                     f"{get(lat['time_to_first_token'], 'p99'):>10}{get(lat['time_per_output_token'], 'median'):>10}"
                     f"{get(lat['normalized_time_per_output_token'], 'median'):>11}"
                     f"{get(lat['request_latency'], 'p99'):>9}")
    return "\n".join(lines)
