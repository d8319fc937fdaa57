"""The array block pool (`servesim.engines.vllm.block_pool.BlockPool`) against a plain one-block-at-a-time pool
with the semantics it replaced (`ReferencePool`: the OrderedDict free queue and hash -> copies lists, rules P1-P3
and P6-P8 of ../shared/conformance/round2/README.md): over random operation sequences both give the same block
ids, the same lookups and evictions, the same free and cached-free counts and the same free queue."""

from collections import OrderedDict

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from servesim.engines.vllm.block_hash import block_hashes
from servesim.engines.vllm.block_pool import BlockPool, FreeQueue

BS = 4


class ReferencePool:
    """The block pool before the array pool, one block at a time (kept here as the reference)."""

    def __init__(self, num_blocks: int) -> None:
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.ref_cnt = [0] * num_blocks
        self.block_hash: dict[int, int] = {}
        self.cached: dict[int, list[int]] = {}
        self.num_cached_free = self.num_evicted = 0
        self.owner = [-1] * num_blocks
        self.evicted: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    def lookup(self, hashes, num_tokens, block_size):
        hits = []
        for h in hashes[:(num_tokens - 1) // block_size]:
            copies = self.cached.get(h)
            if not copies:
                break
            hits.append(copies[0])
        return hits

    def num_evictable(self, blocks):
        return sum(self.ref_cnt[b] == 0 for b in blocks)

    def touch(self, blocks):
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self.free_queue[b]
                self.num_cached_free -= 1
            self.ref_cnt[b] += 1

    def allocate(self, n):
        out = []
        for _ in range(n):
            b = self.free_queue.popitem(last=False)[0]
            if b in self.block_hash:
                h = self.block_hash.pop(b)
                self.cached[h].remove(b)
                if not self.cached[h]:
                    del self.cached[h]
                self.num_cached_free -= 1
                self.num_evicted += 1
                self.evicted.add(h)
            self.ref_cnt[b] = 1
            out.append(b)
        return out

    def register(self, block, h, owner=-1):
        if block in self.block_hash:
            return
        self.block_hash[block] = h
        self.cached.setdefault(h, []).append(block)
        self.owner[block] = owner
        self.evicted.discard(h)

    def lost(self, hashes, start, limit):
        if start >= limit or hashes[start] not in self.evicted:
            return 0
        n = start
        while n < limit and (hashes[n] in self.evicted or hashes[n] in self.cached):
            n += 1
        return n - start

    def free(self, blocks):
        for b in reversed(blocks):
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b]:
                continue
            self.free_queue[b] = None
            if b in self.block_hash:
                self.num_cached_free += 1
            else:
                self.free_queue.move_to_end(b, last=False)


# a request: its ids (a few contents, so prefixes repeat), a partial last block or not, and whether it registers
# its blocks at once or later with others (admitted in the same step: P6's copies)
requests = st.tuples(st.lists(st.integers(1, 3), min_size=1, max_size=5), st.integers(0, 3), st.booleans())
operations = st.lists(st.one_of(
    st.tuples(st.just("admit"), requests),
    st.tuples(st.just("register_pending")),
    st.tuples(st.just("free"), st.integers(0, 7)),
    st.tuples(st.just("decode"), st.lists(st.integers(0, 2), min_size=1, max_size=4)),
    st.tuples(st.just("grow"), st.integers(0, 7)),
), max_size=50)


class Both:
    """The pool under test and the reference, driven alike and compared after each operation."""

    def __init__(self, num_blocks: int, max_held: int | None, small: int = 0) -> None:
        self.new, self.ref = BlockPool(num_blocks, track_evictions=True), ReferencePool(num_blocks)
        self.new.small = small  # (0: every run of blocks takes the array path)
        if max_held is not None:
            self.new.index.max_held = max_held  # purge the index's runs often
        # each request's blocks, and for those admitted [ids, prompt tokens, tokens, owner] (to decode)
        self.held: list[tuple[list[int], list | None]] = []
        self.pending: list[tuple[list[int], list[int], int, int]] = []  # (blocks, hashes, owner, start) not
        #                                                                 registered yet
        self.chains: list[tuple[list[int], int]] = []  # every request's hashes and token count, to look up
        self.count = 0

    def admit(self, request: tuple[list[int], int, bool]) -> None:
        ids, short, at_once = request
        n = len(ids) * BS - short
        hashes = block_hashes(ids, n, n, BS)
        hits = self.new.lookup(hashes, n, BS)
        assert hits == self.ref.lookup(hashes, n, BS)
        need = -(-n // BS) - len(hits)
        if need > self.new.num_free - self.new.num_evictable(hits):
            return
        assert self.new.num_evictable(hits) == self.ref.num_evictable(hits)
        for pool in (self.new, self.ref):
            pool.touch(hits)
        blocks = hits + self.new.allocate(need)
        assert blocks == hits + self.ref.allocate(need)
        self.count += 1
        self.held.append((blocks, [ids, n, n, self.count]))
        self.chains.append((hashes, n))
        full = (blocks[len(hits):len(hashes)], hashes[len(hits):], self.count, len(hits))
        if at_once:
            self.register(*full)
        else:
            self.pending.append(full)

    def register(self, blocks: list[int], hashes: list[int], owner: int, start: int) -> None:
        self.new.register_blocks(blocks, hashes, owner, start)
        for b, h in zip(blocks, hashes):
            self.ref.register(b, h, owner)

    def register_pending(self) -> None:
        """Requests admitted in one step register their blocks after all were admitted: copies (P6)."""
        for full in self.pending:
            self.register(*full)
        self.pending.clear()

    def grow(self, i: int) -> None:
        """A held request decodes a block's worth of tokens: the block they fill is registered (continuing its
        run), and a new block taken if they need one."""
        if not self.held:
            return
        blocks, request = self.held[i % len(self.held)]
        if request is None or self.new.num_free < 1:
            return
        ids, prompt, n, owner = request
        position, n = n // BS, n + BS
        request[2] = n
        if -(-n // BS) > len(blocks):
            new = self.new.allocate(1)
            assert new == self.ref.allocate(1)
            blocks += new
        h = block_hashes(ids, prompt, n, BS)[position]
        self.register([blocks[position]], [h], owner, position)
        self.chains.append((block_hashes(ids, prompt, n, BS), n))

    def free(self, i: int) -> None:
        if self.held:
            blocks, _ = self.held.pop(i % len(self.held))
            for pool in (self.new, self.ref):
                pool.free(blocks)

    def decode(self, counts: list[int]) -> None:
        """A decode stretch's new blocks, one run per step (`allocate_runs`), held as one more request."""
        if sum(counts) > self.new.num_free:
            return
        blocks, cached = self.new.allocate_runs(counts)
        expected = []
        for c in counts:
            expected += self.ref.allocate(c)
            assert cached.pop(0) == self.ref.num_cached_free
        assert blocks == expected
        self.held.append((blocks, None))

    def check(self) -> None:
        new, ref = self.new, self.ref
        assert (new.num_free, new.num_cached_free, new.num_evicted) == (
            ref.num_free, ref.num_cached_free, ref.num_evicted)
        assert new.free_queue == list(ref.free_queue)
        assert new.block_hash == ref.block_hash
        assert new.cached == ref.cached
        for hashes, n in self.chains:
            hits = new.lookup(hashes, n, BS)
            assert hits == ref.lookup(hashes, n, BS)
            assert [new.owner[b] for b in hits] == [ref.owner[b] for b in hits]
            limit = (n - 1) // BS
            assert new.lost(hashes, len(hits), limit) == ref.lost(hashes, len(hits), limit)


@pytest.mark.parametrize(("max_held", "small"), [(None, 0), (2, 0), (None, 3)])
@settings(max_examples=200, deadline=None)
@given(ops=operations, num_blocks=st.integers(4, 14))
def test_the_array_pool_matches_the_reference(max_held, small, ops, num_blocks):
    both = Both(num_blocks, max_held, small)
    for op, *args in ops:
        getattr(both, op)(*args)
        both.check()


def test_a_continued_run_a_copy_and_an_eviction_inside_a_run():
    both = Both(6, None)
    both.admit(([1, 2], 0, True))  # A: blocks 0, 1 (one run from position 0)
    both.grow(0)  # A decodes a block's worth: block 2 at position 2, the same run continued
    (run,) = both.new.index.heads[block_hashes([1, 2], 8, 8, BS)[0]]
    assert run.blocks == [0, 1, 2]
    both.admit(([1, 2], 0, False))  # B: hits block 0 (never the last token), its own block 3 for position 1...
    both.register_pending()  # ...registered after: a copy of A's block 1 (P6), which still serves
    h1 = block_hashes([1, 2], 8, 8, BS)[1]
    assert both.new.cached[h1] == [1, 3] and both.new.lookup(block_hashes([1, 2, 3], 12, 12, BS), 12, BS) == [0, 1]
    both.free(0)  # A's blocks 1 and 2 go back hashed (block 0 B still holds)
    both.decode([3])  # three blocks taken: 4, 5 and A's block 2, evicted from the middle of A's run's cache
    both.check()
    assert not both.new.hashed[2] and both.new.hashed[1] and run.blocks == [0, 1, 2]
    both.free(0)  # B's blocks back, behind A's block 1 (free queue: 1, 3, 0)
    both.decode([1])  # block 1 taken: evicted, and B's copy (block 3) serves its hash
    both.check()
    assert both.new.free_queue == [3, 0] and both.new.cached[h1] == [3]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["front", "back", "pop", "pop_one", "remove"]), st.integers(0, 5)),
                max_size=300))
@example([("pop", 5), ("back", 4), ("remove", 2), ("pop_one", 0), ("front", 1)] * 12)  # (re-centred)
def test_the_free_queue_keeps_a_doubly_linked_lists_order(ops):
    # the array queue (holes, pushes at both ends, re-centred when an end runs out) against an OrderedDict
    import numpy as np

    n = 6
    queue, ref = FreeQueue(n), OrderedDict.fromkeys(range(n))
    out: list[int] = []  # blocks taken, in the order taken
    for op, k in ops:
        if op in ("front", "back") and out:
            blocks = out[-min(k + 1, len(out)):]
            del out[-len(blocks):]
            (queue.push_front if op == "front" else queue.push_back)(np.array(blocks))
            for b in (reversed(blocks) if op == "front" else blocks):
                ref[b] = None
                ref.move_to_end(b, last=op == "back")
        elif op == "pop" and ref:
            m = min(k, len(ref))
            taken = queue.pop(m).tolist()
            assert taken == [ref.popitem(last=False)[0] for _ in range(m)]
            out += taken
        elif op == "pop_one" and ref:
            out.append(queue.pop_one())
            assert out[-1] == ref.popitem(last=False)[0]
        elif op == "remove" and ref:
            b = list(ref)[k % len(ref)]
            queue.remove(np.array([b]))
            del ref[b]
            out.append(b)
        assert queue.order() == list(ref)
