"""Measures read from step records and request timelines (never from engine internals)."""

from __future__ import annotations

from dataclasses import dataclass

from servesim.records import Kind
from servesim.result import SimResult


@dataclass(frozen=True, slots=True)
class Gap:
    """The largest wait between two consecutive tokens of one request, and the step that ended it."""

    seconds: float
    request_id: str
    step: int | None


def worst_gap(result: SimResult) -> Gap | None:
    """The largest inter-token gap any request saw (vLLM's ITL maximum), with the step that caused it."""
    best: tuple[float, str, float] | None = None
    for r in result.requests:
        for a, b in zip(r.token_times, r.token_times[1:]):
            if best is None or b - a > best[0]:
                best = (b - a, r.id, b)
    if best is None:
        return None
    step = next((s.step for s in result.steps if abs(s.end_time - best[2]) <= 1e-12 * max(1.0, best[2])), None)
    return Gap(best[0], best[1], step)


def slot_utilization(result: SimResult) -> float:
    """The lesson's measure over the whole run: scheduled request-steps / (max_num_seqs x steps)."""
    log = result.step_log
    if log is not None:
        steps, active = len(log), int(log.num_scheduled.sum())
    else:
        steps, active = len(result.steps), sum(len(s.scheduled) for s in result.steps)
    return active / (result.config.max_num_seqs * steps) if steps else 0.0


def prefill_chunks(result: SimResult, request_id: str) -> list[int]:
    """Sizes of the prompt chunks a request was prefilled in (recomputation after a preemption included)."""
    return [e.num_scheduled_tokens for s in result.steps for e in s.scheduled
            if e.id == request_id and e.kind is Kind.PREFILL]


def prompt_tokens_processed(result: SimResult) -> int:
    return sum(s.prefill_tokens for s in result.steps)


def longest_prompt(result: SimResult) -> str:
    return max(result.requests, key=lambda r: r.prompt_len).id


@dataclass(frozen=True, slots=True)
class TokenGap:
    """A wait between tokens `token - 1` and `token` (1-based) of one request, and the steps it spanned."""

    seconds: float
    request_id: str
    token: int
    first_step: int  # the first step after the earlier token
    last_step: int  # the step that produced the later token


def step_index_at(result: SimResult, end_times: list[float]) -> list[int]:
    """The steps that ended at each of `end_times` (token and finish times are step end times)."""
    import numpy as np

    ends = np.fromiter((s.end_time for s in result.steps), float, len(result.steps))
    return [int(i) for i in np.searchsorted(ends, np.asarray(end_times, float) - 1e-12 * max(1.0, float(ends[-1])))]


def token_gaps(result: SimResult, request_id: str) -> list[TokenGap]:
    """Every gap between consecutive tokens of one request, largest first (ties: earliest first)."""
    times = result.request(request_id).token_times
    if len(times) < 2:
        return []
    steps = step_index_at(result, list(times))
    gaps = [TokenGap(b - a, request_id, k + 1, steps[k - 1] + 1, steps[k])
            for k, (a, b) in enumerate(zip(times, times[1:]), start=1)]
    return sorted(gaps, key=lambda g: (-round(g.seconds, 12), g.token))
