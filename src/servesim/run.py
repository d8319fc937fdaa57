"""A simulation result for notebooks: metrics, steps and requests as DataFrames, explanations, an HTML view.

    from servesim.run import Run
    run = Run.simulate("seed", policy="vllm", max_num_batched_tokens=256, max_num_seqs=8)
    run.metrics            # polars: metric, value (vLLM's key names)
    run.requests           # polars: one row per request, ms
    run.steps              # polars: one row per step
    print(run.explain())   # or run.explain("L")

polars is a core dependency; `to_pandas()` needs pandas as well.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np

from servesim.analysis.benchmark import DEFAULT_PERCENTILES, BenchmarkMetrics, benchmark_metrics, to_json
from servesim.analysis.breakdown import ServerMetrics, request_breakdown, server_metrics, step_arrays
from servesim.analysis.overload import Overload, detect_overload
from servesim.cost import CostModel
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engine.result import SimResult
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError, ServesimError


def _polars() -> Any:
    try:
        import polars
    except ImportError:
        raise ServesimError("DataFrames need polars: pip install polars") from None
    return polars


class Run:
    """Wraps a `SimResult` (unchanged, as `.result`) with the analyses of this package."""

    def __init__(self, result: SimResult, workload: Sequence[Request] | None = None,
                 percentiles: Sequence[float] = DEFAULT_PERCENTILES, goodput: dict[str, float] | None = None,
                 cost: CostModel | str | None = None) -> None:
        self.result = result
        # the workload and cost model, if given, allow the unchunked counterfactual in `explain()`
        self.workload = list(workload) if workload is not None else None
        self.cost = cost
        self.percentiles = tuple(percentiles)
        self.goodput = dict(goodput or {})

    @classmethod
    def simulate(cls, workload: str | Sequence[Request] = "seed", policy: str = "vllm",
                 cost: CostModel | str = "auto", record: str = "full", model: str | None = None,
                 gpu: str | None = None, tp: int | None = None, **config: Any) -> Run:
        """Simulate a built-in workload name, a file, or a list of requests; `config` are EngineConfig fields.
        The defaults are the command line's (`servesim.defaults`): cost `auto` is the toy cost for the lesson's
        workloads and the roofline (`model`, `gpu`, `tp`: Llama-3-8B, H100-80GB, 1) for real ones; the engine
        gets vLLM's defaults for the GPU, the lesson's workloads the lesson's settings.
        `record="summary"` is fastest and gives every metric; explanations and `bound_by` need "full"."""
        from servesim.defaults import build_cost, lesson_settings
        from servesim.engines.registry import policy_class
        from servesim.workloads import load_workload

        toy = {k: config.pop(k) for k in ("decode_ms", "prefill_token_ms", "overhead_ms") if k in config}
        _check_keywords(config)
        cm = build_cost(cost, workload, model=model, gpu=gpu, tp=tp, **toy)
        config = lesson_settings(workload, policy_class(policy).chunked) | config
        reqs = load_workload(workload) if isinstance(workload, str) else list(workload)
        return cls(simulate(reqs, EngineConfig(**config), policy, cm, record=record), reqs, cost=cm)

    @property
    def num_steps(self) -> int:
        log = self.result.step_log
        return len(log) if log is not None else len(self.result.steps)

    @cached_property
    def benchmark(self) -> BenchmarkMetrics:
        return benchmark_metrics(self.result, self.percentiles, self.goodput)

    @cached_property
    def server(self) -> ServerMetrics:
        return server_metrics(self.result, self.percentiles)

    @cached_property
    def overload(self) -> Overload:
        return detect_overload(self.result)

    @property
    def metrics(self) -> Any:
        """vLLM's result keys (and servesim's server-side ones) as a two-column polars DataFrame."""
        s = self.server
        values: dict[str, Any] = dict(to_json(self.benchmark))
        values.update({
            "mean_queue_time_ms": s.queue.mean, "mean_prefill_time_ms": s.prefill.mean,
            "num_preemptions": s.preemptions, "recompute_tax": s.recompute_tax,
            "slot_utilization": s.slot_utilization, "mean_batch_size": s.batch_size.mean,
            "mean_tokens_per_step": s.tokens_per_step.mean, "mean_kv_used": s.kv_used_mean,
            "num_steps": s.steps, "overloaded": float(self.overload.overloaded),
        })
        return _polars().DataFrame({"metric": list(values), "value": [None if v is None else float(v)
                                                                     for v in values.values()]})

    @property
    def requests(self) -> Any:
        t = self.result.timelines
        rb = request_breakdown(self.result)
        first, finish, arrival, out = t.first_token_time(), t.finish_time, t.arrival_time, t.output_len
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
        return _polars().DataFrame({
            "id": list(rb.ids), "arrival_ms": arrival * 1000,
            "prompt_len": t.prompt_len, "output_len": out,
            "ttft_ms": (first - arrival) * 1000, "tpot_ms": tpot * 1000, "e2el_ms": (finish - arrival) * 1000,
            "queue_ms": rb.queue * 1000, "prefill_ms": rb.prefill * 1000, "preempted_ms": rb.preempted * 1000,
            "num_preemptions": rb.num_preemptions, "num_prefill_chunks": rb.num_prefill_chunks,
            "recomputed_tokens": rb.recomputed_tokens, "finish_ms": finish * 1000,
        })

    @property
    def steps(self) -> Any:
        sa = step_arrays(self.result)
        return _polars().DataFrame({
            "step": np.arange(sa.start.size), "start_ms": sa.start * 1000, "duration_ms": sa.duration * 1000,
            "batch_size": sa.batch_size, "decodes": sa.decodes, "prefill_tokens": sa.prefill_tokens,
            "tokens": sa.tokens, "num_running": sa.num_running, "num_waiting": sa.num_waiting,
            "kv_used": sa.kv_used,
            # null without the waiting reasons (record="full" keeps them): unknown, not "nothing"
            "bound_by": [b.value for b in sa.bound] if sa.bound is not None else [None] * sa.start.size,
        }, schema_overrides={"bound_by": _polars().String})

    def to_pandas(self, table: str = "requests") -> Any:
        """One of "metrics", "requests", "steps" as a pandas DataFrame (needs pandas and pyarrow)."""
        if table not in ("metrics", "requests", "steps"):
            raise ServesimError(f"unknown table {table!r}; valid: metrics, requests, steps")
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise ServesimError("to_pandas() needs pandas: pip install pandas pyarrow") from None
        return getattr(self, table).to_pandas()

    def unchunked(self) -> SimResult | None:
        """The same workload with chunked prefill off (the lesson's comparison), when the workload is known."""
        from dataclasses import replace

        if self.workload is None or self.cost is None or not self.result.config.enable_chunked_prefill:
            return None
        from servesim.engines.registry import engine_for

        own = engine_for(self.result.policy).unchunked
        if own is not None:
            cfg = own(self.result.config)
        else:
            cfg = replace(self.result.config, enable_chunked_prefill=False, max_num_batched_tokens=None)
        return simulate(self.workload, cfg, self.result.policy, self.cost)

    def explain(self, request_id: str | None = None) -> str:
        from servesim.analysis.explain import explain_request, explain_run

        if request_id is not None:
            return "\n".join(explain_request(self.result, request_id))
        cost = self.cost if not isinstance(self.cost, str) else None
        return "\n".join(explain_run(self.result, self.unchunked(), cost, self.unspeculative()))

    def unspeculative(self) -> SimResult | None:
        """The same run without speculative decoding (the same KV pool: speculation's effect on time alone), when
        the workload is known and the run speculated."""
        from servesim.analysis.speculation import plain_run

        if self.workload is None or self.cost is None:
            return None
        return plain_run(self.result, self.workload, self.cost)

    def plot_timeline(self) -> Any:
        """A plotly figure: request Gantt, tokens per step against the budget, KV blocks, queues (the report's)."""
        from servesim.report.figures import timeline_figure
        from servesim.report.view import run_view

        return timeline_figure(run_view(self.result.policy, self.result))

    def plot_latency(self) -> Any:
        """A plotly figure: TTFT, TPOT, ITL and E2E latency CDFs."""
        from servesim.report.figures import latency_figure
        from servesim.report.view import run_view

        return latency_figure([run_view(self.result.policy, self.result)])

    def __repr__(self) -> str:
        b = self.benchmark
        return (f"Run(policy={self.result.policy!r}, cost={self.result.cost_model!r}, requests={b.completed}, "
                f"steps={self.num_steps}, mean_ttft_ms={b['ttft'].mean:.4g}, "
                f"mean_tpot_ms={b['tpot'].mean:.4g}, duration_s={b.duration:.4g}"
                f"{', OVERLOADED' if self.overload.overloaded else ''})")

    def _repr_html_(self) -> str:
        b = self.benchmark
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td style='text-align:right'>{v:.4g}</td></tr>"
                       for k, v in to_json(b).items() if isinstance(v, float | int) and not k.startswith("std"))
        warn = f"<p><b>{html.escape(self.overload.sentence())}</b></p>" if self.overload.overloaded else ""
        return (f"<div><p><b>servesim run</b>: policy {html.escape(self.result.policy)}, cost "
                f"{html.escape(self.result.cost_model)}, {self.num_steps} steps</p>{warn}"
                f"<table><tr><th>metric</th><th>value</th></tr>{rows}</table></div>")


def _check_keywords(config: dict[str, Any]) -> None:
    """A keyword `Run.simulate` does not know is refused with the nearest it does (an EngineConfig field, a toy
    cost option)."""
    import difflib

    known = (*EngineConfig.field_names(), "decode_ms", "prefill_token_ms", "overhead_ms")
    for name in config:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {near[0]}?" if near else "; expected an EngineConfig field (see its field_names())"
            raise ConfigError(f"Run.simulate: unknown keyword {name!r}{hint}")
