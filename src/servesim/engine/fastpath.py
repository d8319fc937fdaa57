"""The decode cohort: running requests that decode one token per step, advanced in aggregate.

Most steps of a serving engine are mostly decodes: every running request that has sampled its last known token
gets one more token, in running order, ahead of anything else. The engine keeps the longest prefix of the running
list made of such decoders as a cohort and does not touch them step by step:

- a member's fields (`num_computed_tokens`, `num_output_tokens`, `num_blocks`, `token_runs`) are brought up to date
  only when it leaves the cohort (it finishes, or a step needs `schedule()` to see everyone);
- what a step needs from the cohort comes from a few aggregates: its size, the sum of its contexts (all the cost
  models' decode terms need), the KV blocks it allocates in a step (members counted by where they stand in their
  last block), and the step that samples the next member's last token (a heap);
- `schedule(num_decoding_ahead=n)` is told the first n running requests are already scheduled for one token each
  and starts its scan after them, so admissions, chunks and reasons still come from the policy's own code;
- with nobody waiting and everyone in the cohort, nothing can change until an arrival, a member's last token or
  the KV pool running dry, so the whole stretch of steps is planned at once (`plan_stretch`), its durations from
  the cost model in closed form (`decode_stretch`).

Exactness is tested against the step-by-step engine (tests/test_fastpath.py, Hypothesis over every policy and
both preemption modes): the same token times (to float tolerance) and, with records kept in full, the same records.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from heapq import heappop, heappush
from itertools import accumulate, cycle, islice
from operator import sub

from servesim.cost import CostModel, StepShape
from servesim.engine.request import RequestState


class DecodeCohort:
    """The first `n` requests of the running list, each decoding one token per step since `decoding_since`."""

    __slots__ = ("block_size", "grows", "n", "base", "phase", "heap", "step_seconds")

    def __init__(self, block_size: int, grows: bool = True) -> None:
        self.block_size = block_size
        self.grows = grows  # members allocate KV as they grow (False: the policy reserved each one's lifetime)
        self.n = 0
        self.base = 0  # sum of (num_computed_tokens - decoding_since) over members: contexts at step S sum to
        #                base + n * S
        self.phase = [0] * block_size  # members by (num_computed_tokens - decoding_since) mod block_size
        self.heap: list[tuple[int, int, int, RequestState]] = []  # (step of the last token, index, since, state)
        self.step_seconds = 0.0  # the last stretch's last step duration: a guess at how many steps fit before
        #                          the next arrival

    def can_join(self, s: RequestState) -> bool:
        """A running request whose next step is a one-token decode, holding exactly the blocks of its tokens."""
        return (s.sampled_since_admission and s.num_tokens_needed == 1
                and (not self.grows or s.num_blocks == -(-s.num_computed_tokens // self.block_size)))

    def join(self, s: RequestState, step: int) -> None:
        """`s` decodes from `step` on; its fields stay as they are until it leaves."""
        s.decoding_since = step
        c = s.num_computed_tokens - step
        self.base += c
        self.phase[c % self.block_size] += 1
        self.n += 1
        heappush(self.heap, (step + s.request.output_len - s.num_output_tokens - 1, s.index, step, s))

    def leave(self, s: RequestState, step: int) -> None:
        """Bring `s` up to date with every step before `step` and take it out of the cohort."""
        since = s.decoding_since
        c = s.num_computed_tokens - since
        self.base -= c
        self.phase[c % self.block_size] -= 1
        self.n -= 1
        d = step - since
        if d:
            s.num_computed_tokens += d
            s.num_output_tokens += d
            s.sampled(since, d)
            if self.grows:
                s.num_blocks = -(-s.num_computed_tokens // self.block_size)
        s.decoding_since = -1

    def leave_all(self, running: list[RequestState], step: int) -> None:
        for s in running[:self.n]:
            self.leave(s, step)
        self.heap.clear()

    def absorb(self, running: list[RequestState], step: int) -> None:
        """Members join in running order while the request after the cohort is a plain decoder."""
        while self.n < len(running) and self.can_join(running[self.n]):
            self.join(running[self.n], step)

    def contexts(self, running: list[RequestState], step: int) -> list[int]:
        """Each member's num_computed_tokens before `step` (for records and cost models without sums)."""
        return [s.num_computed_tokens + step - s.decoding_since for s in running[:self.n]]

    def context_sum(self, step: int) -> int:
        return self.base + self.n * step

    def growth(self, step: int) -> int:
        """New blocks the members allocate in `step`: those whose context fills its last block exactly."""
        return self.phase[-step % self.block_size] if self.grows else 0

    def pool_after(self, step: int, free_blocks: int, k: int) -> list[int]:
        """Free blocks after each of the k steps from `step` (they may go negative: the caller stops before)."""
        bs = self.block_size
        back = self.phase[::-1]  # step + j takes members of phase (-step - j) mod bs: the phases backwards
        s0 = bs - 1 - (-step % bs)
        return list(islice(accumulate(cycle(back[s0:] + back[:s0]), sub, initial=free_blocks), 1, k + 1))

    def next_last_token(self) -> int:
        """The step that samples some member's last token (the cohort is not empty)."""
        heap = self.heap
        while heap[0][3].decoding_since != heap[0][2]:  # left since it was pushed
            heappop(heap)
        return heap[0][0]

    def finishing(self, step: int) -> list[RequestState]:
        """Members that sample their last token in `step`; they leave the cohort up to date."""
        heap, done = self.heap, []
        while heap and heap[0][0] <= step:
            _, _, since, s = heappop(heap)
            if s.decoding_since == since:
                self.leave(s, step + 1)
                done.append(s)
        return done


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
                 next_arrival: float | None, contexts: list[int] | None = None) -> Stretch | None:
    """The steps from `step` in which the cohort alone runs, one token each, until a member's last token, the
    step before the KV pool would run dry, or the step that starts at or after the next arrival (which must
    schedule with the new request in the queue). None when the first step's blocks do not fit."""
    n = cohort.n
    k = cohort.next_last_token() - step + 1
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
