"""The memory an engine schedules against: a paged KV pool of fixed-size blocks, counted per request.

`KVCache` is the interface every engine's memory model keeps (the static and continuous policies and vLLM's
schedulers use it as it is; vLLM's prefix cache and SGLang's token pool extend it in their packages). A request
holds ceil(tokens in cache / block_size) blocks. One block of `num_gpu_blocks` is a null block (vLLM's), so the
usable pool is `num_gpu_blocks - 1`. `num_gpu_blocks=None` means an unlimited pool. A hybrid model's request also
holds `per_request` blocks whatever its length, from its first allocation to its release: vLLM's hybrid KV cache
manager's sliding-window groups, at most their window each (`servesim.cost.kv_groups`). Also here: a request's block
identities at a block size (`split_hash_ids`), which the workloads and the routers read as well.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.engine.request import RequestState


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class KVCache:
    __slots__ = ("block_size", "usable_blocks", "free_blocks", "host_blocks", "host_free", "per_request")
    remembers_order = False  # True: the order requests free their blocks in decides what is evicted later

    def __init__(self, block_size: int, num_gpu_blocks: int | None, num_cpu_blocks: int | None = None,
                 per_request: int = 0) -> None:
        self.block_size = block_size
        self.per_request = per_request
        self.usable_blocks = None if num_gpu_blocks is None else num_gpu_blocks - 1
        self.free_blocks = self.usable_blocks  # None = unlimited
        self.host_blocks = num_cpu_blocks  # host pool for swapping, None = unlimited
        self.host_free = num_cpu_blocks

    @property
    def unlimited(self) -> bool:
        return self.free_blocks is None

    def blocks_needed(self, state: RequestState, num_tokens_after: int) -> int:
        """New blocks `state` needs so that its cache can hold `num_tokens_after` tokens."""
        return max(0, self.blocks(num_tokens_after) - state.num_blocks)

    def blocks(self, num_tokens: int) -> int:
        """Blocks a request holding `num_tokens` tokens holds."""
        return blocks_for(num_tokens, self.block_size) + self.per_request

    def can_fit(self, num_blocks: int, reserve: int = 0) -> bool:
        return self.free_blocks is None or num_blocks + reserve <= self.free_blocks

    def allocate(self, state: RequestState, num_tokens_after: int, lookahead: int = 0) -> bool:
        """Grow `state`'s allocation to hold `num_tokens_after` tokens and `lookahead` slots past them (a drafter's,
        vLLM's num_lookahead_tokens); False (and no change) if it does not fit."""
        need = -(-(num_tokens_after + lookahead) // self.block_size) + self.per_request - state.num_blocks  # (hot)
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

    def prefix_hit_tokens(self, state: RequestState) -> int:
        """Prompt tokens a waiting request would find cached if admitted now (a pool without a prefix cache: 0);
        what a prefix-aware router asks of each replica."""
        return 0


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
