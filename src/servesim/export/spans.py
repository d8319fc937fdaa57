"""Each request's life as spans of simulated time: queued, every prompt chunk, runs of decodes, preempted, swapped.

A reader of the step records, the timelines and the preemption ledger, shared by the Perfetto export and the HTML
report. Decode runs come from the timelines' token runs (a decoding request samples in every step it runs), so the
decode cohort's entries are never made; prompt chunks and resumptions come from the part of each step that
`schedule()` chose (`Scheduled.rest`), a few entries a step.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from servesim.engine.result import SimResult
from servesim.errors import ServesimError

KINDS = ("queued", "prefill", "decode", "preempted", "swapped")


@dataclass(frozen=True, slots=True)
class Span:
    """One stretch of one request's life. Times in seconds; steps inclusive (None for a wait no step started)."""

    request_id: str
    kind: str  # one of KINDS
    start: float
    end: float
    first_step: int | None
    last_step: int | None
    tokens: int = 0  # prefill: the chunk's tokens; decode: tokens sampled in the run
    detail: str = ""  # why it waited, which chunk, how it was preempted

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Every step's start and end (seconds), from the step log (kept at every record level)."""

    start: np.ndarray
    end: np.ndarray


def step_times(result: SimResult) -> StepTimes:
    from servesim.analysis.breakdown import step_log

    log = step_log(result)
    return StepTimes(log.start_time, log.end_time)


def records_complete(result: SimResult) -> bool:
    """Whether the run kept a record of every step (chunks and waiting reasons are read from them)."""
    n = len(result.step_log) if result.step_log is not None else len(result.steps)
    return len(result.steps) == n  # a run with no step (every request rejected) has nothing more to record


def _need_records(result: SimResult) -> None:
    if not records_complete(result):
        raise ServesimError("request spans read every step record, and this result kept "
                            f"{len(result.steps)} (record={result.record!r}); simulate with record='steps' or 'full'")


def wait_reasons(result: SimResult) -> dict[str, Counter]:
    """Per request, how many steps it waited for each reason (record="full"; empty otherwise)."""
    out: dict[str, Counter] = defaultdict(Counter)
    for s in result.steps:
        for w in s.waiting:
            out[w.id][w.reason.value] += 1
    return out


def reasons_text(counts: Counter | None) -> str:
    """"token_budget in 3 steps, kv_blocks in 1" (most first)."""
    if not counts:
        return ""
    return ", ".join(f"{r} in {n} step{'s' if n != 1 else ''}" for r, n in counts.most_common())


def request_spans(result: SimResult, ids: set[str] | None = None) -> list[Span]:
    """Every request's spans (or those of `ids`), in workload order, each request's in time order."""
    _need_records(result)
    times = step_times(result)
    chosen: dict[str, list] = defaultdict(list)  # id -> [(step, entry)] of what schedule() chose for it
    waits: dict[str, list] = defaultdict(list)  # id -> [(step, reason)] (record="full")
    for s in result.steps:
        for e in s.scheduled.rest:
            if ids is None or e.id in ids:
                chosen[e.id].append((s.step, e))
        for w in s.waiting:
            if ids is None or w.id in ids:
                waits[w.id].append((s.step, w.reason.value))
    ledger: dict[str, list] = defaultdict(list)
    for p in result.preemptions:
        ledger[p.id].append(p)
    t = result.timelines
    step_runs, offsets = t.step_runs()
    out: list[Span] = []
    for i, rid in enumerate(t.ids):
        if ids is not None and rid not in ids:
            continue
        runs = step_runs[offsets[i]:offsets[i + 1]].tolist()
        spans = _queued(rid, float(t.arrival_time[i]), float(t.first_scheduled_time[i]), waits[rid], times)
        spans += _prefills(rid, chosen[rid], times)
        spans += _decodes(rid, runs, {st for st, e in chosen[rid] if e.kind.value == "prefill"}, times)
        spans += _preemptions(rid, ledger[rid], chosen[rid], waits[rid], times)
        out += sorted(spans, key=lambda sp: (sp.start, KINDS.index(sp.kind)))
    return out


def _queued(rid: str, arrival: float, first: float, waits: list, times: StepTimes) -> list[Span]:
    if first != first or first <= arrival:  # never scheduled (NaN), or at once
        return []
    before = [(st, r) for st, r in waits if times.start[st] < first]
    if before:
        detail = "waited: " + reasons_text(Counter(r for _, r in before))
        return [Span(rid, "queued", arrival, first, before[0][0], before[-1][0], 0, detail)]
    # arrived while a step was running: it could join only the next one
    during = int(np.searchsorted(times.end, arrival, side="right"))
    return [Span(rid, "queued", arrival, first, None, None, 0, f"arrived during step {during}, which was running")]


def _prefills(rid: str, chosen: list, times: StepTimes) -> list[Span]:
    chunks = [(st, e) for st, e in chosen if e.kind.value == "prefill"]
    out = []
    for k, (st, e) in enumerate(chunks):
        done = e.num_computed_tokens_before + e.num_scheduled_tokens
        cached = f", {e.num_cached_tokens} from the prefix cache" if e.num_cached_tokens else ""
        detail = (f"chunk {k + 1}: tokens {e.num_computed_tokens_before}-{done} of {e.num_tokens_before}"
                  f"{cached}{' (resumed)' if e.resumed else ''}")
        out.append(Span(rid, "prefill", float(times.start[st]), float(times.end[st]), st, st,
                        e.num_scheduled_tokens, detail))
    return out


def _decodes(rid: str, runs: list[int], prefill_steps: set[int], times: StepTimes) -> list[Span]:
    out = []
    for first, count in zip(runs[0::2], runs[1::2]):
        if first in prefill_steps:  # the last prompt chunk sampled the run's first token
            first, count = first + 1, count - 1
        if count > 0:
            last = first + count - 1
            out.append(Span(rid, "decode", float(times.start[first]), float(times.end[last]), first, last, count,
                            f"{count} decode step{'s' if count != 1 else ''}"))
    return out


def _preemptions(rid: str, ledger: list, chosen: list, waits: list, times: StepTimes) -> list[Span]:
    out = []
    end_of_run = float(times.end[-1]) if times.end.size else 0.0
    for p in ledger:
        back = next((st for st, _ in chosen if st > p.step), None)
        end = float(times.start[back]) if back is not None else end_of_run
        kind = "swapped" if p.mode == "swap" else "preempted"
        held = Counter(r for st, r in waits if p.step < st and (back is None or st < back))
        what = (f"{p.bytes_moved:,} bytes copied to host" if kind == "swapped"
                else f"{p.tokens_discarded} computed tokens discarded")
        detail = f"preempted in step {p.step} ({p.mode}): {what}, {p.blocks_freed} blocks freed"
        if held:
            detail += "; then waited: " + reasons_text(held)
        last = back - 1 if back is not None else None
        out.append(Span(rid, kind, float(times.start[p.step]), end, p.step, last, 0, detail))
    return out
