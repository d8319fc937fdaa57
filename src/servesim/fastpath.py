"""Closed-form skipping of steady decode stretches.

When a step schedules every running request for exactly one decode token, admits nobody, preempts nobody and
moves no KV, the steps after it have the same composition until an event changes the schedule: an arrival, a
request finishing, or the KV pool running dry. Each such step adds one token to every request's context, so the
whole stretch follows in closed form: its length from the events, its durations from the cost model
(`decode_stretch`), every request's tokens at the stretch's step ends, the KV pool from where each request
crosses a block boundary. With nobody waiting and every running request decoding, the stretch's first step is
known before `schedule()` runs (`all_decoding`), so the engine does not call it; otherwise `schedule()` decides
the first step and this module only repeats its decision (`is_steady`).

Exactness is tested against the step-by-step engine (tests/test_fastpath.py): the same token times (to float
tolerance) and, with records kept in full, the same step records. Stretches are short (tens of steps, tens of
requests), so plain Python beats numpy's per-call overhead here.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from servesim.cost import CostModel, StepShape
from servesim.kv import KVCache
from servesim.policies import Scheduler, SchedulerOutput
from servesim.request import RequestState


@dataclass(slots=True)
class Stretch:
    running: list[RequestState]  # in schedule order
    computed: list[int]  # num_computed_tokens of each before the stretch's first step
    blocks: list[int]  # blocks each holds before the stretch's allocations
    growth: list[int] | None  # new blocks allocated in each step (None: unlimited KV)
    durations: list[float]  # seconds, one per step
    starts: list[float]  # seconds

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


def all_decoding(sched: Scheduler) -> bool:
    """With an empty queue and every running request decoding, every policy's next step is one token for each
    running request, in running order (nothing to admit, nothing partial), if its KV blocks fit."""
    if len(sched.waiting) or sched.swapped or not sched.running:
        return False
    if len(sched.running) > sched.config.max_num_batched_tokens:
        return False
    for s in sched.running:
        if not s.sampled_since_admission or s.num_tokens_needed != 1:
            return False
    return True


def decode_durations(cost: CostModel, computed: list[int], k: int) -> list[float]:
    """Durations of k decode steps in which every request's context grows by one token per step."""
    n = len(computed)
    fast = getattr(cost, "decode_stretch", None)
    if fast is not None:
        return list(fast(n, sum(computed), k))
    ones, dec = (1,) * n, (True,) * n
    return [cost.step_time(StepShape(ones, tuple(c + j for c in computed), dec, n)) for j in range(k)]


def block_growth(computed: list[int], blocks: list[int], block_size: int, k: int) -> list[int]:
    """New blocks allocated in each of the k steps (step j holds computed + j + 1 tokens per request)."""
    grow = [0] * k
    for c, b in zip(computed, blocks):
        # the first step whose tokens (c + j + 1) no longer fit in b blocks, then every block_size steps
        for j in range(max(0, b * block_size - c), k, block_size):
            grow[j] += 1
    return grow


def plan_stretch(running: list[RequestState], kv: KVCache, cost: CostModel, now: float,
                 next_arrival: float | None) -> Stretch | None:
    """How many one-token decode steps of `running` (in order) follow from now, and their durations; None when
    the first step's blocks do not fit (then `schedule()` decides who is preempted)."""
    computed = [s.num_computed_tokens for s in running]
    blocks = [s.num_blocks for s in running]
    # the step that samples a request's last token finishes it and ends the stretch
    k = min(s.request.output_len - s.num_output_tokens for s in running)
    free = kv.free_blocks
    grow = None
    if free is not None:
        grow = block_growth(computed, blocks, kv.block_size, k)
        total = 0
        for j, g in enumerate(grow):
            total += g
            if total > free:  # step j would preempt: the stretch ends before it
                if j == 0:
                    return None
                k = j
                break
    durations = decode_durations(cost, computed, k)
    starts, t = [], now
    for d in durations:  # left to right, as the step-by-step clock adds them: the same floats
        starts.append(t)
        t += d
    if next_arrival is not None:
        # a step that starts at or after an arrival must schedule with the new request in the queue
        k = max(1, bisect_left(starts, next_arrival))
        durations, starts = durations[:k], starts[:k]
    return Stretch(running, computed, blocks, None if grow is None else grow[:k], durations, starts)
