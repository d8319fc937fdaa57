"""Measures read from step records and request timelines (never from engine internals)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servesim.engine.result import SimResult


@dataclass(frozen=True, slots=True)
class Gap:
    """The largest wait between two consecutive tokens of one request, and the step that ended it."""

    seconds: float
    request_id: str
    step: int | None


def worst_gap(result: SimResult) -> Gap | None:
    """The largest inter-token gap any request saw (vLLM's ITL maximum), with the step that caused it: the step
    ending at the later token, found in the step log, so it is there at every record level. Ties: the earliest
    request in workload order, then its earliest gap. From the token runs against the step clock: a request's
    gaps are step-end differences inside a run and one gap between runs, so no per-token array is built."""
    t = result.timelines
    if t.clock is None or not t.runs.size:
        return None
    ends = t.clock.ends
    runs, offsets = t.step_runs()
    start, count = runs[0::2], runs[1::2]
    owner = np.repeat(np.arange(len(t)), np.diff(offsets) // 2)  # the request of each run
    # candidate groups in token order: run r's inside gaps, then the gap to run r + 1 of the same request
    diff = np.append(np.diff(ends), -np.inf)  # the padding keeps every reduceat index in range
    long = count > 1
    inside = np.full(start.size, -np.inf)
    if long.any():
        bounds = np.stack([start[long], start[long] + count[long] - 1], axis=1).ravel()
        inside[long] = np.maximum.reduceat(diff, bounds)[0::2]
    between = np.full(start.size, -np.inf)
    same = owner[1:] == owner[:-1]
    between[:-1][same] = ends[start[1:][same]] - ends[(start + count - 1)[:-1][same]]
    groups = np.stack([inside, between], axis=1).ravel()
    top = float(groups.max())
    if top == -np.inf:
        return None
    g = int(np.argmax(groups >= top - 1e-12 * max(1.0, abs(top))))  # NOTE: equal up to rounding counts as a tie
    r = g // 2
    if g % 2:  # the gap from run r to run r + 1
        seconds, later = float(between[r]), int(start[r + 1])
    else:
        gaps = diff[start[r]:start[r] + count[r] - 1]
        j = int(np.argmax(gaps >= top - 1e-12 * max(1.0, abs(top))))
        seconds, later = float(gaps[j]), int(start[r] + j + 1)
    return Gap(seconds, t.ids[int(owner[r])], step_index_at(result, [float(ends[later])])[0])


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
    return [e.num_scheduled_tokens for s in result.steps for e in s.scheduled.prefill() if e.id == request_id]


def prompt_tokens_processed(result: SimResult) -> int:
    """Prefill tokens over the run, recomputation after preemption included (step log: every record level)."""
    if result.step_log is not None:
        return result.step_log.total("prefill_tokens")
    return sum(s.prefill_tokens for s in result.steps)


def longest_prompt(result: SimResult) -> str:
    """The request with the longest prompt among those served (one that failed on arrival is not served)."""
    t = result.timelines
    lengths = t.prompt_len
    if result.rejected:
        lengths = np.where(np.isin(np.asarray(t.ids, dtype=object), list(result.rejected)), -1, lengths)
    return t.ids[int(np.argmax(lengths))]  # the first of equals, as max() gives


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
