"""vLLM v1's KV cache manager with prefix caching (pinned: vLLM 0.33.0, `vllm/v1/core/kv_cache_manager.py`): the
paged pool of `servesim.engine.kv` whose full blocks are cached under their chained hashes (`block_pool`), looked
up at admission and kept hittable when freed, until evicted."""

from __future__ import annotations

from servesim.engine.kv import KVCache, split_hash_ids
from servesim.engine.request import RequestState
from servesim.engine.token_runs import LiveSteps
from servesim.engines.vllm.block_hash import block_hashes, extend_generated
from servesim.engines.vllm.block_pool import BlockPool


class PrefixCachingKV(KVCache):
    """The KV pool with vLLM v1's prefix caching (`block_pool`): each request holds block ids; full blocks are
    cached under their chained hash once scheduled (P5) and stay hittable when freed, until evicted.
    `free_blocks` counts the evictable cached blocks too (P8). Requests without `hash_ids` hit nothing."""

    remembers_order = True  # the free queue's order is the eviction order

    __slots__ = ("pool", "query_tokens", "hit_tokens", "lost_tokens", "lost_admissions", "async_step", "live",
                 "window")

    def __init__(self, block_size: int, num_gpu_blocks: int, track_evictions: bool = False,
                 async_scheduling: bool = False, per_request: int = 0) -> None:
        super().__init__(block_size, num_gpu_blocks, None, per_request)
        # a hybrid model's blocks of its sliding-window groups, per request index: held apart from `block_ids`
        # (the full-attention blocks, the ones hashed and hit), and never cached
        self.window: dict[int, list[int]] = {}
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
            state.cached_from = int(self.pool.owner[hits[-1]]) if hits else -1
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
        r, bs = state.request, self.block_size
        if r.hash_ids is None:
            return []
        known, end = state.block_hashes, num_tokens // bs
        if known is not None and len(known) >= end:
            return known
        if known and len(known) * bs >= r.hashed_len:  # past the prompt: generated tokens only
            extend_generated(known, end, bs)
            return known
        known = state.block_hashes = block_hashes(split_hash_ids(r, bs), r.hashed_len, num_tokens, bs, known)
        return known

    def lookup(self, state: RequestState) -> list[int]:
        """Hit blocks for a request (re)admitted with nothing computed: the longest cached prefix of its prompt and
        outputs, never its last token (P2-P4)."""
        n = state.num_tokens
        return self.pool.lookup(self.hashes(state, n), n, self.block_size)

    def prefix_hit_tokens(self, state: RequestState) -> int:
        return 0 if state.request.hash_ids is None else len(self.lookup(state)) * self.block_size

    def num_evictable(self, blocks: list[int]) -> int:
        return self.pool.num_evictable(blocks)

    def take_hits(self, state: RequestState, hits: list[int]) -> None:
        """`state` starts with the hit blocks as computed tokens."""
        self.pool.touch(hits)
        state.block_ids = list(hits)
        state.num_blocks = state.num_hashed_blocks = len(hits)
        state.num_cached_tokens = state.num_computed_tokens = len(hits) * self.block_size
        self.free_blocks = self.pool.num_free

    def allocate(self, state: RequestState, num_tokens_after: int, lookahead: int = 0,
                 num_tokens: int | None = None) -> bool:
        """`num_tokens`: the request's known tokens as the scheduler sees them (async speculative decoding: without
        the last step's, still in flight); only their full blocks are cached."""
        need = -(-(num_tokens_after + lookahead) // self.block_size) + self.per_request - state.num_blocks
        if need > 0:
            if need > self.free_blocks:
                return False
            if state.block_ids is None:
                state.block_ids = []
            ids = self.pool.allocate(need)
            if self.per_request and state.index not in self.window:
                self.window[state.index], ids = ids[:self.per_request], ids[self.per_request:]
            state.block_ids += ids
            state.num_blocks += need
            self.free_blocks = self.pool.num_free
        # the full blocks this step computes become hittable now (P5), of its known tokens only (not drafts that
        # may be rejected, `allocate_slots` 621); under async scheduling not the last one sampled (in flight)
        known = min(num_tokens_after, state.num_tokens if num_tokens is None else num_tokens)
        runs = state.token_runs
        if self.async_step is not None and runs and self.live.last_token_at(runs, self.async_step - 1):
            known = min(known, state.num_tokens - 1)
        full = known // self.block_size
        if full > state.num_hashed_blocks and state.request.hash_ids is not None:
            hashes, start = self.hashes(state, num_tokens_after), state.num_hashed_blocks
            self.pool.register_blocks(state.block_ids[start:full], hashes[start:full], state.index, start)
            state.num_hashed_blocks = full
        return True

    def cache_finished(self, state: RequestState) -> None:
        """Async scheduling (V1): a finishing request's blocks are cached up to its last computed token before it
        is freed (`update_from_output`'s `cache_blocks`), so a block its final decode filled goes back hashed."""
        r = state.request
        self.cache_upto(state, r.prompt_len + r.output_len - 1)  # every token but the last sampled one

    def cache_upto(self, state: RequestState, num_tokens: int) -> None:
        """Register `state`'s full blocks of its first `num_tokens` tokens (`cache_blocks`): after a step that
        verified drafts, the accepted ones' blocks (`update_from_output`, 2395-2415)."""
        full = num_tokens // self.block_size
        if full > state.num_hashed_blocks and state.request.hash_ids is not None and state.block_ids:
            hashes, start = self.hashes(state, full * self.block_size), state.num_hashed_blocks
            self.pool.register_blocks(state.block_ids[start:full], hashes[start:full], state.index, start)
            state.num_hashed_blocks = full

    def free(self, state: RequestState) -> int:
        n = state.num_blocks
        if state.block_ids:
            self.pool.free(state.block_ids)
        if state.index in self.window:
            self.pool.free(self.window.pop(state.index))
        state.block_ids = state.block_hashes = None  # (made again if it is readmitted)
        state.num_blocks = state.num_hashed_blocks = 0
        self.free_blocks = self.pool.num_free
        return n

    def window_ids(self, state: RequestState) -> list[int]:
        """The blocks `state` holds in the sliding-window groups (none for a model without them)."""
        return self.window.get(state.index, [])

    @property
    def cached_free_blocks(self) -> int:
        return self.pool.num_cached_free

    @property
    def evicted_blocks(self) -> int:
        return self.pool.num_evicted
