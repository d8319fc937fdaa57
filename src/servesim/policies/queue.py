"""The waiting queue: first come first served, or vLLM's priority order."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from servesim.engine.request import RequestState


def priority_key(s: RequestState) -> tuple[int, float, str]:
    """vLLM's request order under the priority policy: (priority, arrival_time, request_id)."""
    return (s.request.priority, s.request.arrival_time, s.request.request_id)


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
        self._h: list[tuple[tuple[int, float, str], int, RequestState]] = []

    def add(self, s: RequestState) -> None:
        heapq.heappush(self._h, (priority_key(s), s.index, s))

    push_front = add  # a preempted request goes back into the priority order

    def peek(self) -> RequestState:
        return self._h[0][2]

    def pop(self) -> RequestState:
        return heapq.heappop(self._h)[2]

    def __len__(self) -> int:
        return len(self._h)

    def __iter__(self) -> Iterator[RequestState]:
        return (item[2] for item in sorted(self._h))


def make_queue(policy: str) -> FCFSQueue | PriorityQueue:
    return PriorityQueue() if policy == "priority" else FCFSQueue()
