"""What a report draws of one run, read from its records: the step panels, the Gantt bars, the scrubber's steps,
the latency CDFs. Plain data (seconds, token counts), so the HTML, the PNGs and the notebook draw the same thing.

Sizes are bounded whatever the run's length: at most `MAX_POINTS` step bars (steps aggregated into equal time bins
past that, means per step), `MAX_REQUESTS` Gantt rows (requests sampled evenly in workload order, the longest
prompt and the one with the worst gap always in), `MAX_SCRUB` scrubber steps, `CDF_POINTS` points per CDF.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from servesim.engine.result import SimResult
from servesim.export.spans import Span, records_complete, request_spans

MAX_POINTS = 2000
MAX_REQUESTS = 200
MAX_SCRUB = 2000
CDF_POINTS = 400
BATCH_SHOWN = 16  # entries of one step's batch (and of its waiters) the scrubber lists; the rest counted


@dataclass(slots=True)
class StepPanel:
    """One value per step, or per time bin (means over the bin's steps) when `binned`."""

    start: np.ndarray  # seconds
    width: np.ndarray  # seconds: the step's duration, or the bin's width
    first_step: np.ndarray
    last_step: np.ndarray
    decode: np.ndarray  # tokens
    prefill: np.ndarray
    budget: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    kv_used: np.ndarray | None  # blocks; None with unlimited KV
    kv_free: np.ndarray | None
    binned: bool
    kv_cached: np.ndarray | None = None  # prefix caching: free blocks still holding cached KV (part of kv_free)


@dataclass(slots=True)
class Bar:
    request_id: str
    kind: str  # one of export.spans.KINDS
    start: float
    end: float
    hover: str


@dataclass(slots=True)
class RunView:
    label: str
    result: SimResult
    panel: StepPanel
    rows: list[str]  # Gantt rows, top to bottom
    bars: list[Bar]
    scrub: list[dict]  # one step each: its batch, who waited and why
    cdfs: dict[str, tuple[np.ndarray, np.ndarray]]  # metric -> (ms, cumulative fraction)
    exact: bool  # every step record kept: chunks and waiting reasons are exact
    notes: list[str] = field(default_factory=list)  # what was aggregated or sampled
    plain: SimResult | None = None  # a speculating run's twin without speculation (`analysis.speculation`)

    @property
    def end(self) -> float:
        p = self.panel
        return float((p.start + p.width).max()) if p.start.size else 0.0


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.4g} ms"


def step_panel(result: SimResult, max_points: int = MAX_POINTS) -> StepPanel:
    from servesim.analysis.breakdown import step_log

    log = step_log(result)
    n = len(log)
    start, dur = log.start_time, log.duration
    free = log.free_blocks_after_schedule.astype(float)
    usable = result.config.usable_blocks
    budget = float(result.config.max_num_batched_tokens or 0)
    cols = {"decode": log.num_decodes.astype(float), "prefill": log.prefill_tokens.astype(float),
            "running": log.num_running_after.astype(float), "waiting": log.num_waiting_after.astype(float)}
    if usable is not None:
        cols |= {"kv_used": usable - free, "kv_free": free}
    cached = getattr(log, "cached_free_blocks_after_schedule", None)
    if cached is not None:
        cols["kv_cached"] = cached.astype(float)
    steps = np.arange(n)
    if n <= max_points:
        return StepPanel(start, dur, steps, steps, budget=np.full(n, budget), binned=False,
                         kv_used=cols.get("kv_used"), kv_free=cols.get("kv_free"), kv_cached=cols.get("kv_cached"),
                         **{k: cols[k] for k in ("decode", "prefill", "running", "waiting")})
    edges = np.linspace(float(start[0]), float(start[-1] + dur[-1]), max_points + 1)
    which = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, max_points - 1)
    counts = np.bincount(which, minlength=max_points)
    keep = counts > 0  # bins the engine spent idle have no steps
    means = {k: (np.bincount(which, weights=v, minlength=max_points)[keep] / counts[keep]) for k, v in cols.items()}
    first = np.searchsorted(which, np.flatnonzero(keep), side="left")
    last = np.searchsorted(which, np.flatnonzero(keep), side="right") - 1
    return StepPanel(edges[:-1][keep], np.diff(edges)[keep], first, last, budget=np.full(int(keep.sum()), budget),
                     binned=True, kv_used=means.get("kv_used"), kv_free=means.get("kv_free"),
                     kv_cached=means.get("kv_cached"),
                     **{k: means[k] for k in ("decode", "prefill", "running", "waiting")})


def shown_requests(result: SimResult, max_requests: int = MAX_REQUESTS) -> list[str]:
    """Every request, or an even sample in workload order with the longest prompt and the worst gap's request."""
    from servesim.analysis.metrics import longest_prompt, worst_gap

    ids = result.timelines.ids
    if len(ids) <= max_requests:
        return list(ids)
    pick = set(np.linspace(0, len(ids) - 1, max_requests - 2).round().astype(int).tolist())
    index = {rid: i for i, rid in enumerate(ids)}
    gap = worst_gap(result)
    for rid in (longest_prompt(result), gap.request_id if gap else None):
        if rid is not None:
            pick.add(index[rid])
    return [ids[i] for i in sorted(pick)]


def _span_bar(sp: Span) -> Bar:
    steps = "" if sp.first_step is None else (
        f" · step {sp.first_step}" if sp.first_step == sp.last_step else f" · steps {sp.first_step}-{sp.last_step}")
    what = {"prefill": f"prefill {sp.tokens} tokens", "decode": "decode"}.get(sp.kind, sp.kind)
    hover = (f"{sp.request_id} · {what}{steps}<br>{_ms(sp.start)} to {_ms(sp.end)} ({_ms(sp.duration)})"
             + (f"<br>{sp.detail}" if sp.detail else ""))
    return Bar(sp.request_id, sp.kind, sp.start, sp.end, hover)


def coarse_bars(result: SimResult, rows: list[str]) -> list[Bar]:
    """Bars from the timelines alone (a run whose records were not all kept): queued, prefill (first scheduled
    to first token, however many chunks), decode (first token to finish)."""
    t = result.timelines
    first_token = t.first_token_time()
    bars = []
    for rid in rows:
        i = t.index_of(rid)
        arrival, sched, tok, fin = (float(x) for x in (t.arrival_time[i], t.first_scheduled_time[i],
                                                       first_token[i], t.finish_time[i]))
        pre = int(t.num_preemptions[i])
        extra = f"<br>preempted {pre} time{'s' if pre != 1 else ''}, {_ms(float(t.time_preempted[i]))} in all" \
            if pre else ""
        parts = [("queued", arrival, sched, "waited (reasons are kept for the first steps only)"),
                 ("prefill", sched, tok, f"prompt {int(t.prompt_len[i])} tokens in {int(t.num_prefill_chunks[i])} "
                                         "chunks (first scheduled to first token)"),
                 ("decode", tok, fin, f"{int(t.output_len[i])} output tokens (first token to finish)")]
        for kind, a, b, text in parts:
            if a == a and b == b and b > a:  # NaN: never reached
                bars.append(Bar(rid, kind, a, b, f"{rid} · {kind}<br>{_ms(a)} to {_ms(b)} ({_ms(b - a)})<br>"
                                                f"{text}{extra}"))
    return bars


def scrub_steps(result: SimResult, max_steps: int = MAX_SCRUB) -> list[dict]:
    """Each recorded step's batch (who ran, with how many tokens) and who waited and why, for the slider."""
    steps = result.steps
    if len(steps) > max_steps:
        steps = [steps[i] for i in np.linspace(0, len(steps) - 1, max_steps).round().astype(int).tolist()]
    out = []
    for s in steps:
        sch = s.scheduled
        ran = [[e.id, e.num_scheduled_tokens, e.kind.value] for e in sch.rest[:BATCH_SHOWN]]
        ran += [[rid, 1, "decode"] for rid in sch.ids[:max(0, BATCH_SHOWN - len(ran))]]
        wait = [[w.id, w.reason.value, w.detail] for w in s.waiting[:BATCH_SHOWN]]
        out.append({"step": s.step, "start_ms": round(s.start_time * 1000, 4), "ms": round(s.duration * 1000, 4),
                    "tokens": s.total_scheduled_tokens, "budget": s.token_budget, "ran": ran,
                    "ran_more": len(sch) - len(ran), "wait": wait, "wait_more": len(s.waiting) - len(wait),
                    "preempted": list(s.preempted), "finished": list(s.finished)})
    return out


def cdf(values: np.ndarray, weights: np.ndarray | None = None, points: int = CDF_POINTS
        ) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, fraction <= each), at most `points` of them; `weights` repeat each value."""
    keep = ~np.isnan(values)
    values = values[keep]
    w = np.ones(values.size) if weights is None else weights[keep].astype(float)
    order = np.argsort(values, kind="stable")
    x, frac = values[order], np.cumsum(w[order])
    if not x.size or frac[-1] == 0:
        return np.zeros(0), np.zeros(0)
    frac = frac / frac[-1]
    if x.size > points:
        at = np.unique(np.searchsorted(frac, np.linspace(0, 1, points), side="left").clip(0, x.size - 1))
        x, frac = x[at], frac[at]
    return np.append(x[:1], x), np.append(0.0, frac)  # the curve rises from 0 at the smallest value


def latency_cdfs(result: SimResult) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """vllm bench serve's TTFT, TPOT, ITL and E2EL (analysis.benchmark's definitions), in ms."""
    from servesim.analysis.benchmark import request_arrays

    a = request_arrays(result)
    return {"ttft": cdf(a.ttft * 1000), "tpot": cdf(a.tpot * 1000), "itl": cdf(a.itl * 1000, a.itl_weights),
            "e2el": cdf(a.e2el * 1000)}


def run_view(label: str, result: SimResult, max_requests: int = MAX_REQUESTS,
             plain: SimResult | None = None) -> RunView:
    exact = records_complete(result)
    rows = shown_requests(result, max_requests)
    if exact:
        bars = [_span_bar(sp) for sp in request_spans(result, set(rows))]
    else:
        bars = coarse_bars(result, rows)
    panel = step_panel(result)
    n_steps = len(panel.first_step) if not panel.binned else int(panel.last_step[-1]) + 1
    notes = []
    if panel.binned:
        notes.append(f"{n_steps:,} steps aggregated into {panel.start.size:,} time bins of "
                     f"{_ms(float(panel.width[0]))} (the mean per step in each bin)")
    if len(rows) < len(result.requests):
        notes.append(f"the Gantt shows {len(rows):,} of {len(result.requests):,} requests, sampled evenly in "
                     "workload order (the longest prompt and the worst gap's request always in)")
    if not exact:
        kept = f"for the first {len(result.steps):,} steps only" if result.steps else "for no step (record='summary')"
        notes.append(f"step records kept {kept}: the Gantt draws one prefill bar over all of a prompt's chunks, "
                     "and the scrubber covers the recorded steps")
    scrub = scrub_steps(result)
    if len(scrub) < len(result.steps):
        notes.append(f"the scrubber samples {len(scrub):,} of the {len(result.steps):,} recorded steps")
    return RunView(label, result, panel, rows, bars, scrub, latency_cdfs(result), exact, notes, plain)
