"""SGLang's radix prefix cache: a token-level tree of cached KV, deduplicated on insert, evicted leaf by leaf.

Unlike vLLM's block cache (`servesim.engine.block_pool`) a hit is counted in tokens, not full blocks (page 1), and
the cached tokens are not in the allocator's free count: a finished request's KV moves into the tree, where it is
*evictable* (no running request locks it) until an allocation needs the room and the least recently used leaves
go (`evict`). A node's `lock` counts the running requests whose matched prefix runs through it (SGLang's
`lock_ref`). Keys are tuples of token ids; a request with no spelled tokens gets a key no other request shares.
Rules as read in SGLang 0.5.23's `mem_cache/radix_cache.py` (see docs/sglang.md).
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

    __slots__ = ("root", "evictable", "protected", "clock")

    def __init__(self) -> None:
        self.root = Node()
        self.root.lock = 1  # the root is never evicted
        self.evictable = 0  # tokens in nodes no running request locks
        self.protected = 0  # tokens in locked nodes
        self.clock = 0  # access order (SGLang: time.monotonic); ties never happen

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def match(self, key: tuple) -> tuple[int, Node]:
        """The longest cached prefix of `key`: its length and the node it ends in (a node is split there)."""
        node, n, t = self.root, 0, self._tick()
        node.last_access = t
        while n < len(key):
            child = node.children.get(key[n])
            if child is None:
                break
            child.last_access = t
            k = _common(child.key, key, n)
            if k < len(child.key):
                child = self._split(child, k)
                n += k
                node = child
                break
            n += k
            node = child
        return n, node

    def _split(self, child: Node, k: int) -> Node:
        """Cut `child`'s edge after k tokens; the new upper node keeps the lock and the access time."""
        upper = Node(child.key[:k], child.parent, {child.key[k]: child}, child.lock, child.last_access)
        child.parent.children[child.key[0]] = upper
        child.key, child.parent = child.key[k:], upper
        return upper

    def insert(self, key: tuple) -> int:
        """Insert `key` (all its tokens' KV computed); returns how many of its first tokens were already cached:
        the caller frees its own copies of those (dedup). New tokens arrive unlocked (evictable)."""
        node, n, t = self.root, 0, self._tick()
        while n < len(key):
            child = node.children.get(key[n])
            if child is None:
                new = Node(key[n:], node, {}, 0, t)
                node.children[key[n]] = new
                self.evictable += len(new.key)
                return n
            child.last_access = t
            k = _common(child.key, key, n)
            if k < len(child.key):
                child = self._split(child, k)
            n += k
            node = child
        return n

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
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Free unlocked leaves, least recently used first, until `num_tokens` are freed (or none is left);
        returns the tokens freed (whole leaves: it can be more than asked)."""
        heap = [(n.last_access, i, n) for i, n in enumerate(self._leaves()) if n.lock == 0]
        heapq.heapify(heap)
        freed, seq = 0, len(heap)  # seq: a tie-breaker in traversal order (deterministic)
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            freed += len(leaf.key)
            self.evictable -= len(leaf.key)
            if parent is not self.root and not parent.children and parent.lock == 0:
                seq += 1
                heapq.heappush(heap, (parent.last_access, seq, parent))
        return freed

    def _leaves(self):
        stack = [self.root]
        while stack:
            node = stack.pop()
            if not node.children and node is not self.root:
                yield node
            stack.extend(node.children.values())

    @property
    def size(self) -> int:
        return self.evictable + self.protected


def _common(edge: tuple, key: tuple, start: int) -> int:
    """Tokens `edge` shares with `key[start:]`, from the first."""
    n = min(len(edge), len(key) - start)
    if edge[:n] == key[start:start + n]:  # the usual case, compared in C
        return n
    i = 0
    while i < n and edge[i] == key[start + i]:
        i += 1
    return i
