"""The decode cohort: the running list's prefix of one-token decoders, kept as aggregates.

A member's fields (`num_computed_tokens`, `num_output_tokens`, `num_blocks`, `token_runs`) are brought up to date
only when it leaves the cohort (it finishes, or a step needs `schedule()` to see everyone). What a step needs
from the cohort comes from a few aggregates: its size, the sum of its contexts (all the cost models' decode terms
need), the KV blocks it allocates in a step (members counted by where they stand in their last block), and the
step that samples the next member's last token (a heap).

Under prefix caching the pool's block identities matter, not only its count: a member's new block is a particular
block off the free queue (evicting what it cached) and a block it fills becomes hittable. The cohort then also
keeps its members by phase (`by_phase`), in running order, so that the fast path can make each step's
allocations and registrations in the order a step-by-step run makes them.

The cohort runs on its own decode clock: `clock = step - paused`, where `paused` counts the engine steps in which
it did not decode (a policy that runs prefill first, SGLang's, runs a prompt-only step while the batch waits:
`pause`). Every `step` argument below is a clock value; members' `decoding_since` too. The decode at clock c runs
at engine step c + the pauses at clock <= c; the cohort keeps the distinct clock values of its pauses
(`pause_clocks`) and the pauses up to each (`pauses_upto`) to find the engine step of a member's first decode.
Nobody decodes in a pause, so a member's tokens are one run however many pauses it sat through (runs count the
steps someone decoded in: `servesim.engine.token_runs`).
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import heappop, heappush
from itertools import accumulate, cycle, islice
from operator import sub

from servesim.engine.request import RequestState
from servesim.engine.token_runs import LiveSteps


class DecodeCohort:
    """The first `n` requests of the running list, each decoding one token per step since `decoding_since`."""

    __slots__ = ("block_size", "per_request", "grows", "n", "base", "phase", "heap", "step_seconds", "by_phase",
                 "paused", "pause_clocks", "pauses_upto", "folded", "live")

    def __init__(self, block_size: int, live: LiveSteps, grows: bool = True, track: bool = False,
                 per_request: int = 0) -> None:
        self.block_size = block_size
        self.per_request = per_request  # blocks each member holds whatever its length (`servesim.engine.kv`)
        self.grows = grows  # members allocate KV as they grow (False: the policy reserved each one's lifetime)
        self.n = 0
        self.base = 0  # sum of (num_computed_tokens - decoding_since) over members: contexts at step S sum to
        #                base + n * S
        self.phase = [0] * block_size  # members by (num_computed_tokens - decoding_since) mod block_size
        self.heap: list[tuple[int, int, int, RequestState]] = []  # (step of the last token, index, since, state)
        self.step_seconds = 0.0  # the last stretch's last step duration: a guess at how many steps fit before
        #                          the next arrival
        # prefix caching: the members of each phase, in running order (members join in running order and the
        # cohort is the running list's prefix, so insertion order is running order)
        self.by_phase: list[dict[int, RequestState]] | None = [{} for _ in range(block_size)] if track else None
        self.paused = 0  # engine steps in which the cohort did not decode: its clock is step - paused
        # the pauses since the cohort was last empty (see the module's docstring)
        self.pause_clocks: list[int] = []  # distinct clock values, increasing
        self.pauses_upto: list[int] = []  # pauses at clock <= each (the folded ones included)
        self.folded = 0  # pauses dropped from the lists when the cohort emptied (before every member's clock)
        self.live = live  # the engine's live steps: members' token runs

    def pause(self, step: int) -> None:
        """Engine step `step` runs without the cohort's decodes (its members keep their place)."""
        c = step - self.paused
        self.paused += 1
        clocks = self.pause_clocks
        if clocks and clocks[-1] == c:  # another pause before the same decode
            self.pauses_upto[-1] += 1
            return
        clocks.append(c)
        self.pauses_upto.append(self.paused)

    def can_join(self, s: RequestState) -> bool:
        """A running request whose next step is a one-token decode, holding exactly the blocks of its tokens."""
        return (s.sampled_since_admission and s.num_tokens_needed == 1
                and (not self.grows or s.num_blocks == -(-s.num_computed_tokens // self.block_size) + self.per_request))

    def join(self, s: RequestState, step: int) -> None:
        """`s` decodes from `step` on; its fields stay as they are until it leaves."""
        s.decoding_since = step
        c = s.num_computed_tokens - step
        self.base += c
        self.phase[c % self.block_size] += 1
        if self.by_phase is not None:
            self.by_phase[c % self.block_size][s.index] = s
        self.n += 1
        heappush(self.heap, (step + s.request.output_len - s.num_output_tokens - 1, s.index, step, s))

    def leave(self, s: RequestState, step: int) -> None:
        """Bring `s` up to date with every step before `step` and take it out of the cohort."""
        since = s.decoding_since
        c = s.num_computed_tokens - since
        self.base -= c
        self.phase[c % self.block_size] -= 1
        if self.by_phase is not None:
            del self.by_phase[c % self.block_size][s.index]
        self.n -= 1
        d = step - since
        if d:
            s.num_computed_tokens += d
            s.num_output_tokens += d
            clocks = self.pause_clocks
            if not clocks or clocks[-1] <= since:  # no pause since it joined (or only before its first decode)
                first = since + self.paused
            else:
                i = bisect_right(clocks, since)
                first = since + (self.pauses_upto[i - 1] if i else self.folded)
            s.sampled(first, d, self.live)
            if self.grows:
                s.num_blocks = -(-s.num_computed_tokens // self.block_size) + self.per_request
        s.decoding_since = -1

    def _fold(self) -> None:
        """The cohort is empty: its pauses come before every future member's clock, so only their count stays."""
        self.folded = self.paused
        self.pause_clocks.clear()
        self.pauses_upto.clear()

    def leave_all(self, running: list[RequestState], step: int) -> None:
        for s in running[:self.n]:
            self.leave(s, step)
        self.heap.clear()
        if self.pause_clocks:
            self._fold()

    def absorb(self, running: list[RequestState], step: int) -> None:
        """Members join in running order while the request after the cohort is a plain decoder."""
        while self.n < len(running) and self.can_join(running[self.n]):
            self.join(running[self.n], step)

    def contexts(self, running: list[RequestState], step: int) -> list[int]:
        """Each member's num_computed_tokens before `step` (for records and cost models without sums)."""
        return [s.num_computed_tokens + step - s.decoding_since for s in running[:self.n]]

    def context_sum(self, step: int) -> int:
        return self.base + self.n * step

    def allocating(self, step: int) -> list[RequestState]:
        """The members that take a new block in `step`, in running order (prefix caching only)."""
        return list(self.by_phase[-step % self.block_size].values())

    def filling(self, step: int) -> list[RequestState]:
        """The members whose last block becomes full in `step`, in running order (prefix caching only)."""
        return list(self.by_phase[(-step - 1) % self.block_size].values())

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
        if not self.n and self.pause_clocks:
            self._fold()
        return done
