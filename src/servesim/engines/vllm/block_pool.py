"""vLLM v1's KV block pool with prefix caching (pinned: vLLM 0.33.0, `vllm/v1/core/block_pool.py`; rules P1-P3
and P6-P8 of ../shared/conformance/round2/README.md).

The pool keeps block identities, the cache of full blocks by hash and the free queue in vLLM's order;
`kv_cache_manager.PrefixCachingKV` puts it behind the KV interface the policies use, and the `vllm` policy looks
up hits at (re)admission (P4) with vLLM's admission gate (P9).

- P1 A block's identity is a chain: `block_hash(parent, content)` (`block_hash.block_hashes`). Prompts carry their
  content as one id per block (`hash_ids`, Mooncake's convention; the last block may be partial); generated tokens
  are all one token id, never a prompt token, so a block's content is its prompt id (if any) and how many
  generated tokens fill it.
- P2, P3 A hit is the longest run of cached blocks from block 0, of full blocks only, and never holds the last
  token: at most floor((num_tokens - 1) / block_size) blocks.
- P6 No deduplication: a block whose content is already cached is registered again under the same hash; a lookup
  is served by the earliest registered copy still cached.
- P7 Freed blocks go back tail first; a block never hashed goes to the front of the free queue (reused first), a
  hashed one to the back; new blocks come from the front, and taking a hashed block evicts it from the cache. A hit
  on a free block takes it out of the queue.
- P8 The free count includes cached blocks nobody holds (evictable).

The pool works on runs of blocks: a request's blocks are taken, registered and freed in one call each, over numpy
arrays (ref counts, which blocks hold a hash, the free queue as an array with holes); the cache's index keeps one
entry per registration, not per block (`prefix_index`). A few blocks at a time (a decode's next block) go in
scalar steps. tests/test_block_pool_reference.py checks it against a plain one-block-at-a-time pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from servesim.engines.vllm.block_hash import block_hashes
from servesim.engines.vllm.prefix_index import RunIndex

__all__ = ["BlockPool", "block_hashes"]

BlockHash = int  # a 64-bit chained hash (`block_hash`)
SMALL = 16  # runs of up to this many blocks go one block at a time (fewer numpy calls than the array path)


class FreeQueue:
    """vLLM's free block queue (a doubly linked list there) as a numpy array with holes: `q[lo:hi]` holds the free
    blocks front to back, -1 where one was taken out of the middle (a hit on a free block); `at[b]` is block b's
    slot (-1: not free). Pushes at either end write a slice; pops from the front skip the holes; when an end runs
    out of room the live blocks are moved to the middle (with room for 3x the pool, after at least a pool's worth
    of pushes)."""

    __slots__ = ("q", "at", "lo", "hi", "holes")

    def __init__(self, num_blocks: int) -> None:
        self.q = np.full(3 * num_blocks + 3, -1, np.intp)
        self.at = np.full(num_blocks, -1, np.intp)
        self.lo = self.hi = num_blocks + 1
        self.holes = 0  # -1s in q[lo:hi]
        self.push_back(np.arange(num_blocks))

    def order(self) -> list[int]:
        live = self.q[self.lo:self.hi]
        return live[live >= 0].tolist()

    def pop_one(self) -> int:
        q, lo = self.q, self.lo
        b = q.item(lo)
        while b < 0:
            lo += 1
            self.holes -= 1
            b = q.item(lo)
        self.lo = lo + 1
        self.at[b] = -1
        return b

    def pop(self, n: int) -> np.ndarray:
        """The first `n` free blocks (the caller checked there are that many)."""
        lo = self.lo
        if not self.holes or not n:
            out = self.q[lo:lo + n].copy()
            self.lo = lo + n
        else:  # the first n blocks lie within n + holes slots
            window = self.q[lo:lo + n + self.holes]
            taken = np.flatnonzero(window >= 0)[:n]
            out = window[taken]
            used = int(taken[-1]) + 1
            self.lo, self.holes = lo + used, self.holes - (used - n)
        self.at[out] = -1
        return out

    def push_front(self, blocks: np.ndarray) -> None:
        """`blocks` (front to back) before the queue's front."""
        m = len(blocks)
        if self.lo < m:
            self._recenter()
        lo = self.lo - m
        self.q[lo:self.lo] = blocks
        self.at[blocks] = np.arange(lo, self.lo)
        self.lo = lo

    def push_back(self, blocks: np.ndarray) -> None:
        m = len(blocks)
        if self.hi + m > len(self.q):
            self._recenter()
        hi = self.hi + m
        self.q[self.hi:hi] = blocks
        self.at[blocks] = np.arange(self.hi, hi)
        self.hi = hi

    def remove(self, blocks: np.ndarray) -> None:
        self.q[self.at[blocks]] = -1
        self.at[blocks] = -1
        self.holes += len(blocks)

    def _recenter(self) -> None:
        live = self.q[self.lo:self.hi]
        live = live[live >= 0]
        self.q.fill(-1)
        self.lo = (len(self.q) - len(live)) // 2
        self.hi = self.lo + len(live)
        self.holes = 0
        self.q[self.lo:self.hi] = live
        self.at[live] = np.arange(self.lo, self.hi)


class BlockPool:
    """`num_blocks` usable KV blocks (vLLM's null block excluded), with ref counts and the prefix cache (its index:
    `prefix_index.RunIndex`, one entry per registration rather than per block)."""

    __slots__ = ("queue", "num_free", "ref_cnt", "hashed", "hash_of", "index", "num_cached_free", "num_evicted",
                 "owner", "evicted", "small")

    def __init__(self, num_blocks: int, track_evictions: bool = False) -> None:
        self.queue = FreeQueue(num_blocks)
        self.num_free = num_blocks
        self.ref_cnt = np.zeros(num_blocks, np.intp)
        self.hashed = np.zeros(num_blocks, bool)  # blocks registered in the cache
        self.hash_of = np.zeros(num_blocks, np.uint64)  # their hashes (where `hashed`)
        self.index = RunIndex(self.hashed)
        self.num_cached_free = 0  # free blocks still holding a hash (they count as free)
        self.num_evicted = 0
        self.owner = np.full(num_blocks, -1, np.intp)  # the request (its index) that registered each cached block
        # explain: the hashes ever evicted (see `lost`)
        self.evicted: set[BlockHash] | None = set() if track_evictions else None
        self.small = SMALL

    # views for tests and invariant checks (each builds a copy)
    @property
    def free_queue(self) -> list[int]:
        """The free blocks, front (taken next) to back."""
        return self.queue.order()

    @property
    def block_hash(self) -> dict[int, BlockHash]:
        """block -> hash, for the blocks registered in the cache."""
        held = np.flatnonzero(self.hashed)
        return dict(zip(held.tolist(), self.hash_of[held].tolist()))

    @property
    def cached(self) -> dict[BlockHash, list[int]]:
        """hash -> copies, earliest registered first."""
        held = np.flatnonzero(self.hashed)
        held = held[np.argsort(self.index.seq[held], kind="stable")]
        out: dict[BlockHash, list[int]] = {}
        for b, h in zip(held.tolist(), self.hash_of[held].tolist()):
            out.setdefault(h, []).append(b)
        return out

    def lookup(self, hashes: Sequence[BlockHash], num_tokens: int, block_size: int) -> list[int]:
        """The blocks of the longest cached prefix (P2, P3, P6): full blocks, never the last token."""
        return self.index.walk(hashes, min(len(hashes), (num_tokens - 1) // block_size), stop=True)

    def cached_prefix(self, hashes: Sequence[BlockHash]) -> int:
        """How many of a chain's first hashes are cached."""
        return len(self.index.walk(hashes, len(hashes), stop=True))

    def num_evictable(self, blocks: Sequence[int]) -> int:
        """How many of these hit blocks sit in the free queue (P9's admission gate counts them)."""
        return int(np.count_nonzero(self.ref_cnt[blocks] == 0)) if len(blocks) else 0

    def touch(self, blocks: Sequence[int]) -> None:
        """A request takes hit blocks: held once more; a free one leaves the queue (it is no longer evictable)."""
        if not len(blocks):
            return
        held = np.array(blocks, np.intp)
        free = held[self.ref_cnt[held] == 0]
        if len(free):
            self.queue.remove(free)
            self.num_free -= len(free)
            self.num_cached_free -= len(free)
        self.ref_cnt[held] += 1

    def allocate(self, n: int) -> list[int]:
        """`n` new blocks from the front of the free queue; a hashed one is evicted from the cache (P7)."""
        if n > self.num_free:
            raise ValueError(f"{n} blocks asked, {self.num_free} free")
        if n <= self.small:
            return [self._take_one() for _ in range(n)]
        return self._take(n)[0].tolist()

    def allocate_runs(self, counts: Sequence[int]) -> tuple[list[int], list[int]]:
        """`allocate(c)` for each c in `counts` in turn, as one: the blocks, in order, and the cached free blocks
        after each run (a decode stretch's steps: `engine.fastpath`)."""
        total = sum(counts)
        if total <= self.small:
            blocks, after = [], []
            for c in counts:
                blocks += [self._take_one() for _ in range(c)]
                after.append(self.num_cached_free)
            return blocks, after
        cached = self.num_cached_free
        taken, was_hashed = self._take(total)
        evictions = np.cumsum(was_hashed).tolist()
        after = [cached - (evictions[e - 1] if e else 0) for e in accumulate(counts)]
        return taken.tolist(), after

    def _take_one(self) -> int:
        """`_take` for one block, in scalar steps."""
        b = self.queue.pop_one()
        self.num_free -= 1
        self.ref_cnt[b] = 1
        if self.hashed[b]:
            self.hashed[b] = False
            self.index.evict_one(b)
            self.num_cached_free -= 1
            self.num_evicted += 1
            if self.evicted is not None:
                self.evicted.add(self.hash_of.item(b))
        return b

    def _take(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """`n` blocks off the front, and which of them were cached (now evicted)."""
        taken = self.queue.pop(n)
        self.num_free -= n
        self.ref_cnt[taken] = 1
        was_hashed = self.hashed[taken]
        if was_hashed.any():
            self._evict(taken[was_hashed])
        return taken, was_hashed

    def _evict(self, blocks: np.ndarray) -> None:
        """Blocks taken off the free queue leave the cache."""
        self.hashed[blocks] = False
        self.index.evict(blocks)
        self.num_cached_free -= len(blocks)
        self.num_evicted += len(blocks)
        if self.evicted is not None:
            self.evicted.update(self.hash_of[blocks].tolist())

    def register(self, block: int, h: BlockHash, owner: int = -1, start: int = -1) -> None:
        """A full block is cached under its hash (P5: once scheduled); a second copy is kept, not merged (P6).
        `owner`: the request that computed it (for explain's "from whose blocks"); `start`: its position in the
        request's chain (-1: not known)."""
        if self.hashed[block]:
            return
        self.hashed[block] = True
        self.hash_of[block] = h
        self.owner[block] = owner
        self.index.add_one(block, h, owner, start)

    def register_blocks(self, blocks: list[int], hashes: list[BlockHash], owner: int = -1, start: int = -1) -> None:
        """`register` for each block in turn, as one: request `owner`'s blocks at consecutive positions of its
        chain, from `start`."""
        if len(blocks) <= 1:
            if blocks:
                self.register(blocks[0], hashes[0], owner, start)
            return
        ids = np.array(blocks, np.intp)
        new = ~self.hashed[ids]  # (blocks already registered keep their hash)
        if not new.all():
            if not new.any():
                return
            hashes_new = np.array(hashes, np.uint64)[new]
            ids = ids[new]
        else:
            hashes_new = hashes
        self.hashed[ids] = True
        self.hash_of[ids] = hashes_new
        self.owner[ids] = owner
        self.index.add(blocks, hashes, ids, owner, start)

    def lost(self, hashes: Sequence[BlockHash], start: int, limit: int) -> int:
        """Blocks a lookup would have hit from `start` (its first miss) had nothing been evicted: 0 unless that
        block was evicted; then the run of blocks from it that were evicted or are still cached (up to `limit`).
        Only with `track_evictions`. (`evicted` keeps every hash ever evicted: of a hash not cached now, that is
        "evicted and not cached again", and of one cached now the answer is the same either way.)"""
        evicted = self.evicted
        if evicted is None or start >= limit or hashes[start] not in evicted:
            return 0
        cached = self.index.walk(hashes, limit, stop=False)
        n = start
        while n < limit and (hashes[n] in evicted or cached[n] is not None):
            n += 1
        return n - start

    def free(self, blocks: Sequence[int]) -> None:
        """A request gives its blocks back, tail first (P7): unhashed ones to the front, hashed ones to the back."""
        if not len(blocks):
            return
        back_first = np.array(blocks[::-1], np.intp)
        ref = self.ref_cnt
        ref[back_first] -= 1
        freed = back_first[ref[back_first] == 0]  # (others are still held by another request)
        hashed = self.hashed[freed]
        self.queue.push_front(freed[~hashed][::-1])  # each to the front in turn: the last one ends up first
        self.queue.push_back(freed[hashed])
        self.num_free += len(freed)
        self.num_cached_free += int(np.count_nonzero(hashed))
