"""Stretches: the steps in which the decode cohort alone runs, planned at once.

With nobody waiting (or the queue blocked) and only the cohort running, nothing changes until an arrival, a
member's last token or the KV pool running dry, so the stretch of steps up to it is planned in one go: durations
from the cost model's `decode_stretch` (the same arithmetic as `step_time`), starts as the same left-to-right
sums the step-by-step clock makes.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate

from servesim.cost import CostModel, StepShape
from servesim.engine.cohort import DecodeCohort


@dataclass(slots=True)
class Stretch:
    k: int  # steps
    durations: list[float]  # seconds, one per step
    times: list[float]  # k + 1 clock values: each step's start, then the last step's end
    free_after: list[int] | None  # the KV pool after each step's allocation (None: unlimited KV)

    @property
    def end(self) -> float:
        return self.times[-1]


def decode_durations(cost: CostModel, n: int, context_sum: int, k: int,
                     contexts: list[int] | None = None) -> list[float]:
    """Durations of k steps of n one-token decodes whose contexts (summing to `context_sum`) grow by one a step;
    cost models without `decode_stretch` get each step's shape from the members' `contexts`."""
    fast = getattr(cost, "decode_stretch", None)
    if fast is not None:
        return list(fast(n, context_sum, k))
    ones, dec = (1,) * n, (True,) * n
    return [cost.step_time(StepShape(ones, tuple(c + j for c in contexts), dec, n)) for j in range(k)]


def step_duration(cost: CostModel, n: int, context_sum: int, rest: StepShape,
                  contexts: list[int] | None = None) -> float:
    """A step of n cohort decodes (scheduled first) followed by `rest`."""
    if not n:
        return cost.step_time(rest)
    fast = getattr(cost, "step_time_with_decodes", None)
    if fast is not None:
        return fast(n, context_sum, rest)
    return cost.step_time(StepShape((1,) * n + rest.num_new_tokens, tuple(contexts) + rest.num_context_tokens,
                                    (True,) * n + rest.is_decode, n + rest.num_sampled))


def plan_stretch(cohort: DecodeCohort, free_blocks: int | None, cost: CostModel, step: int, now: float,
                 next_arrival: float | None, contexts: list[int] | None = None,
                 limit: int | None = None) -> Stretch | None:
    """The steps from `step` in which the cohort alone runs, one token each, until a member's last token, the
    step before the KV pool would run dry, or the step that starts at or after the next arrival (which must
    schedule with the new request in the queue); at most `limit`. None when the first step's blocks do not
    fit."""
    n = cohort.n
    k = cohort.next_last_token() - step + 1
    if limit is not None:
        k = min(k, limit)
    grows = free_blocks is not None and cohort.grows
    frees = None
    if grows and free_blocks < n * -(-k // cohort.block_size):  # the pool could run dry (n blocks per bs steps)
        frees = cohort.pool_after(step, free_blocks, k)
        if frees[-1] < 0:  # some step would preempt: the stretch ends before it
            k = next(j for j, f in enumerate(frees) if f < 0)
            if k == 0:
                return None
    ctx = cohort.context_sum(step)
    size = k
    if next_arrival is not None and cohort.step_seconds > 0:  # about the steps until the next arrival
        size = min(k, int((next_arrival - now) / cohort.step_seconds) + 2)
    durations: list[float] = []
    times: list[float] = [now]
    while True:
        j0 = len(durations)
        block = decode_durations(cost, n, ctx + n * j0, size, None if contexts is None else [c + j0 for c in contexts])
        durations += block
        times += accumulate(block, initial=times.pop())  # left to right, as the step-by-step clock adds them
        if next_arrival is not None and times[-1] >= next_arrival:
            # a step that starts at or after the arrival must schedule with the new request in the queue
            k = max(1, bisect_left(times, next_arrival, 0, len(durations)))
            break
        if len(durations) == k:
            break
        size = k - len(durations)  # the guess fell short: durations up to about the next arrival again
        if next_arrival is not None and durations[-1] > 0:
            size = min(size, int((next_arrival - times[-1]) / durations[-1]) + 2)
    if k < len(durations):
        del times[k + 1:], durations[k:]
    cohort.step_seconds = durations[-1]
    if grows:
        frees = frees[:k] if frees is not None else cohort.pool_after(step, free_blocks, k)
    else:
        frees = None if free_blocks is None else [free_blocks] * k
    return Stretch(k, durations, times, frees)
