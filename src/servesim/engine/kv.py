"""The paged KV block manager: a free pool of fixed-size blocks, counted per request.

A request holds ceil(tokens in cache / block_size) blocks. vLLM keeps one block of `num_gpu_blocks` as a null
block, so the usable pool is `num_gpu_blocks - 1`. `num_gpu_blocks=None` means an unlimited pool.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.engine.request import RequestState
from servesim.engine.token_runs import LiveSteps


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class KVCache:
    __slots__ = ("block_size", "usable_blocks", "free_blocks", "host_blocks", "host_free")

    def __init__(self, block_size: int, num_gpu_blocks: int | None, swap_space: int | None = None) -> None:
        self.block_size = block_size
        self.usable_blocks = None if num_gpu_blocks is None else num_gpu_blocks - 1
        self.free_blocks = self.usable_blocks  # None = unlimited
        self.host_blocks = swap_space  # host pool for swapping, None = unlimited
        self.host_free = swap_space

    @property
    def unlimited(self) -> bool:
        return self.free_blocks is None

    def blocks_needed(self, state: RequestState, num_tokens_after: int) -> int:
        """New blocks `state` needs so that its cache can hold `num_tokens_after` tokens."""
        return max(0, blocks_for(num_tokens_after, self.block_size) - state.num_blocks)

    def can_fit(self, num_blocks: int, reserve: int = 0) -> bool:
        return self.free_blocks is None or num_blocks + reserve <= self.free_blocks

    def allocate(self, state: RequestState, num_tokens_after: int) -> bool:
        """Grow `state`'s allocation to hold `num_tokens_after` tokens; False (and no change) if it does not fit."""
        need = -(-num_tokens_after // self.block_size) - state.num_blocks  # blocks_needed, inlined: hot path
        if need <= 0:
            return True
        if self.free_blocks is not None:
            if need > self.free_blocks:
                return False
            self.free_blocks -= need
        state.num_blocks += need
        return True

    def free(self, state: RequestState) -> int:
        n = state.num_blocks
        if self.free_blocks is not None:
            self.free_blocks += n
        state.num_blocks = 0
        return n

    # swap (vLLM v0's other preemption mode)
    def can_swap_out(self, state: RequestState) -> bool:
        return self.host_free is None or state.num_blocks <= self.host_free

    def swap_out(self, state: RequestState) -> int:
        n = self.free(state)
        if self.host_free is not None:
            self.host_free -= n
        state.num_swapped_blocks = n
        return n

    def swap_in(self, state: RequestState) -> int:
        """Move a swapped request's blocks back to the GPU (the caller checked they fit)."""
        n = state.num_swapped_blocks
        if self.free_blocks is not None:
            self.free_blocks -= n
        if self.host_free is not None:
            self.host_free += n
        state.num_blocks, state.num_swapped_blocks = n, 0
        return n


def split_hash_ids(r, block_size: int) -> Sequence:
    """A request's hash ids at `block_size` granularity: a trace's larger blocks (Mooncake: 512 tokens) become
    (id, k) for their k-th sub-block; equal ids at the same place mean equal tokens, so equal sub-blocks too.
    Smaller ones (16-token ids in 32-token blocks) are grouped: a block is the tuple of its ids. (One size divides
    the other: `servesim.engine.resolve` checks it.) A view, O(1) to make: a chunked prefill asks for it once per
    chunk."""
    hbs = r.hash_block_size
    if not hbs or hbs == block_size:
        return r.hash_ids
    return _BlockIds(r.hash_ids, hbs, block_size, r.hashed_len)


class IdView(Sequence):
    """Block ids computed when read, never held as a tuple per block: subclasses set `n` and define `item(j)`."""

    __slots__ = ()
    n: int

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j):
        if not isinstance(j, int):
            return tuple(self[i] for i in range(*j.indices(self.n)))
        if j < 0:
            j += self.n
        if not 0 <= j < self.n:
            raise IndexError(j)
        return self.item(j)

    def item(self, j: int) -> object:
        raise NotImplementedError


class _BlockIds(IdView):
    """`split_hash_ids`' view: block j of `block_size` tokens, from ids of `hash_block_size` tokens each."""

    __slots__ = ("ids", "per", "split", "n")

    def __init__(self, ids: Sequence, hash_block_size: int, block_size: int, hashed_len: int) -> None:
        self.ids, self.split = ids, hash_block_size > block_size
        self.per = hash_block_size // block_size if self.split else block_size // hash_block_size
        self.n = -(-hashed_len // block_size) if self.split else -(-len(ids) // self.per)

    def item(self, j: int) -> object:
        per = self.per
        if self.split:
            return self.ids[j // per], j % per
        return tuple(self.ids[j * per:j * per + per])


class PrefixCachingKV(KVCache):
    """The KV pool with vLLM v1's prefix caching (`servesim.engine.block_pool`): each request holds block ids; full
    blocks are cached under their chained hash once scheduled (P5) and stay hittable when freed, until evicted.
    `free_blocks` counts the evictable cached blocks too (P8). Requests without `hash_ids` hit nothing."""

    __slots__ = ("pool", "query_tokens", "hit_tokens", "lost_tokens", "lost_admissions", "async_step", "live")

    def __init__(self, block_size: int, num_gpu_blocks: int, track_evictions: bool = False,
                 async_scheduling: bool = False) -> None:
        from servesim.engine.block_pool import BlockPool

        super().__init__(block_size, num_gpu_blocks, None)
        self.pool = BlockPool(self.usable_blocks, track_evictions)
        self.query_tokens = self.hit_tokens = 0  # vLLM's prefix-cache counters: tokens looked up, tokens hit
        # with track_evictions: tokens (and admissions) that would have hit had their blocks not been evicted
        self.lost_tokens = self.lost_admissions = 0
        # async scheduling: the step being scheduled (the engine sets it); a token sampled in the step before is
        # still in flight, so the block it completes has no hash yet and registers one step later (P5)
        self.async_step: int | None = 0 if async_scheduling else None
        self.live: LiveSteps | None = None  # the engine's live steps (the token runs' steps), set by it

    def count_query(self, state: RequestState, hits: list[int]) -> None:
        """One (re)admission's lookup, as vLLM counts it: its prompt and outputs queried, its cached tokens hit
        (and, tracking evictions, what eviction cost it). The first admission's hits are vLLM's per-request
        `num_cached_tokens`, with the request whose block served the last of them."""
        n, hit_tokens = state.num_tokens, len(hits) * self.block_size
        if state.first_cached_tokens < 0:
            state.first_cached_tokens = hit_tokens
            state.cached_from = self.pool.owner[hits[-1]] if hits else -1
        self.query_tokens += n
        self.hit_tokens += hit_tokens
        if self.pool.evicted is not None and state.request.hash_ids is not None:
            bs = self.block_size
            lost = self.pool.lost(self.hashes(state, n), hit_tokens // bs, (n - 1) // bs)
            if lost:
                self.lost_tokens += lost * bs
                self.lost_admissions += 1

    def hashes(self, state: RequestState, num_tokens: int) -> list:
        """The chained hashes of `state`'s full blocks over its first `num_tokens` tokens (kept as they grow)."""
        from servesim.engine.block_pool import block_hashes

        r, bs = state.request, self.block_size
        if r.hash_ids is None:
            return []
        known = state.block_hashes
        if known is None or len(known) < num_tokens // bs:
            ids = split_hash_ids(r, bs)
            known = state.block_hashes = block_hashes(ids, r.hashed_len, num_tokens, bs, known)
        return known

    def lookup(self, state: RequestState) -> list[int]:
        """Hit blocks for a request (re)admitted with nothing computed: the longest cached prefix of its prompt and
        outputs, never its last token (P2-P4)."""
        n = state.num_tokens
        return self.pool.lookup(self.hashes(state, n), n, self.block_size)

    def num_evictable(self, blocks: list[int]) -> int:
        return self.pool.num_evictable(blocks)

    def take_hits(self, state: RequestState, hits: list[int]) -> None:
        """`state` starts with the hit blocks as computed tokens."""
        self.pool.touch(hits)
        state.block_ids = list(hits)
        state.num_blocks = state.num_hashed_blocks = len(hits)
        state.num_cached_tokens = state.num_computed_tokens = len(hits) * self.block_size
        self.free_blocks = self.pool.num_free

    def allocate(self, state: RequestState, num_tokens_after: int) -> bool:
        need = -(-num_tokens_after // self.block_size) - state.num_blocks
        if need > 0:
            if need > self.free_blocks:
                return False
            if state.block_ids is None:
                state.block_ids = []
            state.block_ids += self.pool.allocate(need)
            state.num_blocks += need
            self.free_blocks = self.pool.num_free
        # the full blocks this step computes become hittable now (P5); under async scheduling only those of
        # known tokens (the last one sampled may be in flight)
        known = num_tokens_after
        runs = state.token_runs
        if self.async_step is not None and runs and self.live.last_token_at(runs, self.async_step - 1):
            known = min(known, state.num_tokens - 1)
        full = known // self.block_size
        if full > state.num_hashed_blocks and state.request.hash_ids is not None:
            hashes = self.hashes(state, num_tokens_after)
            pool, ids = self.pool, state.block_ids
            for i in range(state.num_hashed_blocks, full):
                pool.register(ids[i], hashes[i], state.index)
            state.num_hashed_blocks = full
        return True

    def free(self, state: RequestState) -> int:
        n = state.num_blocks
        if state.block_ids:
            self.pool.free(state.block_ids)
        state.block_ids = state.block_hashes = None  # (made again if it is readmitted)
        state.num_blocks = state.num_hashed_blocks = 0
        self.free_blocks = self.pool.num_free
        return n

    @property
    def cached_free_blocks(self) -> int:
        return self.pool.num_cached_free

    @property
    def evicted_blocks(self) -> int:
        return self.pool.num_evicted
