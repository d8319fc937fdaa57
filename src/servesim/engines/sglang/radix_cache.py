"""SGLang's radix prefix cache (pinned: SGLang 0.5.23, `srt/mem_cache/radix_cache.py`): a token-level tree of
cached KV, deduplicated on insert, evicted leaf by leaf.

Unlike vLLM's block cache (`servesim.engines.vllm.block_pool`) a hit is counted in tokens, not full blocks (page 1), and
the cached tokens are not in the allocator's free count: a finished request's KV moves into the tree, where it is
*evictable* (no running request locks it) until an allocation needs the room and the least recently used leaves
go (`evict`). A node's `lock` counts the running requests whose matched prefix runs through it (SGLang's
`lock_ref`). Keys are tuples of token ids; a request with no spelled tokens gets a key no other request shares.
Rules as read in SGLang 0.5.23's `mem_cache/radix_cache.py` (see docs/sglang.md).

SGLang collects every evictable leaf into a heap at each eviction; servesim keeps one heap across evictions
instead (`heap`), with an entry pushed whenever a node becomes an unlocked leaf or is touched as one, and entries
that no longer hold (the node locked, grown a child, touched since or evicted) skipped when they come up. Two
leaves never share an access time (one walk touches one path, and a new leaf is stamped after it, as SGLang's
clock reads later for a node made after the walk), so the order is the same: the least recently used evictable
leaf first (tests/test_sglang_rules.py checks it against a heap of all leaves).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class Node:
    key: tuple = ()
    parent: Node | None = None
    children: dict = field(default_factory=dict)  # first token -> child
    lock: int = 0
    last_access: int = 0


class RadixCache:
    """Counts only: the tree knows how many tokens each node holds, not which KV slots (servesim keeps no slots)."""

    __slots__ = ("root", "evictable", "protected", "clock", "heap", "nodes", "pushes", "page_size")

    def __init__(self, page_size: int = 1) -> None:
        # page_size > 1: keys are matched and inserted in whole pages, a node's children keyed by their first page
        # (SGLang's paged radix cache: `_key_match_paged`, page-aligned keys)
        self.page_size = page_size
        self.root = Node()
        self.root.lock = 1  # the root is never evicted
        self.evictable = 0  # tokens in nodes no running request locks
        self.protected = 0  # tokens in locked nodes
        self.clock = 0  # access order (SGLang: time.monotonic); ties never happen
        self.heap: list[tuple[int, int, Node]] = []  # (last access, push order, node): candidate leaves
        self.nodes = 0  # nodes in the tree, the root aside (to keep the heap's stale entries few)
        self.pushes = 0  # the heap's tie-breaker (two entries of one node at one access time)

    def _offer(self, node: Node) -> None:
        """`node` may be an evictable leaf now: give the heap an entry at its access time."""
        if not node.children and not node.lock:
            self.pushes += 1
            heapq.heappush(self.heap, (node.last_access, self.pushes, node))
            if len(self.heap) > 4 * self.nodes + 64:
                self._compact()

    def _compact(self) -> None:
        """Drop the stale entries (one per node at most stays)."""
        self.heap = [e for e in self.heap if _holds(e)]
        heapq.heapify(self.heap)

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _child(self, key, n: int):
        """The children's key of `key` from token n: that token, or (pages) the page it starts."""
        ps = self.page_size
        return _token(key, n) if ps == 1 else tuple(_part(key, n, n + ps))

    def _shared(self, edge, key, n: int, end: int) -> int:
        """Tokens `edge` shares with key[n:end], in whole pages."""
        k, ps = _common(edge, key, n, end), self.page_size
        return k if ps == 1 else k // ps * ps

    def _aligned(self, end: int) -> int:
        ps = self.page_size
        return end if ps == 1 else end // ps * ps

    def match(self, key: tuple, end: int | None = None) -> tuple[int, Node]:
        """The longest cached prefix of `key` (of its first `end` tokens): its length and the node it ends in (a
        node is split there)."""
        node, n, t = self.root, 0, self._tick()
        node.last_access = t
        end = self._aligned(len(key) if end is None else end)
        while n < end:
            child = node.children.get(self._child(key, n))
            if child is None:
                break
            child.last_access = t
            k = self._shared(child.key, key, n, end)
            if k < len(child.key):
                child = self._split(child, k)
                n += k
                node = child
                break
            n += k
            node = child
        self._offer(node)
        return n, node

    def peek(self, key: tuple, end: int) -> tuple[int, int]:
        """What match(key, end) then lock() would give, touching nothing: the cached prefix's length, and the
        tokens the lock would take out of the evictable count (its path's unlocked nodes; a node the match ends
        inside counts only the matched part, as the split would leave it)."""
        node, n, unlocked = self.root, 0, 0
        end = self._aligned(end)
        while n < end:
            child = node.children.get(self._child(key, n))
            if child is None:
                break
            k = self._shared(child.key, key, n, end)
            if not child.lock:
                unlocked += k
            n += k
            if k < len(child.key):
                break
            node = child
        return n, unlocked

    def _split(self, child: Node, k: int) -> Node:
        """Cut `child`'s edge after k tokens; the new upper node keeps the lock and the access time."""
        key = child.key
        upper = Node(_part(key, 0, k), child.parent, {self._child(key, k): child}, child.lock, child.last_access)
        child.parent.children[self._child(key, 0)] = upper
        self.nodes += 1
        child.key, child.parent = _part(key, k, len(key)), upper
        self._offer(child)  # touched on the way here: its access time may be new
        return upper

    def insert(self, key: tuple, end: int | None = None, below: tuple[Node, int] | None = None) -> int:
        """Insert `key` (its first `end` tokens; all their KV computed); returns how many of its first tokens
        were already cached: the caller frees its own copies of those (dedup). New tokens arrive unlocked
        (evictable). `below`: a node known to end that many tokens into `key` (a request's locked prefix: a lock
        keeps its path), where the walk may start (the path above it touched as the walk down would)."""
        return self._insert(key, len(key) if end is None else end, below)[0]

    def insert_split(self, key: tuple, end: int, prefix: int, below: tuple[Node, int] | None = None
                     ) -> tuple[int, Node]:
        """insert(key, end), then insert(key, prefix) for 0 < prefix < end (SGLang's checkpoint_into_tree: a
        request's prompt and outputs, then its prompt again, so that its outputs are a leaf of their own and its
        prompt's path is touched after them); returns insert's count and the node the key ends in. The second
        walk climbs from that node instead of descending from the root: the same nodes, split and stamped alike."""
        n, node = self._insert(key, end, below)
        self.touch_prefix(node, self._aligned(end), prefix)
        return n, node

    def touch_prefix(self, node: Node, depth: int, prefix: int) -> None:
        """`node` ends `depth` tokens into its key: split its path at `prefix` (a node spanning it is cut there)
        and stamp the path from there up, one access later (an insert of the key's first `prefix` tokens)."""
        t = self._tick()
        while depth - len(node.key) >= prefix:
            depth -= len(node.key)
            node = node.parent
        if depth > prefix:
            node.last_access = t  # (the insert's walk touches it before cutting it: the upper part keeps t)
            node = self._split(node, len(node.key) - (depth - prefix))
        root = self.root
        while node is not root:
            node.last_access = t
            node = node.parent

    def insert_and_match(self, key: tuple, end: int | None = None, below: tuple[Node, int] | None = None
                         ) -> tuple[int, Node]:
        """insert(key, end), then match(key, end): the tokens that were cached already, and the node the key now
        ends in. One walk down: after the insert the key ends exactly at a node, so the match is its path
        touched again (with a later access time)."""
        n, node = self._insert(key, len(key) if end is None else end, below)
        t, root = self._tick(), self.root
        end = node
        while node is not root:
            node.last_access = t
            node = node.parent
        root.last_access = t
        self._offer(end)
        return n, end

    def _insert(self, key: tuple, end: int, below: tuple[Node, int] | None = None) -> tuple[int, Node]:
        node, n, t = self.root, 0, self._tick()
        end = self._aligned(end)
        if below is not None and 0 < below[1] <= end:
            node, n = below
            up = node
            while up is not self.root:
                up.last_access = t
                up = up.parent
        while n < end:
            child = node.children.get(self._child(key, n))
            if child is None:
                new = Node(_part(key, n, end), node, {}, 0, self._tick())  # after the path (SGLang: later)
                node.children[self._child(key, n)] = new
                self.evictable += len(new.key)
                self.nodes += 1
                self._offer(new)
                return n, new
            child.last_access = t
            k = self._shared(child.key, key, n, end)
            if k < len(child.key):
                child = self._split(child, k)
            n += k
            node = child
        self._offer(node)
        return n, node

    def lock(self, node: Node) -> None:
        while node is not self.root:
            if node.lock == 0:
                self.evictable -= len(node.key)
                self.protected += len(node.key)
            node.lock += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        while node is not self.root:
            node.lock -= 1
            if node.lock == 0:
                self.evictable += len(node.key)
                self.protected -= len(node.key)
                self._offer(node)
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Free unlocked leaves, least recently used first, until `num_tokens` are freed (or none is left);
        returns the tokens freed (whole leaves: it can be more than asked)."""
        heap, root, freed = self.heap, self.root, 0
        while freed < num_tokens and heap:
            entry = heapq.heappop(heap)
            if not _holds(entry):
                continue
            leaf = entry[2]
            parent = leaf.parent
            del parent.children[self._child(leaf.key, 0)]
            leaf.parent = None  # evicted: its other entries no longer hold
            self.nodes -= 1
            freed += len(leaf.key)
            self.evictable -= len(leaf.key)
            if parent is not root:
                self._offer(parent)
        return freed

    def leaves(self):
        """The tree's leaves (for tests and checks)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            if not node.children and node is not self.root:
                yield node
            stack.extend(node.children.values())

    @property
    def size(self) -> int:
        return self.evictable + self.protected


class TokenRun:
    """`first` n_first times, then `then` n_then times: a key as a tuple of those tokens, in O(1) space (a request
    with no spelled tokens: its own token per prompt token, then its outputs). Slices are runs; a run equals any
    sequence of the same tokens."""

    __slots__ = ("first", "n_first", "then", "n_then")

    def __init__(self, first: object, n_first: int, then: object, n_then: int) -> None:
        self.first, self.n_first, self.then, self.n_then = first, n_first, then, n_then

    def __len__(self) -> int:
        return self.n_first + self.n_then

    def __getitem__(self, i):
        if type(i) is int and 0 <= i:  # the tree's usual question: a child's first token
            if i < self.n_first:
                return self.first
            if i < self.n_first + self.n_then:
                return self.then
        n = self.n_first + self.n_then
        if isinstance(i, slice):
            start, stop, step = (i.start or 0, i.stop, 1) if i.step is None and (i.start or 0) >= 0 and (
                i.stop is not None and 0 <= i.stop <= n) else i.indices(n)
            if step != 1:
                return tuple(self)[i]
            stop = max(start, stop)
            a = max(0, min(stop, self.n_first) - start)
            return TokenRun(self.first, a, self.then, stop - start - a)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("token run index out of range")
        return self.first if i < self.n_first else self.then

    def __iter__(self):
        yield from (self.first,) * self.n_first
        yield from (self.then,) * self.n_then

    def _segments(self) -> tuple:
        segs = [(t, c) for t, c in ((self.first, self.n_first), (self.then, self.n_then)) if c]
        if len(segs) == 2 and segs[0][0] == segs[1][0]:
            segs = [(segs[0][0], segs[0][1] + segs[1][1])]
        return tuple(segs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenRun):
            if (self.n_first == other.n_first and self.n_then == other.n_then and self.first == other.first
                    and self.then == other.then):
                return True
            return self._segments() == other._segments()
        if isinstance(other, tuple):
            return len(other) == len(self) and tuple(self) == other
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"TokenRun({self.first!r} x {self.n_first}, {self.then!r} x {self.n_then})"


def _token(key, n: int):
    """key[n] (a run's without the general indexing's checks: the tree's most frequent question)."""
    if type(key) is TokenRun:
        return key.first if n < key.n_first else key.then
    return key[n]


def _part(key, start: int, stop: int):
    """key[start:stop], 0 <= start <= stop <= len(key) (a run's made directly)."""
    if type(key) is TokenRun:
        a = max(0, min(stop, key.n_first) - start)
        return TokenRun(key.first, a, key.then, stop - start - a)
    return key[start:stop]


def _holds(entry: tuple[int, int, Node]) -> bool:
    """A heap entry still names an evictable leaf at its access time."""
    node = entry[2]
    return (node.parent is not None and not node.children and not node.lock
            and node.last_access == entry[0])


def _common(edge: tuple, key: tuple, start: int, end: int) -> int:
    """Tokens `edge` shares with `key[start:end]`, from the first."""
    n = min(len(edge), end - start)
    if type(edge) is TokenRun and type(key) is TokenRun:
        return _runs_common(edge, key, start, n)
    a = edge if n == len(edge) else edge[:n]
    b = key if start == 0 and n == len(key) else key[start:start + n]
    if a == b:  # the usual case, compared in C
        return n
    if isinstance(a, TokenRun) and isinstance(b, TokenRun):
        return _run_common(a._segments(), b._segments())
    i = 0
    while i < n and edge[i] == key[start + i]:
        i += 1
    return i


def _runs_common(edge: TokenRun, key: TokenRun, start: int, n: int) -> int:
    """Tokens `edge` shares with key[start:start + n] from the first, stepping from one run boundary to the next
    (at most four steps, no slices made)."""
    i, ef, kf = 0, edge.n_first, key.n_first
    while i < n:
        j = start + i
        if (edge.first if i < ef else edge.then) != (key.first if j < kf else key.then):
            return i
        i += min(ef - i if i < ef else n - i, kf - j if j < kf else n - i, n - i)
    return n


def _run_common(a: tuple, b: tuple) -> int:
    """Tokens two runs of the same length share from the first, from their segments (adjacent ones differ)."""
    i = 0
    for (ta, ca), (tb, cb) in zip(a, b):
        if ta != tb:
            return i
        if ca != cb:  # one of them changes token first, the other does not
            return i + min(ca, cb)
        i += ca
    return i
