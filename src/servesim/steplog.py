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
    __slots__ = ("_f", "_i")

    FLOATS = ("start_time", "duration")
    INTS = ("num_scheduled", "num_tokens", "prefill_tokens", "num_decodes", "free_blocks_after_schedule",
            "num_running_after", "num_waiting_after", "num_preempted")

    def __init__(self) -> None:
        self._f = [array("d") for _ in self.FLOATS]
        self._i = [array("i") for _ in self.INTS]  # int32: 4 bytes a value, 18 M steps in ~0.9 GB

    def add(self, start: float, duration: float, num_scheduled: int, num_tokens: int, prefill_tokens: int,
            num_decodes: int, free_blocks: int | None, running: int, waiting: int, preempted: int) -> None:
        f, i = self._f, self._i
        f[0].append(start)
        f[1].append(duration)
        for col, v in zip(i, (num_scheduled, num_tokens, prefill_tokens, num_decodes,
                              -1 if free_blocks is None else free_blocks, running, waiting, preempted)):
            col.append(v)

    def extend(self, starts: list[float], durations: list[float], n: int, free_blocks: list[int],
               running_last: int, waiting: int) -> None:
        """A steady stretch: k steps of n one-token decodes; `running_last` requests run after its last step."""
        k = len(starts)
        self._f[0].extend(starts)
        self._f[1].extend(durations)
        const, zero = array("i", [n]) * k, array("i", [0]) * k
        running = array("i", [n]) * k
        running[-1] = running_last
        for col, v in zip(self._i, (const, const, zero, const, array("i", free_blocks), running,
                                    array("i", [waiting]) * k, zero)):
            col.extend(v)

    def freeze(self, usable_blocks: int | None) -> StepArrays:
        f = [np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0) for a in self._f]
        i = [np.frombuffer(a, dtype=np.int32) if len(a) else np.zeros(0, np.int32) for a in self._i]
        return StepArrays(*f, *i, usable_blocks)
