"""Each measured point simulated under its client and compared, metric by metric, without fitting anything on it.

The method, as printed with every result: the deployment is built from the row alone (model, GPU, TP, engine and
its knobs, the cost model's constants from kernel measurements and datasheets); the client sends the row's load
(`concurrency`: a closed loop of identical requests started together; `request_rate`: Poisson arrivals, seed 0)
after its warm-up, which it does not measure; each metric is the client's own definition (vllm bench serve's
means: TTFT, TPOT = (e2el - ttft) / (n - 1), ITL token-weighted, E2EL, output tokens/s; AIPerf's: TTFT, ITL =
(latency - TTFT) / (OSL - 1), request latency, output token throughput; sglang.bench_serving's means, its warm-up
of one request before; GuideLLM's; inference-perf's, NTPOT = latency / output tokens; MLPerf LoadGen's integer-ns
means). A measured metric the client does not report puts the row out of reach. The error is (predicted - measured) /
measured; MAPE its mean absolute value. A row servesim cannot express is counted out of reach, with the reason.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from servesim.errors import ServesimError
from servesim.validate.rows import METRICS, Point

METHOD = ("no fitting on the scored rows; each deployment built from its row; the client's load after its warm-up "
          "(not measured); each metric by the client's own definition; error = (predicted - measured) / measured")
GROUPS = ("model", "gpu", "engine", "client", "load")


@dataclass(slots=True)
class Report:
    rows: int = 0
    predicted: list = field(default_factory=list)  # (point, predictions, errors %)
    out_of_reach: list = field(default_factory=list)  # (line, reason)
    method: str = METHOD  # (aic-silicon adds which client replayed which source's rows)

    def mape(self, metric: str, rows: list | None = None) -> float | None:
        errs = [e[metric] for _, _, e in (self.predicted if rows is None else rows) if metric in e]
        return float(np.mean(np.abs(errs))) if errs else None

    def signed(self, metric: str, rows: list | None = None) -> float | None:
        errs = [e[metric] for _, _, e in (self.predicted if rows is None else rows) if metric in e]
        return float(np.mean(errs)) if errs else None

    def groups(self) -> dict[str, dict[str, list]]:
        out: dict[str, dict[str, list]] = {g: defaultdict(list) for g in GROUPS}
        for row in self.predicted:
            for g in GROUPS:
                out[g][group_of(row[0], g)].append(row)
        return out

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"method": self.method, "rows": self.rows, "predicted": len(self.predicted),
                               "out_of_reach": [{"line": line, "reason": why} for line, why in self.out_of_reach]}
        for m in METRICS:
            doc[f"{m.removesuffix('_ms')}_mape"] = self.mape(m)
            doc[f"{m.removesuffix('_ms')}_signed_error"] = self.signed(m)
        doc["groups"] = {g: {k: {"rows": len(v), **{f"{m.removesuffix('_ms')}_mape": self.mape(m, v)
                                                    for m in METRICS if self.mape(m, v) is not None}}
                             for k, v in by.items()} for g, by in self.groups().items()}
        doc["points"] = [{"line": p.line, **p.fields, "measured": p.measured, "predicted": pred, "error_pct": err}
                         for p, pred, err in self.predicted]
        return doc


def group_of(p: Point, g: str) -> str:
    f = p.fields
    if g == "engine":
        return f["engine"] + (f" {f['engine_version']}" if "engine_version" in f else "")
    if g == "load":
        if "request_rate" in f:
            return "rate"
        c = f["concurrency"]
        return "c1" if c == 1 else "c2-8" if c <= 8 else "c9-64" if c <= 64 else "c65+"
    return str(f[g])


def score(points: list[Point], progress=None, executor=None) -> Report:
    """Every point predicted and compared, in order; `executor` (`servesim.plan.executors`: a process pool or
    Ray) runs the points apart, with the same report (a prediction depends only on its point)."""
    from servesim.plan.executors import LocalExecutor

    report = Report(rows=len(points))
    outs: list = [None] * len(points)
    for i, out in (executor or LocalExecutor(1)).run(predict_or_reason, points):
        outs[i] = out
        if progress is not None:
            progress()
    for p, out in zip(points, outs, strict=True):
        if isinstance(out, str):
            report.out_of_reach.append((p.line, out))
        else:
            err = {m: (out[m] - v) / v * 100 for m, v in p.measured.items() if m in out}
            report.predicted.append((p, out, err))
    return report


def predict_or_reason(p: Point) -> dict[str, float] | str:
    """The point's predictions, or why it is out of reach (a task for an executor: top level, picklable)."""
    try:
        out = predict(p)
    except ServesimError as exc:
        return str(exc)
    lacking = [m for m in p.measured if m not in out]
    if lacking:  # (a measured metric the client does not report is refused, not left unscored)
        return f"{lacking[0]}: not a metric {p.fields['client']} reports"
    return out


def predict(p: Point) -> dict[str, float]:
    """The row's metrics as servesim predicts them under its client."""
    f = p.fields
    if "prefill" in f:  # a disaggregated deployment: its prefill and decode pools (`servesim.validate.disagg`)
        from servesim.validate.disagg import predict_disagg

        return predict_disagg(f)
    cfg, cost = engine_setup(f)
    if p.run is not None:  # a measured run's own requests, sent as its client sends them
        from servesim.measured.replay import replay

        return replay(p.run, cfg, f["engine"], cost, sends="client").means
    replay_as = CLIENTS.get(f["client"])
    if replay_as is not None:
        return replay_as(f, cfg, cost)
    from servesim.errors import ConfigError

    raise ConfigError(f"client {f['client']!r}: validate takes vllm-bench, aiperf, sglang-bench, guidellm, "
                      "inference-perf and mlperf rows")


def engine_setup(f: dict) -> tuple[Any, Any]:
    """(the engine's config, its cost model) for a row's fields: its engine, layout, knobs and engine section."""
    from servesim.defaults import build_cost
    from servesim.engines.config import EngineConfig
    from servesim.engines.registry import engine_for

    spec = engine_for(f["engine"])
    cost_name = f.get("cost", "roofline")
    from servesim.cost.host import preset_for

    preset = preset_for(spec.name, f.get("engine_version")) or spec.host_preset  # (the release's defaults)
    version = f.get("engine_version") if cost_name == "aic" and f.get("engine_version") != "?" else None
    from servesim.cost.layout import TRTLLM_FLAGS, from_flags

    layout = from_flags(spec.name, f.get("tp", 1), **{k: f.get(k) for k in (
        "enable_expert_parallel", "data_parallel_size", "ep_size", "enable_dp_attention", "dp_size",
        *TRTLLM_FLAGS)})
    shaped = {"layout": layout} if layout is not None else {"tp": f.get("tp", 1)}
    cost = build_cost("toy") if cost_name == "toy" else build_cost(
        cost_name, model=f["model"], gpu=f["gpu"], quantization=f.get("quantization"),
        kv_cache_dtype=f.get("kv_cache_dtype"), default_engine=preset, aic_backend_version=version, **shaped)
    knobs = {k: f[k] for k in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization") if k in f}
    if f.get("frontend", "none") != "none":  # the path outside the engine core (`servesim.engine.frontend`)
        from servesim.engine.frontend import frontend

        fe = frontend(f["frontend"])
        knobs |= {"frontend_latency": fe.latency, "frontend_latency_per_token": fe.latency_per_token}
    cfg = EngineConfig(**knobs)
    if spec.section is not None and spec.section in f:  # the engine's own options, as the row's source launched it
        cfg = replace(cfg, **{spec.section: EngineConfig.section_class(spec.section)(**f[spec.section])})
    if spec.from_shared_sizes is not None:
        cfg, _ = spec.from_shared_sizes(cfg)
    return cfg, cost


def _vllm_bench(f: dict, cfg: Any, cost: Any) -> dict[str, float]:
    from servesim.clients import vllm_bench
    from servesim.engine import simulate
    from servesim.engine.request import Request
    from servesim.workloads.synthetic import arrival_times

    n, w = f["num_requests"], f.get("warmup_requests", 0)
    if f.get("start") == "staggered":
        return _staggered(f, cfg, cost)
    if "concurrency" in f:
        cfg, times = replace(cfg, max_concurrency=f["concurrency"]), np.zeros(n)
    else:
        times = arrival_times(n, f["request_rate"], 1.0, np.random.default_rng(0))
    start = 0.0
    warm = [Request(f"w{i}", 0.0, f["isl"], f["osl"]) for i in range(w)]
    if warm:  # vllm bench serve's --num-warmups: sent and awaited before the benchmark, not measured
        t = simulate(warm, cfg, f["engine"], cost, record="summary").timelines
        start = float(np.nanmax(t.finish_time))
    reqs = warm + [Request(f"r{i}", start + float(a), f["isl"], f["osl"]) for i, a in enumerate(times)]
    result = simulate(reqs, cfg, f["engine"], cost, record="summary")
    return vllm_bench.means(result, np.array([r.request_id.startswith("r") for r in reqs]))


def _staggered(f: dict, cfg: Any, cost: Any) -> dict[str, float]:
    """A desynchronised closed loop of C users (`start` staggered): the users' first requests go one C-th of a
    lone request's latency apart, so that completions, and the sends they release, stay spread over a request's
    life instead of in waves; the first `warmup_requests` of the loop are not measured."""
    from servesim.clients import vllm_bench
    from servesim.engine import simulate
    from servesim.engine.request import Request
    from servesim.errors import ConfigError

    if "concurrency" not in f:
        raise ConfigError("start staggered is a closed loop's: give concurrency")
    c, w, n = f["concurrency"], f.get("warmup_requests", 0), f["num_requests"]
    alone = simulate([Request("alone", 0.0, f["isl"], f["osl"])], cfg, f["engine"], cost, record="summary")
    gap = float(alone.timelines.finish_time[0]) / c
    reqs = [Request(f"r{i}", min(i, c - 1) * gap, f["isl"], f["osl"]) for i in range(w + n)]
    result = simulate(reqs, replace(cfg, max_concurrency=c), f["engine"], cost, record="summary")
    return vllm_bench.means(result, np.arange(w + n) >= w)


def _aiperf(f: dict, cfg: Any, cost: Any) -> dict[str, float]:
    from servesim.clients import aiperf

    defaults = {name: getattr(aiperf.AIPerfFlags, name) for name in aiperf.OWN}
    opts = SimpleNamespace(**defaults | dict(
        concurrency=f.get("concurrency"), request_rate=f.get("request_rate"), request_count=f["num_requests"],
        warmup_request_count=f.get("warmup_requests", 0), isl=f["isl"], osl=f["osl"], num_dataset_entries=1,
        streaming=True, seed=0))
    load = aiperf.plan(opts)
    return aiperf.means(aiperf.metrics(*aiperf.run(load, cfg, f["engine"], cost), streaming=True))


def _inferencex(f: dict, cfg: Any, cost: Any) -> dict[str, float]:
    """InferenceX's benchmark_serving.py (`servesim.clients.inferencex`): the row's `concurrency`, `isl` and
    `osl`, and which client version its `measured` date ran ("?": the newest, with its warm-up)."""
    from datetime import date

    from servesim.clients import inferencex

    when = date.max if f.get("measured", "?") == "?" else date.fromisoformat(f["measured"])
    load = inferencex.plan(f["isl"], f["osl"], f["concurrency"], when)
    return inferencex.means(*inferencex.run(load, cfg, f["engine"], cost))


def _sglang_bench(f: dict, cfg: Any, cost: Any) -> dict[str, float]:
    """`sglang.bench_serving`'s: its random dataset at exactly `isl` and `osl` (range ratio 1), `--max-concurrency`
    or `--request-rate` (exponential gaps, seed 0), its warm-up (`warmup_requests`, SGLang's default 1), its
    means."""
    from servesim.clients import sglang_bench

    opts = SimpleNamespace(request_rate=f.get("request_rate"), max_concurrency=f.get("concurrency"),
                           warmup_requests=f.get("warmup_requests", 1), dataset_name="random", workload="random",
                           num_requests=f["num_requests"], random_input_len=f["isl"], random_output_len=f["osl"],
                           random_range_ratio=1.0, seed=0)
    load = sglang_bench.plan(opts, [])
    m = sglang_bench.summarize(*sglang_bench.run(load, cfg, f["engine"], cost), load, opts)
    return {"ttft_ms": m["mean_ttft_ms"], "tpot_ms": m["mean_tpot_ms"], "itl_ms": m["mean_itl_ms"],
            "e2el_ms": m["mean_e2e_latency_ms"], "output_throughput": m["output_throughput"]}


def _guidellm(f: dict, cfg: Any, cost: Any) -> dict[str, float]:
    """GuideLLM's: `--profile kind=concurrent,rate=C` (or `poisson` at the row's rate), `max_requests` of the
    row's count, synthetic data at exactly `isl` and `osl`; its means (TPOT with the first token, token-weighted;
    ITL over the tokens after the first). It has no warm-up servesim models: a row with one is out of reach."""
    from servesim.clients import guidellm
    from servesim.errors import ConfigError

    if f.get("warmup_requests"):
        raise ConfigError("warmup_requests: GuideLLM's warm-up is not modelled yet")
    profile = (f"kind=concurrent,rate={f['concurrency']}" if "concurrency" in f
               else f"kind=poisson,rate={f['request_rate']}")
    opts = SimpleNamespace(profile=profile, constraint=f"kind=max_requests,count={f['num_requests']}",
                           data=f"kind=synthetic_text,prompt_tokens={f['isl']},output_tokens={f['osl']}", seed=0)
    load = guidellm.plan(opts)
    (m,) = guidellm.summarize(*guidellm.run(load, cfg, f["engine"], cost), load, opts)
    return {"ttft_ms": m["time_to_first_token_ms"]["mean"], "tpot_ms": m["time_per_output_token_ms"]["mean"],
            "itl_ms": m["inter_token_latency_ms"]["mean"], "e2el_ms": m["request_latency"]["mean"] * 1e3,
            "output_throughput": m["output_tokens_per_second"]}


def _rate_load(f: dict, client: str) -> None:
    """A client that sends a rate and no warm-up: a row with either is out of reach."""
    from servesim.errors import ConfigError

    if f.get("warmup_requests"):
        raise ConfigError(f"warmup_requests: {client} sends no warm-up")
    if "concurrency" in f:
        raise ConfigError(f"concurrency: {client}'s load is a rate (give request_rate)")


def _inference_perf(f: dict, cfg: Any, cost: Any) -> dict[str, float]:
    """inference-perf's: one `constant` stage at the row's rate lasting `num_requests / rate` (its count
    `int(rate x duration)` the row's), `random` data at exactly `isl` and `osl` (std_dev 0); its run summary's
    means (TTFT, TPOT = (last - first token) / (tokens - 1), ITL over every gap, request latency, NTPOT = latency
    / output tokens; seconds, here ms) and output tokens per second. It has no warm-up."""
    import math

    from servesim.clients import inference_perf

    _rate_load(f, "inference-perf")
    rate, n = f["request_rate"], f["num_requests"]
    duration = n / rate
    while int(rate * duration) < n:  # (n / rate x rate can round below n)
        duration = math.nextafter(duration, math.inf)
    data = {"type": "random", **{f"{side}_distribution": {"min": f[k], "max": f[k], "mean": f[k], "std_dev": 0}
                                 for side, k in (("input", "isl"), ("output", "osl"))}}
    opts = SimpleNamespace(config_file=None, stages=f"{rate!r}:{duration!r}", load_type="constant", seed=0)
    load = inference_perf.plan(opts, [], config={"data": data})
    result, stage_of = inference_perf.run(load, cfg, f["engine"], cost)
    s = inference_perf.summarize(result, stage_of, load, None)["summary_lifecycle_metrics"]["successes"]
    lat = s["latency"]
    return {"ttft_ms": lat["time_to_first_token"]["mean"] * 1e3, "tpot_ms": lat["time_per_output_token"]["mean"] * 1e3,
            "itl_ms": lat["inter_token_latency"]["mean"] * 1e3, "e2el_ms": lat["request_latency"]["mean"] * 1e3,
            "ntpot_ms": lat["normalized_time_per_output_token"]["mean"] * 1e3,
            "output_throughput": s["throughput"]["output_tokens_per_sec"]}


def _mlperf(f: dict, cfg: Any, cost: Any) -> dict[str, float]:
    """MLPerf LoadGen's Server scenario at the row's rate as target QPS: Poisson queries from 0, the row's count
    as min query count with no min duration, one performance sample (identical requests); its summary's means
    (`Mean First Token latency`, `Mean Time per Output Token`, `Mean latency`: integer ns) and completed tokens per
    second. It has no warm-up."""
    from servesim.clients import mlperf
    from servesim.engine.request import Request

    _rate_load(f, "mlperf")
    opts = SimpleNamespace(**{name: getattr(mlperf.MLPerfFlags, name) for name in mlperf.OWN} | dict(
        scenario="Server", target_qps=f["request_rate"], min_duration_ms=0, min_query_count=f["num_requests"],
        seed=0))
    load = mlperf.plan(opts, [Request("s0", 0.0, f["isl"], f["osl"])])
    m = mlperf.metrics(*mlperf.run(load, cfg, f["engine"], cost), load)
    return {"ttft_ms": m["mean_first_token_latency_ns"] / 1e6, "tpot_ms": m["mean_time_per_output_token_ns"] / 1e6,
            "e2el_ms": m["mean_latency_ns"] / 1e6, "output_throughput": m["completed_tokens_per_second"]}


# each client's replay of a row (its name as `--client` takes it)
CLIENTS = {"vllm-bench": _vllm_bench, "aiperf": _aiperf, "inferencex": _inferencex, "sglang-bench": _sglang_bench,
           "guidellm": _guidellm, "inference-perf": _inference_perf, "mlperf": _mlperf}
