"""SGLang's token-level KV pool (pinned: SGLang 0.5.23, `srt/mem_cache/memory_pool.py`, `token_to_kv_pool`), with
the radix cache beside it.

`max_total_num_tokens` slots in pages of `page_size` tokens (no null block, unlike vLLM's pool); a request holds
its own slots (`RequestState.num_blocks`, in pages) plus, with the radix cache, a locked prefix in the tree. The
allocator's free count (`free_blocks`) does not include the tree's evictable tokens; an allocation that does not
fit evicts from the tree first, as SGLang's `alloc_token_slots` does.
"""

from __future__ import annotations

from servesim.engine.kv import KVCache
from servesim.engine.request import RequestState
from servesim.engines.sglang.radix_cache import RadixCache


class TokenPool(KVCache):
    __slots__ = ("radix",)

    def __init__(self, page_size: int, max_total_num_tokens: int | None, radix: RadixCache | None) -> None:
        super().__init__(page_size, None)
        self.usable_blocks = None if max_total_num_tokens is None else max_total_num_tokens // page_size
        self.free_blocks = self.usable_blocks
        self.radix = radix

    @property
    def remembers_order(self) -> bool:
        return self.radix is not None  # the radix cache's access order decides what is evicted

    @property
    def evictable(self) -> int:
        return self.radix.evictable if self.radix is not None else 0

    @property
    def available(self) -> float:
        """Free plus evictable tokens: what admission and decode may count on."""
        if self.free_blocks is None:
            return float("inf")
        return self.free_blocks * self.block_size + self.evictable

    def evict_for(self, num_tokens: int) -> None:
        """evict_from_tree_cache: when fewer than `num_tokens` are free, evict the gap from the tree (whole leaves;
        `mem_cache/common.py`)."""
        if self.radix is None or self.free_blocks is None:
            return
        gap = num_tokens - self.free_blocks * self.block_size
        if gap > 0:
            self.free_blocks += self.radix.evict(gap) // self.block_size

    def make_room(self, num_pages: int) -> bool:
        """Evict from the tree until `num_pages` are free; False if even that is not enough."""
        if self.free_blocks is None:
            return True
        self.evict_for(num_pages * self.block_size)  # (the tree holds whole pages: it frees a number of pages)
        return num_pages <= self.free_blocks

    def grow(self, state: RequestState, num_pages: int) -> bool:
        """`state` takes `num_pages` more of its own pages (evicting the tree if needed)."""
        if not self.make_room(num_pages):
            return False
        if self.free_blocks is not None:
            self.free_blocks -= num_pages
        state.num_blocks += num_pages
        return True

    def give_back(self, state: RequestState | None, num_pages: int) -> None:
        """`state` frees `num_pages` of its own (duplicates on a radix insert, or all of them); the caller
        sets its `num_blocks`."""
        if self.free_blocks is not None:
            self.free_blocks += num_pages
