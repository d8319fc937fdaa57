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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from servesim.engines.vllm.block_hash import block_hashes

__all__ = ["BlockPool", "block_hashes"]

BlockHash = int  # a 64-bit chained hash (`block_hash`)


class BlockPool:
    """`num_blocks` usable KV blocks (vLLM's null block excluded), with ref counts and the prefix cache."""

    __slots__ = ("free_queue", "ref_cnt", "block_hash", "cached", "num_cached_free", "num_evicted", "owner",
                 "evicted")

    def __init__(self, num_blocks: int, track_evictions: bool = False) -> None:
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # front = next taken
        self.ref_cnt = [0] * num_blocks
        self.block_hash: dict[int, BlockHash] = {}  # block -> hash, for the blocks registered in the cache
        self.cached: dict[BlockHash, list[int]] = {}  # hash -> copies, earliest registered first
        self.num_cached_free = 0  # free blocks still holding a hash (they count as free)
        self.num_evicted = 0
        self.owner = [-1] * num_blocks  # the request (its index) that registered each cached block
        # explain: hashes evicted and not cached again, to tell a lookup that stopped at an evicted block
        self.evicted: set[BlockHash] | None = set() if track_evictions else None

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    def lookup(self, hashes: Sequence[BlockHash], num_tokens: int, block_size: int) -> list[int]:
        """The blocks of the longest cached prefix (P2, P3, P6): full blocks, never the last token."""
        hits = []
        for h in hashes[:(num_tokens - 1) // block_size]:
            copies = self.cached.get(h)
            if not copies:
                break
            hits.append(copies[0])
        return hits

    def num_evictable(self, blocks: Sequence[int]) -> int:
        """How many of these hit blocks sit in the free queue (P9's admission gate counts them)."""
        return sum(self.ref_cnt[b] == 0 for b in blocks)

    def touch(self, blocks: Sequence[int]) -> None:
        """A request takes hit blocks: held once more; a free one leaves the queue (it is no longer evictable)."""
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self.free_queue[b]
                self.num_cached_free -= 1
            self.ref_cnt[b] += 1

    def allocate(self, n: int) -> list[int]:
        """`n` new blocks from the front of the free queue; a hashed one is evicted from the cache (P7)."""
        if n > len(self.free_queue):
            raise ValueError(f"{n} blocks asked, {len(self.free_queue)} free")
        pop, block_hash, cached, ref_cnt = self.free_queue.popitem, self.block_hash, self.cached, self.ref_cnt
        out = []
        for _ in range(n):
            b = pop(last=False)[0]
            if b in block_hash:
                h = block_hash.pop(b)
                copies = cached[h]
                if len(copies) == 1:
                    del cached[h]
                else:
                    copies.remove(b)
                self.num_cached_free -= 1
                self.num_evicted += 1
                if self.evicted is not None:
                    self.evicted.add(h)
            ref_cnt[b] = 1
            out.append(b)
        return out

    def register(self, block: int, h: BlockHash, owner: int = -1) -> None:
        """A full block is cached under its hash (P5: once scheduled); a second copy is kept, not merged (P6).
        `owner`: the request that computed it (for explain's "from whose blocks")."""
        if block in self.block_hash:
            return
        self.block_hash[block] = h
        self.cached.setdefault(h, []).append(block)
        self.owner[block] = owner
        if self.evicted is not None:
            self.evicted.discard(h)

    def lost(self, hashes: Sequence[BlockHash], start: int, limit: int) -> int:
        """Blocks a lookup would have hit from `start` (its first miss) had nothing been evicted: 0 unless that
        block was evicted; then the run of blocks from it that were evicted or are still cached (up to `limit`).
        Only with `track_evictions`."""
        evicted, cached = self.evicted, self.cached
        if evicted is None or start >= limit or hashes[start] not in evicted:
            return 0
        n = start
        while n < limit and (hashes[n] in evicted or hashes[n] in cached):
            n += 1
        return n - start

    def free(self, blocks: Sequence[int]) -> None:
        """A request gives its blocks back, tail first (P7): unhashed ones to the front, hashed ones to the back."""
        for b in reversed(blocks):
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b]:
                continue  # another request still holds this cached block
            self.free_queue[b] = None
            if b in self.block_hash:
                self.num_cached_free += 1
            else:
                self.free_queue.move_to_end(b, last=False)
