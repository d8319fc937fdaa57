"""Measures read from step records and request timelines (never from engine internals)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from servesim.records import Kind
from servesim.result import SimResult


@dataclass(frozen=True, slots=True)
class Gap:
    """The largest wait between two consecutive tokens of one request, and the step that ended it."""

    seconds: float
    request_id: str
    step: int | None


def worst_gap(result: SimResult) -> Gap | None:
    """The largest inter-token gap any request saw (vLLM's ITL maximum), with the step that caused it: the step
    ending at the later token, found in the step log, so it is there at every record level. Ties: the earliest
    request in workload order, then its earliest gap. numpy over the flat token times (no per-gap objects)."""
    reqs = result.requests
    times = [r.token_times for r in reqs]
    lengths = np.fromiter(map(len, times), np.int64, len(times))
    flat = np.fromiter(itertools.chain.from_iterable(times), float, int(lengths.sum()))
    if flat.size < 2:
        return None
    gaps = np.diff(flat)
    ends = np.cumsum(lengths)
    cross = ends[:-1] - 1  # gap j joins token j to j + 1: from a request's last token to the next one's first
    gaps[cross[(cross >= 0) & (cross < gaps.size)]] = -np.inf
    top = float(gaps.max())
    if top == -np.inf:
        return None
    j = int(np.argmax(gaps >= top - 1e-12 * max(1.0, abs(top))))  # NOTE: equal up to rounding counts as a tie
    owner = int(np.searchsorted(ends, j, side="right"))
    return Gap(float(gaps[j]), reqs[owner].id, step_index_at(result, [float(flat[j + 1])])[0])


def slot_utilization(result: SimResult) -> float:
    """The lesson's measure over the whole run: scheduled request-steps / (max_num_seqs x steps)."""
    log = result.step_log
    if log is not None:
        steps, active = len(log), log.total("num_scheduled")
    else:
        steps, active = len(result.steps), sum(len(s.scheduled) for s in result.steps)
    return active / (result.config.max_num_seqs * steps) if steps else 0.0


def prefill_chunks(result: SimResult, request_id: str) -> list[int]:
    """Sizes of the prompt chunks a request was prefilled in (recomputation after a preemption included)."""
    return [e.num_scheduled_tokens for s in result.steps for e in s.scheduled
            if e.id == request_id and e.kind is Kind.PREFILL]


def prompt_tokens_processed(result: SimResult) -> int:
    """Prefill tokens over the run, recomputation after preemption included (step log: every record level)."""
    if result.step_log is not None:
        return result.step_log.total("prefill_tokens")
    return sum(s.prefill_tokens for s in result.steps)


def longest_prompt(result: SimResult) -> str:
    t = result.timelines
    return t.ids[int(np.argmax(t.prompt_len))]  # the first of equals, as max() gives


@dataclass(frozen=True, slots=True)
class TokenGap:
    """A wait between tokens `token - 1` and `token` (1-based) of one request, and the steps it spanned."""

    seconds: float
    request_id: str
    token: int
    first_step: int  # the first step after the earlier token
    last_step: int  # the step that produced the later token


def step_ends(result: SimResult) -> np.ndarray:
    """Each step's end time, from the step log when there is one (every record level), else the records."""
    if result.step_log is not None:
        return result.step_log.end_time
    return np.fromiter((s.end_time for s in result.steps), float, len(result.steps))


def step_index_at(result: SimResult, end_times: list[float]) -> list[int | None]:
    """The steps that ended at each of `end_times` (token and finish times are step end times); None where no step
    ended there (a result without steps)."""
    ends = step_ends(result)
    if not ends.size:
        return [None] * len(end_times)
    idx = np.searchsorted(ends, np.asarray(end_times, float) - 1e-12 * max(1.0, float(ends[-1])))
    return [int(i) if i < ends.size else None for i in idx]


def token_gaps(result: SimResult, request_id: str) -> list[TokenGap]:
    """Every gap between consecutive tokens of one request, largest first (ties: earliest first)."""
    times = result.request(request_id).token_times
    if len(times) < 2:
        return []
    steps = step_index_at(result, list(times))
    gaps = [TokenGap(b - a, request_id, k + 1, steps[k - 1] + 1, steps[k])
            for k, (a, b) in enumerate(zip(times, times[1:]), start=1)]
    return sorted(gaps, key=lambda g: (-round(g.seconds, 12), g.token))
