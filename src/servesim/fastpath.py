"""Closed-form skipping of steady decode stretches.

When a step schedules every running request for exactly one decode token, admits nobody, preempts nobody and
moves no KV, the steps after it have the same composition until an event changes the schedule: an arrival, a
request finishing, or the KV pool running dry. Each such step adds one token to every request's context, so the
whole stretch follows in closed form — its length from the events, its durations from the cost model
(`decode_stretch`), every request's tokens at the stretch's step ends. The policies' `schedule()` is called once
per stretch; it decides, this module only repeats its decision.

Exactness is tested against the step-by-step engine (tests/test_fastpath.py): the same token times (to float
tolerance) and, with records kept in full, the same step records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servesim.cost import CostModel, StepShape
from servesim.policies import Scheduler, SchedulerOutput
from servesim.request import RequestState


@dataclass(slots=True)
class Stretch:
    running: list[RequestState]  # in schedule order
    computed: np.ndarray  # num_computed_tokens of each before the stretch's first step
    blocks: np.ndarray  # blocks held after the first step's allocation
    durations: np.ndarray  # seconds, one per step
    starts: np.ndarray  # seconds

    @property
    def k(self) -> int:
        return len(self.durations)


def is_steady(out: SchedulerOutput, sched: Scheduler, need_empty_queue: bool) -> bool:
    """The step just scheduled is all one-token decodes of every running request, with no other event."""
    if out.preempted or out.resumed or out.swap_in_blocks or out.swap_out_blocks:
        return False
    if len(out.scheduled) != len(sched.running) or not out.scheduled:
        return False
    if need_empty_queue and (len(sched.waiting) or sched.swapped):
        return False  # full records carry per-step reasons for waiting requests: go step by step
    for s, n in out.scheduled.items():
        if n != 1 or not s.sampled_since_admission:
            return False
    return True


def decode_durations(cost: CostModel, computed: np.ndarray, k: int) -> np.ndarray:
    """Durations of k decode steps in which every request's context grows by one token per step."""
    n = len(computed)
    fast = getattr(cost, "decode_stretch", None)
    if fast is not None:
        return np.asarray(fast(n, int(computed.sum()), k), dtype=float)
    ones, dec = (1,) * n, (True,) * n
    return np.array([cost.step_time(StepShape(ones, tuple(int(c) + j for c in computed), dec, n))
                     for j in range(k)])


def plan_stretch(sched: Scheduler, out: SchedulerOutput, cost: CostModel, now: float,
                 next_arrival: float | None) -> Stretch:
    """How many steps, from the one just scheduled, repeat its composition; and their durations."""
    running = list(out.scheduled)
    n = len(running)
    computed = np.fromiter((s.num_computed_tokens for s in running), np.int64, n)
    blocks = np.fromiter((s.num_blocks for s in running), np.int64, n)
    # the step that samples a request's last token finishes it and ends the stretch
    k = min(s.request.output_len - s.num_output_tokens for s in running)
    free = sched.kv.free_blocks
    if free is not None and k > 1:
        k = 1 + _steps_that_fit(computed, blocks, sched.kv.block_size, free, k - 1)
    durations = decode_durations(cost, computed, k)
    # left to right, as the step-by-step clock adds them, so both give the same floats
    starts = np.cumsum(np.concatenate(([now], durations[:-1])))
    if next_arrival is not None:
        # a step that starts at or after an arrival must schedule with the new request in the queue
        k = max(1, int(np.searchsorted(starts, next_arrival, side="left")))
        durations, starts = durations[:k], starts[:k]
    return Stretch(running, computed, blocks, durations, starts)


def extra_blocks(computed: np.ndarray, blocks: np.ndarray, block_size: int, j: int) -> int:
    """Blocks the running requests need beyond what they hold, for step j of the stretch (j = 0 is scheduled)."""
    need = -(-(computed + j + 1) // block_size) - blocks
    return int(need[need > 0].sum())


def _steps_that_fit(computed: np.ndarray, blocks: np.ndarray, block_size: int, free: int, upper: int) -> int:
    """The most further steps m <= upper whose cumulative block growth fits in `free` (growth is monotonic)."""
    if extra_blocks(computed, blocks, block_size, upper) <= free:
        return upper
    lo, hi = 0, upper  # extra(lo) fits, extra(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if extra_blocks(computed, blocks, block_size, mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo
