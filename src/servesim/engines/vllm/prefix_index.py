"""The prefix cache's index (`block_pool.BlockPool`): which cached block serves a hash, kept per run of blocks
rather than per block.

A run is one request's blocks at consecutive positions of its chain, with their hashes: what it registers, and
what it registers next when that continues the run (a prompt's next chunk, a decode's next block). The index maps
the hash at a run's first position to the runs that start with it: one dict entry per run, not one per block. A
lookup walks a request's chain from block 0: at each position it picks up the runs starting with that position's
hash, keeps the runs it holds while their hashes agree with the chain, and takes the earliest registered block
still cached among them (P6). Equal hashes mean equal prefixes (and so the same position), so every cached block
with a position's hash sits in a run that agrees with the chain from the run's first position on, where the walk
picked it up: the walk finds what a hash -> blocks dict would.

A block belongs to the run that registered it (`run_of`) while it stays cached; eviction clears the pool's flag
and counts it off its run (`live`). A run with no block left is dropped when a walk meets it, and at each purge
(when the runs hold several times the pool's blocks), which also trims the others up to their first cached block.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, count

import numpy as np


class Run:
    """`blocks` at consecutive positions, with their `hashes`, registered by request `owner`; `end`: the position
    after the last (-1: not known, the run is not continued)."""

    __slots__ = ("rid", "blocks", "hashes", "owner", "end")

    def __init__(self, rid: int, blocks: list[int], hashes: list[int], owner: int, end: int) -> None:
        self.rid, self.blocks, self.hashes, self.owner, self.end = rid, blocks, hashes, owner, end


class RunIndex:
    """The runs by their first hash, over the pool's `hashed` flags (the same array)."""

    __slots__ = ("hashed", "heads", "open", "run_of", "seq", "live", "next_rid", "next_seq", "held", "max_held")

    def __init__(self, hashed: np.ndarray) -> None:
        self.hashed = hashed
        self.heads: dict[int, list[Run]] = {}
        self.open: dict[int, Run] = {}  # each request's last run (its next registration may continue it)
        self.run_of = np.full(len(hashed), -1, np.intp)  # each cached block's run
        self.seq = np.zeros(len(hashed), np.int64)  # each cached block's place in the order of registration
        self.live = np.zeros(1024, np.intp)  # cached blocks per run (by run id)
        self.next_rid = self.next_seq = 0
        self.held = 0  # blocks in the runs' lists
        self.max_held = 4 * len(hashed) + 1024  # `held` that triggers a purge

    def add(self, blocks: list[int], hashes: list[int], new: np.ndarray, owner: int, start: int) -> None:
        """Request `owner` registers `blocks` with `hashes` from position `start` (-1: not known); `new`: the
        blocks it caches (the others are cached by other runs)."""
        rid = self._run(blocks, hashes, owner, start)
        n = len(new)
        self.run_of[new] = rid
        self.seq[new] = np.arange(self.next_seq, self.next_seq + n)
        self.next_seq += n
        self.live[rid] += n

    def add_one(self, block: int, h: int, owner: int, start: int) -> None:
        rid = self._run([block], [h], owner, start)
        self.run_of[block] = rid
        self.seq[block] = self.next_seq
        self.next_seq += 1
        self.live[rid] += 1

    def _run(self, blocks: list[int], hashes: list[int], owner: int, start: int) -> int:
        """The run these blocks go in: the owner's last one if they continue it, else a new one."""
        self.held += len(blocks)
        run = self.open.get(owner) if start >= 0 else None
        if run is not None and run.end == start:
            run.blocks += blocks
            run.hashes += hashes
            run.end += len(blocks)
            return run.rid
        if self.held > self.max_held:
            self.purge()
        rid = self.next_rid
        self.next_rid += 1
        if rid == len(self.live):
            self.live = np.concatenate((self.live, np.zeros(rid, np.intp)))
        run = Run(rid, list(blocks), list(hashes), owner, start + len(blocks) if start >= 0 else -1)
        self.heads.setdefault(hashes[0], []).append(run)
        if start >= 0:
            self.open[owner] = run
        return rid

    def evict(self, blocks: np.ndarray) -> None:
        """These blocks (flags cleared by the pool) leave their runs."""
        np.subtract.at(self.live, self.run_of[blocks], 1)

    def evict_one(self, block: int) -> None:
        self.live[self.run_of[block]] -= 1

    def walk(self, hashes: Sequence[int], limit: int, stop: bool) -> list[int | None]:
        """The earliest registered cached block with each of hashes[:limit] (a chain from block 0), up to the first
        one without (`stop`) or None there. From each position where runs start to the next, the runs held are
        followed over the whole stretch at once."""
        out: list[int | None] = []
        active: list[tuple[Run, int]] = []  # the runs agreeing with the chain, with their first position
        p = 0
        while p < limit:
            if hashes[p] in self.heads:
                active += [(run, p) for run in self._alive(hashes[p])]
            reach = [(run, at, _agree(run.hashes, p - at, hashes, p, limit)) for run, at in active]
            active = [(run, at) for run, at, n in reach if n]
            ahead = max((n for *_, n in reach), default=0)
            if not ahead:  # no run holds position p
                if stop:
                    break
                out.append(None)
                p += 1
                continue
            more = compress(count(p + 1), map(self.heads.__contains__, hashes[p + 1:p + ahead]))
            e = next(more, p + ahead)  # the next position where runs start, or where the runs held stop agreeing
            found = self._stretch(reach, p, e)
            out += found
            if stop and None in found:
                return out[:out.index(None)]
            p = e
        return out

    def _stretch(self, reach: list[tuple[Run, int, int]], p: int, e: int) -> list[int | None]:
        """Positions p..e-1 (no run starts after p): each one's earliest registered cached block among the runs
        agreeing with the chain there (`reach`: each run, its first position, and how far from p it agrees)."""
        spans = [self._cached(run, p - at, min(n, e - p)) for run, at, n in reach if n]
        if len(spans) == 1:
            return spans[0] + [None] * (e - p - len(spans[0]))
        return [self._earliest(spans, i) for i in range(e - p)]

    def _cached(self, run: Run, k: int, n: int) -> list[int | None]:
        """The run's blocks k..k+n-1 where it still caches them, else None."""
        blocks = run.blocks[k:k + n]
        if n < 8:
            hashed, run_of = self.hashed.item, self.run_of.item
            return [b if hashed(b) and run_of(b) == run.rid else None for b in blocks]
        ids = np.array(blocks, np.intp)
        mine = self.hashed[ids] & (self.run_of[ids] == run.rid)
        return blocks if mine.all() else [b if m else None for b, m in zip(blocks, mine.tolist())]

    def _earliest(self, spans: list[list[int | None]], i: int) -> int | None:
        """Of several runs' blocks at one position, the earliest registered (P6)."""
        blocks = [span[i] for span in spans if i < len(span) and span[i] is not None]
        return min(blocks, key=self.seq.item) if blocks else None

    def _alive(self, h: int) -> list[Run]:
        """The runs starting with hash h that still have a cached block (the others leave the index)."""
        runs = self.heads[h]
        alive = [run for run in runs if self.live.item(run.rid)]
        if len(alive) < len(runs):
            if alive:
                self.heads[h] = alive
            else:
                del self.heads[h]
            for run in runs:
                self._close(run)
        return alive

    def _close(self, run: Run) -> None:
        """A run without cached blocks leaves the index: it is not continued either."""
        if not self.live.item(run.rid) and self.open.get(run.owner) is run:
            del self.open[run.owner]

    def purge(self) -> None:
        """Drop the runs with no cached block; trim the others to the span of their cached blocks."""
        runs = [run for group in self.heads.values() for run in group]
        for run in runs:
            self._close(run)
        runs = [run for run in runs if self.live.item(run.rid)]
        self.heads, self.held = {}, 0
        for run in runs:
            if self.live.item(run.rid) < len(run.blocks):
                self._trim(run)
            self.heads.setdefault(run.hashes[0], []).append(run)
            self.held += len(run.blocks)
        self.max_held = max(self.max_held, 2 * self.held)

    def _trim(self, run: Run) -> None:
        """Drop the run's blocks before its first cached one (its end stays where it is, to be continued)."""
        blocks = np.array(run.blocks, np.intp)
        first = int(np.argmax(self.hashed[blocks] & (self.run_of[blocks] == run.rid)))
        run.blocks, run.hashes = run.blocks[first:], run.hashes[first:]


def _agree(theirs: list[int], k: int, chain: Sequence[int], p: int, limit: int) -> int:
    """How many hashes a run's from its k-th on share with the chain's from position p, up to `limit` (once apart,
    they stay apart): compared in windows that double while they agree."""
    n, window = 0, 32
    while True:
        m = min(window, limit - p - n, len(theirs) - k - n)
        if m <= 0:
            return n
        a, b = theirs[k + n:k + n + m], chain[p + n:p + n + m]
        if a != b:
            return n + next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        n, window = n + m, 2 * window
