"""Server-side measures only a simulator can give: where each request's time went, and what each step looked like.

Read from the step records, the timelines and the preemption ledger; arrays are numpy, one value per request or
per step, so a million-request run costs one pass over the records.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servesim.analysis.benchmark import DEFAULT_PERCENTILES, Summary
from servesim.analysis.metrics import slot_utilization
from servesim.engine.records import Reason, StepRecord
from servesim.engine.result import SimResult
from servesim.engine.steplog import StepArrays as StepLogArrays
from servesim.engine.steplog import StepLog


class Bound(str, enum.Enum):
    """What limited a step: the first that applies, in this order."""

    KV_BLOCKS = "kv_blocks"  # someone waited for blocks, was preempted, or admissions froze after a preemption
    MAX_NUM_SEQS = "max_num_seqs"  # someone waited for a seat
    TOKEN_BUDGET = "token_budget"  # someone waited for tokens, or a prompt chunk was cut at a full budget
    PREFILL_THRESHOLD = "long_prefill_token_threshold"  # a chunk was cut below the budget
    BATCH_CLOSED = "batch_closed"  # static batching: arrivals wait for the running batch to drain
    NOTHING = "nothing"  # every request present got all it asked for


# SGLang's reasons count as the bound they are: no memory after the reserve, no request row, the chunk budget,
# and the batch marked full (nothing joins until a request finishes, as a closed batch); TensorRT-LLM's lifetime
# reservation (GUARANTEED_NO_EVICT) is a KV bound
_KV = {Reason.KV_BLOCKS, Reason.PREEMPTED, Reason.ADMISSION_FROZEN, Reason.NO_TOKEN, Reason.LIFETIME_KV}
_SEATS = {Reason.MAX_NUM_SEQS, Reason.MAX_RUNNING_REQUESTS}
_TOKENS = {Reason.TOKEN_BUDGET, Reason.CHUNK_BUDGET}
_CLOSED = {Reason.BATCH_CLOSED, Reason.BATCH_FULL}


def bound_by(step: StepRecord) -> Bound:
    reasons = {w.reason for w in step.waiting}
    if step.preempted or reasons & _KV:
        return Bound.KV_BLOCKS
    if reasons & _SEATS:
        return Bound.MAX_NUM_SEQS
    # a chunk short of what its request needs (the decode cohort's entries never are; prefix-cache hits are not
    # counted in num_computed_tokens_before, and were not needed)
    cut = any(e.num_scheduled_tokens < e.num_tokens_before - e.num_computed_tokens_before - e.num_cached_tokens
              for e in step.scheduled.rest)
    if reasons & _TOKENS or (cut and step.total_scheduled_tokens >= step.token_budget):
        return Bound.TOKEN_BUDGET
    if cut:
        return Bound.PREFILL_THRESHOLD
    if reasons & _CLOSED:
        return Bound.BATCH_CLOSED
    return Bound.NOTHING


def reasons_recorded(result: SimResult) -> bool:
    """Whether the step records carry why each request present got nothing (record="full")."""
    return result.record == "full" and bool(result.steps)


@dataclass(frozen=True, slots=True)
class RequestBreakdown:
    """Per request, workload order, seconds. queue: at the engine, from reaching it (its send plus any front end,
    `servesim.engine.frontend`) to first scheduled; prefill = first token - first scheduled (queueing excluded)."""

    ids: tuple[str, ...]
    queue: np.ndarray  # first scheduled - reaching the engine
    prefill: np.ndarray
    preempted: np.ndarray  # from each preemption to the start of the step that resumed it
    num_preemptions: np.ndarray
    num_prefill_chunks: np.ndarray  # prompt chunks, recomputation after a preemption included
    recomputed_tokens: np.ndarray


def request_breakdown(result: SimResult) -> RequestBreakdown:
    t = result.timelines
    recomputed = np.zeros(len(t), np.int64)
    if result.preemptions:
        index = {rid: i for i, rid in enumerate(t.ids)}
        for p in result.preemptions:
            recomputed[index[p.id]] += p.tokens_discarded
    from servesim.engine.frontend import delay

    first_sched = t.first_scheduled_time
    reached = t.arrival_time + delay(result.config, t.prompt_len)  # (the send, through any front end)
    return RequestBreakdown(
        tuple(t.ids), first_sched - reached, t.first_token_time() - first_sched, t.time_preempted.copy(),
        t.num_preemptions.copy(), t.num_prefill_chunks.copy(), recomputed,
    )


@dataclass(frozen=True, slots=True)
class StepArrays:
    """Per step. kv_used: fraction of usable KV blocks held after scheduling (NaN with unlimited KV)."""

    start: np.ndarray
    duration: np.ndarray
    batch_size: np.ndarray  # requests scheduled
    decodes: np.ndarray
    prefill_tokens: np.ndarray
    tokens: np.ndarray  # all scheduled tokens
    num_running: np.ndarray  # after the step
    num_waiting: np.ndarray  # after the step
    kv_used: np.ndarray
    bound: tuple[Bound, ...] | None  # None without the waiting reasons (record="full" keeps them)


def step_log(result: SimResult) -> StepLogArrays:
    """The compact step log (kept at every record level), or one built from the records of a hand-made result."""
    if result.step_log is not None:
        return result.step_log
    b = StepLog()
    for s in result.steps:
        b.add(s.start_time, s.duration, len(s.scheduled), s.total_scheduled_tokens, s.prefill_tokens,
              s.num_decodes, s.free_blocks_after_schedule, s.num_running_after, s.num_waiting_after,
              len(s.preempted))
    return b.freeze(result.config.usable_blocks)


def step_arrays(result: SimResult, bounds: bool = True) -> StepArrays:
    """Per-step arrays from the compact step log (kept at every record level). What bound each step needs the
    waiting reasons of record="full": without them (or with `bounds=False`) `bound` is None, never a guess."""
    log = step_log(result)
    usable = result.config.usable_blocks
    kv = np.full(len(log), np.nan) if usable is None else 1 - log.free_blocks_after_schedule / usable
    return StepArrays(
        log.start_time, log.duration, log.num_scheduled, log.num_decodes, log.prefill_tokens, log.num_tokens,
        log.num_running_after, log.num_waiting_after, kv,
        tuple(bound_by(s) for s in result.steps) if bounds and reasons_recorded(result) else None,
    )


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    queue: Summary  # ms
    prefill: Summary  # ms
    preempted: Summary  # ms, over requests preempted at least once
    preemptions: int
    preempted_requests: int
    max_preemptions: int  # of one request
    recomputed_tokens: int
    recompute_tax: float
    kv_used_mean: float | None  # time-weighted over steps; None with unlimited KV
    kv_used_max: float | None
    kv_cached_mean: float | None  # prefix caching: free blocks still holding cached KV, time-weighted; else None
    batch_size: Summary  # requests per step (unscaled)
    tokens_per_step: Summary  # (unscaled)
    slot_utilization: float
    steps: int
    bound: dict[Bound, int] | None  # steps per binding constraint, most first; None without record="full"


def server_metrics(result: SimResult, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> ServerMetrics:
    """Per-step statistics come from the step log's runs and columns without expanding them (a million requests:
    ~18 M steps)."""
    rb, log = request_breakdown(result), step_log(result)
    hit = rb.num_preemptions > 0
    kv_mean = kv_max = None
    usable = getattr(log, "usable_blocks", None) or result.config.usable_blocks  # (SGLang's pool: its pages)
    if usable is not None and log.duration.sum() > 0:
        used = log.free_blocks_after_schedule.astype(np.float64)
        used /= -usable
        used += 1  # 1 - free / usable
        kv_mean = float(np.average(used, weights=log.duration))
        kv_max = float(used.max())
        del used
    kv_cached = None
    cached = getattr(log, "cached_free_blocks_after_schedule", None)
    if cached is not None and usable and log.duration.sum() > 0:
        kv_cached = float(np.average(cached / usable, weights=log.duration))
    counts: dict[Bound, int] = {}
    if reasons_recorded(result):
        for b in map(bound_by, result.steps):
            counts[b] = counts.get(b, 0) + 1
    return ServerMetrics(
        queue=Summary.of(rb.queue[~np.isnan(rb.queue)], percentiles),
        prefill=Summary.of(rb.prefill[~np.isnan(rb.prefill)], percentiles),
        preempted=Summary.of(rb.preempted[hit], percentiles),
        preemptions=len(result.preemptions), preempted_requests=int(hit.sum()),
        max_preemptions=int(rb.num_preemptions.max(initial=0)), recomputed_tokens=result.recomputed_tokens,
        recompute_tax=result.recompute_tax, kv_used_mean=kv_mean, kv_used_max=kv_max,
        kv_cached_mean=kv_cached,
        batch_size=_run_summary(log, "num_scheduled", percentiles),
        tokens_per_step=_run_summary(log, "num_tokens", percentiles),
        slot_utilization=slot_utilization(result), steps=len(log),
        bound=dict(sorted(counts.items(), key=lambda kv: -kv[1])) if reasons_recorded(result) else None,
    )


def _run_summary(log: StepLogArrays, column: str, percentiles: Sequence[float]) -> Summary:
    """Statistics of a per-step count over every step, from its runs (the same as on the expanded column)."""
    values, lengths = log.runs(column)
    counts = np.bincount(values, weights=lengths).astype(np.int64)  # steps per value: however the runs fell
    present = np.flatnonzero(counts)
    return Summary.of(present, percentiles, scale=1, weights=counts[present])


def _line(label: str, value: object, fmt: str = "") -> str:
    return f"{label:<40} {value:<10{fmt}}".rstrip()


def _section(title: str, label: str, s: Summary) -> list[str]:
    out = [f"{title:-^50}", _line(f"Mean {label}:", s.mean, ".2f"), _line(f"Median {label}:", s.median, ".2f")]
    return out + [_line(f"P{p:g} {label}:", v, ".2f") for p, v in s.percentiles]


def format_server(m: ServerMetrics) -> str:
    """The server-side breakdown in the layout of vLLM's result block."""
    lines = [f"{' Server-side Breakdown (servesim) ':=^50}", _line("Steps:", m.steps),
             _line("Slot utilization (%):", m.slot_utilization * 100, ".2f"),
             _line("Preemptions:", m.preemptions), _line("Requests preempted:", m.preempted_requests),
             _line("Recomputed tokens:", m.recomputed_tokens),
             _line("Recompute tax (%):", m.recompute_tax * 100, ".2f")]
    if m.kv_used_mean is not None:
        lines += [_line("Mean KV blocks used (%):", m.kv_used_mean * 100, ".2f"),
                  _line("Max KV blocks used (%):", m.kv_used_max * 100, ".2f")]
    if m.kv_cached_mean is not None:
        lines.append(_line("Mean KV blocks cached, free (%):", m.kv_cached_mean * 100, ".2f"))
    if m.bound is None:
        lines.append(_line("Steps bound by:", "not recorded (needs --record full)"))
    else:
        lines += [_line(f"Steps bound by {b.value}:", n) for b, n in m.bound.items()]
    lines += _section("Queue Time", "queue time (ms)", m.queue)
    lines += _section("Prefill Time (first scheduled to 1st token)", "prefill time (ms)", m.prefill)
    if m.preempted_requests:
        lines += _section("Time Preempted (preempted requests)", "time preempted (ms)", m.preempted)
    lines += _section("Batch Size (requests per step)", "batch size", m.batch_size)
    lines += _section("Tokens per Step", "tokens per step", m.tokens_per_step)
    lines.append("=" * 50)
    return "\n".join(lines)


def format_prefix_cache(stats) -> str:
    """vLLM's prefix-cache counters (`SimResult.prefix_cache`) in the same layout."""
    return "\n".join([f"{' Prefix cache (servesim) ':=^50}",
                      _line("Prefix cache hit rate (%):", stats.hit_rate * 100, ".2f"),
                      _line("Tokens queried:", stats.query_tokens), _line("Tokens hit:", stats.hit_tokens),
                      _line("Blocks evicted:", stats.evicted_blocks), "=" * 50])
