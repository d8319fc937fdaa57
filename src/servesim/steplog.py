"""Compact per-step arrays: what metrics need from every step, at a few bytes per step.

Kept at every record level, so a run that keeps no `StepRecord`s (record="summary") still has batch sizes,
tokens per step and KV use over time. Steady stretches append whole ranges at once.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True, eq=False)
class StepArrays:
    start_time: np.ndarray  # seconds
    duration: np.ndarray  # seconds
    num_scheduled: np.ndarray  # requests in the step
    num_tokens: np.ndarray
    prefill_tokens: np.ndarray
    num_decodes: np.ndarray
    free_blocks_after_schedule: np.ndarray  # -1 when KV is unlimited
    num_running_after: np.ndarray
    num_waiting_after: np.ndarray
    num_preempted: np.ndarray
    usable_blocks: int | None

    def __len__(self) -> int:
        return len(self.start_time)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StepArrays):
            return NotImplemented
        return self.usable_blocks == other.usable_blocks and all(
            np.array_equal(getattr(self, f), getattr(other, f)) for f in self.__slots__ if f != "usable_blocks")

    __hash__ = None


class StepLog:
    """Start, duration and free blocks per step; the other columns per run of steps that share them (one step, or
    a steady stretch whose last step differs only in `num_running_after`), expanded when frozen."""

    __slots__ = ("_start", "_duration", "_free", "_runs")

    RUN_COLUMNS = ("length", "num_scheduled", "num_tokens", "prefill_tokens", "num_decodes", "num_running_after",
                   "num_waiting_after", "num_preempted", "num_running_after_last")

    def __init__(self) -> None:
        self._start, self._duration = array("d"), array("d")
        self._free = array("i")  # int32: 4 bytes a value
        self._runs = array("i")  # one row of RUN_COLUMNS per run, flat

    def add(self, start: float, duration: float, num_scheduled: int, num_tokens: int, prefill_tokens: int,
            num_decodes: int, free_blocks: int | None, running: int, waiting: int, preempted: int) -> None:
        self._start.append(start)
        self._duration.append(duration)
        self._free.append(-1 if free_blocks is None else free_blocks)
        self._runs.extend((1, num_scheduled, num_tokens, prefill_tokens, num_decodes, running, waiting, preempted,
                           running))

    def extend(self, starts: list[float], durations: list[float], n: int, free_blocks: list[int],
               running_last: int, waiting: int) -> None:
        """A steady stretch: k steps of n one-token decodes; `running_last` requests run after its last step."""
        self._start.extend(starts)
        self._duration.extend(durations)
        self._free.extend(free_blocks)
        self._runs.extend((len(starts), n, n, 0, n, n, waiting, 0, running_last))

    def freeze(self, usable_blocks: int | None) -> StepArrays:
        f = [np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0) for a in (self._start, self._duration)]
        width = len(self.RUN_COLUMNS)
        runs = (np.frombuffer(self._runs, dtype=np.int32) if len(self._runs) else np.zeros(0, np.int32))
        runs = runs.reshape(-1, width)
        length = runs[:, 0]
        cols = {name: np.repeat(runs[:, i], length) for i, name in enumerate(self.RUN_COLUMNS[1:-1], start=1)}
        if len(length):
            cols["num_running_after"][np.cumsum(length) - 1] = runs[:, -1]
        free = np.frombuffer(self._free, dtype=np.int32) if len(self._free) else np.zeros(0, np.int32)
        return StepArrays(*f, cols["num_scheduled"], cols["num_tokens"], cols["prefill_tokens"], cols["num_decodes"],
                          free, cols["num_running_after"], cols["num_waiting_after"], cols["num_preempted"],
                          usable_blocks)
