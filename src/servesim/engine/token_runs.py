"""Token runs that step over the steps in which nobody decoded.

A request's tokens are kept as runs (first step, count). A decoding request samples in every step the running
batch decodes, but a policy that runs prefill first (SGLang, vLLM v0) runs steps of prompts alone, in which no
request decodes: on a busy SGLang engine every other step. Read as consecutive steps, each of those steps would
break every decoder's run, and a request would hold a run per token.

So a run counts *live* steps: steps in which at least one request decoded (a one-token step of a request that
had sampled since its admission). A run (start, count) is a token in step `start`, then one in each of the next
count - 1 live steps after it. The other steps (`skip`) hold only first tokens (a prompt that completes), so a
run can start in one but never passes through one. This is exact for any token sequence: a token extends the
last run only when it comes in the live step right after the run's last token (`LiveSteps.extends`), else it
starts a run. `expand` turns runs back into runs of consecutive steps, the form `RequestTimeline.token_steps`
and the metrics read.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np


class LiveSteps:
    """The engine's steps as it runs them, kept as the list of skipped ones (steps nobody decoded in: few, or
    every other step under SGLang); `upto(t)` = live steps <= t."""

    __slots__ = ("skipped", "steps")

    def __init__(self) -> None:
        self.skipped: list[int] = []  # increasing
        self.steps = 0

    def mark(self, live: bool) -> None:
        """The next step: live (someone decoded in it) or not."""
        if not live:
            self.skipped.append(self.steps)
        self.steps += 1

    def mark_live(self, k: int) -> None:
        """The next k steps are live (a stretch of decodes)."""
        self.steps += k

    def upto(self, t: int) -> int:
        return t + 1 - bisect_right(self.skipped, t)

    def is_skipped(self, t: int) -> bool:
        skipped = self.skipped
        i = bisect_left(skipped, t)
        return i < len(skipped) and skipped[i] == t

    def extends(self, runs: list[int], step: int) -> bool:
        """A token in `step` continues the last of `runs` (`step` is live and the run's next live step)."""
        if not runs:
            return False
        start, count = runs[-2], runs[-1]
        if not self.skipped or self.skipped[-1] < start:  # nothing skipped since the run began
            return start + count == step
        return not self.is_skipped(step) and self.upto(step) == self.upto(start) + count

    def last_token_at(self, runs: list[int], step: int) -> bool:
        """The last of `runs` ends with a token in `step`."""
        if not runs:
            return False
        start, count = runs[-2], runs[-1]
        if count == 1:
            return start == step
        if not self.skipped or self.skipped[-1] < start:
            return start + count - 1 == step
        return not self.is_skipped(step) and self.upto(step) == self.upto(start) + count - 1

    def skip(self) -> np.ndarray:
        """Per step: True where nobody decoded."""
        mask = np.zeros(self.steps, bool)
        mask[np.array(self.skipped, np.int64)] = True
        return mask


def expand(runs: np.ndarray, offsets: np.ndarray, skip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs over live steps (`skip`: the steps nobody decoded in) as runs of consecutive steps, each request's
    adjacent runs merged: (runs, offsets) in the same flat form, (first step, count, ...)."""
    if not runs.size or not skip.any():
        return runs, offsets
    live = np.flatnonzero(~skip)  # live step indices
    upto = np.cumsum(~skip)  # live steps <= t
    start, count = runs[0::2], runs[1::2]
    owner = np.repeat(np.arange(offsets.size - 1), np.diff(offsets) // 2)
    masked = skip[start]
    # each run as a range of live indices [a, b], after a head token of its own where it starts in a skipped step
    a = np.where(masked, upto[start], upto[start] - 1)
    b = a + count - 1 - masked
    seg = np.zeros(live.size, np.int64)  # maximal stretches of consecutive live steps
    if live.size > 1:
        np.cumsum(np.diff(live) != 1, out=seg[1:])
    first_of = np.flatnonzero(np.diff(seg, prepend=-1))  # each stretch's first live index
    last_of = np.append(first_of[1:] - 1, live.size - 1)
    has = b >= a
    n_pieces = np.zeros(start.size, np.int64)
    n_pieces[has] = seg[b[has]] - seg[a[has]] + 1
    per_run = n_pieces + masked  # output pieces of each run, its head first
    total = int(per_run.sum())
    first_piece = np.cumsum(per_run) - per_run
    p_start = np.empty(total, np.int64)
    p_count = np.empty(total, np.int64)
    heads = first_piece[masked]
    p_start[heads], p_count[heads] = start[masked], 1
    run_of = np.repeat(np.arange(start.size), n_pieces)  # the run of each range piece
    k = np.arange(run_of.size) - np.repeat(np.cumsum(n_pieces) - n_pieces, n_pieces)
    g = seg[a[run_of]] + k
    lo = np.maximum(a[run_of], first_of[g])
    hi = np.minimum(b[run_of], last_of[g])
    where = first_piece[run_of] + masked[run_of] + k
    p_start[where], p_count[where] = live[lo], hi - lo + 1
    return _merge(p_start, p_count, np.repeat(owner, per_run), offsets.size - 1)


def _merge(start: np.ndarray, count: np.ndarray, owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """One request's pieces that touch (one ends the step before the next starts) as one run."""
    joins = np.zeros(start.size, bool)
    if start.size > 1:
        joins[1:] = (owner[1:] == owner[:-1]) & (start[:-1] + count[:-1] == start[1:])
    keep = np.flatnonzero(~joins)
    merged_count = np.add.reduceat(count, keep) if keep.size else count[:0]
    out = np.empty(2 * keep.size, np.int64)
    out[0::2], out[1::2] = start[keep], merged_count
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner[keep], minlength=n) * 2, out=offsets[1:])
    return out, offsets
