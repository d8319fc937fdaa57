"""The waiting queue's order at each prefill attempt (pinned: SGLang 0.5.23, `srt/managers/schedule_policy.py`,
`SchedulePolicy.calc_priority`): fcfs keeps it;
lof puts the longest outputs first; lpm the longest radix match first, a request sharing a prefix with an earlier
waiting one last; random shuffles it with the scheduler's seeded generator; dfs-weight walks the radix tree,
heavier subtrees first. With priority scheduling fcfs orders by (priority, entry time) and lof by (priority,
output length), a larger priority first unless schedule_low_priority_values_first (P1).

Rule H, the radix cache's recency: lpm matches every waiting request's whole key (prompt and outputs, no cap) at
each attempt, splitting nodes and stamping paths; an order that does not match (fcfs, lof, random, or lpm above
128 waiting) refreshes instead: every 32nd attempt it walks the first 128 waiting requests' keys, the head last
(`SchedulePolicy._touch_waiting_prefixes`, `schedule_policy.py` 280-302; SGLANG_ENABLE_WAITING_PREFIX_REFRESH,
on by default), so the LRU evicts in reverse queue order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.request import RequestState
from servesim.engines.sglang.radix_cache import RadixCache

if TYPE_CHECKING:
    from servesim.engines.sglang.scheduler import SGLangScheduler

LPM_MAX_QUEUE = 128  # lpm falls back to fcfs above this many waiting requests (WAITING_QUEUE_PREFIX_MATCH_MAX)
REFRESH_INTERVAL = 32  # WAITING_PREFIX_REFRESH_INTERVAL: one attempt in so many refreshes the waiting prefixes
IN_BATCH_PREFIX = 32  # lpm's in-batch prefix thresholds (IN_BATCH_PREFIX_CACHING_*_THRESHOLD)


def order_waiting(sched: SGLangScheduler) -> None:
    """Sort `sched.waiting` by its schedule_policy, in place."""
    policy, waiting, sg, radix = sched.sg.schedule_policy, sched.waiting, sched.sg, sched.radix
    sign = sg.priority_sign
    matched = False  # a cache-aware order walked every waiting request's key
    if policy == "fcfs" or (policy in ("lpm", "dfs-weight") and radix is None):  # (a policy the tree
        # cannot serve is fcfs: _validate_and_adjust_policy)
        if sg.enable_priority_scheduling:  # _sort_by_priority_and_fcfs (schedule_policy.py 232-235)
            waiting.sort(key=lambda s: (s.request.priority * sign, sched.entry[s]))
    elif policy == "lof":
        if sg.enable_priority_scheduling:
            waiting.sort(key=lambda s: (s.request.priority * sign, -s.request.output_len))
        else:
            waiting.sort(key=lambda s: -s.request.output_len)
    elif policy == "lpm" and len(waiting) <= LPM_MAX_QUEUE:
        matched = True
        shadow, later = RadixCache(), set()
        match = {}
        for s in waiting:
            key = sched.key(s, s.num_tokens)
            match[s] = radix.match(key)[0]  # (its whole key: match_kv_cache without a cap)
            if match[s] <= IN_BATCH_PREFIX:
                if shadow.match(key)[0] >= IN_BATCH_PREFIX:
                    later.add(s)
                else:
                    shadow.insert(key)
        # (sorted by num_matched_prefix_tokens: the match capped at all but the last token, _compute_max_prefix_len)
        waiting.sort(key=lambda s: float("inf") if s in later else -min(match[s], s.num_tokens - 1))
    elif policy == "random":
        sched.rng.shuffle(waiting)
    elif policy == "dfs-weight":
        matched = True
        waiting[:] = dfs_weight_order(sched, waiting)
    if not matched and radix is not None and waiting:
        calls = sched.prefix_refreshes
        sched.prefix_refreshes = calls + 1
        if not calls % REFRESH_INTERVAL:
            refresh_waiting_prefixes(sched)


def refresh_waiting_prefixes(sched: SGLangScheduler) -> None:
    """_touch_waiting_prefixes (every REFRESH_INTERVAL-th attempt): match the first LPM_MAX_QUEUE waiting
    requests' whole keys, the head last (a request whose key nobody can share is skipped: it would touch the root
    only)."""
    for s in reversed(sched.waiting[:LPM_MAX_QUEUE]):
        if not sched.private(s):
            sched.radix.match(sched.full_key(s), s.num_tokens)


def dfs_weight_order(sched: SGLangScheduler, waiting: list[RequestState]) -> list[RequestState]:
    """dfs-weight: each waiting request weighs on the node its cached prefix ends in; the tree is walked depth
    first, heavier subtrees first (ties in the tree's child order), a node's own requests after its
    subtrees (in queue order)."""
    at: dict[int, list[RequestState]] = {}
    for s in waiting:
        node = sched.radix.root if sched.private(s) else sched.radix.match(sched.key(s, s.num_tokens)[:-1])[1]
        at.setdefault(id(node), []).append(s)
    weight: dict[int, int] = {}
    post, stack = [], [sched.radix.root]
    while stack:  # every node, parents before children; summed children first below
        node = stack.pop()
        post.append(node)
        stack.extend(node.children.values())
    for node in reversed(post):
        weight[id(node)] = len(at.get(id(node), ())) + sum(weight[id(c)] for c in node.children.values())
    order: list[RequestState] = []
    visit = [(sched.radix.root, False)]
    while visit:
        node, done = visit.pop()
        if done:
            order += at.get(id(node), ())
            continue
        visit.append((node, True))
        children = sorted(node.children.values(), key=lambda c: -weight[id(c)])
        visit.extend((c, False) for c in reversed(children))
    return order
