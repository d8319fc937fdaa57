"""The waiting queue: first come first served, or vLLM's priority order."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from servesim.engine.request import RequestState


def priority_key(s: RequestState) -> tuple[int, float, int]:
    """vLLM's request order under the priority policy: (priority, arrival_time, request_id), where vLLM stamps
    `arrival_time` when it creates the request, so it strictly increases in arrival order and the id never
    decides. Requests join in (arrival_time, workload index) order, so the index stands for that stamp: two
    requests of one priority arriving in one step keep workload order (never id-string order)."""
    return (s.request.priority, s.request.arrival_time, s.index)


class FCFSQueue(deque):
    """Arrival order; a preempted request goes back to the head. A deque itself, so len() and iteration are C."""

    __slots__ = ()
    add = deque.append
    push_front = deque.appendleft  # a preempted request goes back to the head of the queue
    pop = deque.popleft

    def peek(self) -> RequestState:
        return self[0]


class PriorityQueue:
    __slots__ = ("_h",)

    def __init__(self) -> None:
        self._h: list[tuple[int, float, int, RequestState]] = []  # priority_key(s) + (s,): the index is unique

    def add(self, s: RequestState) -> None:
        r = s.request
        heapq.heappush(self._h, (r.priority, r.arrival_time, s.index, s))

    push_front = add  # a preempted request goes back into the priority order

    def peek(self) -> RequestState:
        return self._h[0][3]

    def pop(self) -> RequestState:
        return heapq.heappop(self._h)[3]

    def __len__(self) -> int:
        return len(self._h)

    def __iter__(self) -> Iterator[RequestState]:
        return (item[3] for item in sorted(self._h))


def make_queue(policy: str) -> FCFSQueue | PriorityQueue:
    return PriorityQueue() if policy == "priority" else FCFSQueue()
