"""The paged KV block manager: a free pool of fixed-size blocks, counted per request.

A request holds ceil(tokens in cache / block_size) blocks. vLLM keeps one block of `num_gpu_blocks` as a null
block, so the usable pool is `num_gpu_blocks - 1`. `num_gpu_blocks=None` means an unlimited pool.
"""

from __future__ import annotations

from servesim.engine.request import RequestState


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
