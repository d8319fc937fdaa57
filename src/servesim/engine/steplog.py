"""Compact per-step arrays: what metrics need from every step, at a few bytes per step.

Kept at every record level, so a run that keeps no `StepRecord`s (record="summary") still has batch sizes,
tokens per step and KV use over time. Steady stretches append whole ranges at once.
"""

from __future__ import annotations

from array import array

import numpy as np

RUN_COLUMNS = ("length", "num_scheduled", "num_tokens", "prefill_tokens", "num_decodes", "num_running_after",
               "num_waiting_after", "num_preempted", "num_running_after_last")


class StepArrays:
    """Every step's end, duration and free KV blocks; the other columns are kept per run of steps that share them
    (a steady stretch is one run) and expanded to one value per step when read, and a step's start is the previous
    step's end except after an idle gap (kept apart). A long run holds ~25 bytes a step (a million requests:
    ~18 M steps) instead of 56."""

    __slots__ = ("end_time", "duration", "free_blocks_after_schedule", "usable_blocks", "_runs", "_gaps",
                 "cached_free_blocks_after_schedule")

    def __init__(self, end_time: np.ndarray, duration: np.ndarray, free_blocks_after_schedule: np.ndarray,
                 runs: np.ndarray, gaps: tuple[np.ndarray, np.ndarray], usable_blocks: int | None,
                 cached_free_blocks_after_schedule: np.ndarray | None = None) -> None:
        self.end_time = end_time  # seconds: start + duration, the very floats of the engine's clock
        self.duration = duration  # seconds
        self.free_blocks_after_schedule = free_blocks_after_schedule  # -1 when KV is unlimited
        self.usable_blocks = usable_blocks
        self._runs = runs  # one row of RUN_COLUMNS per run
        self._gaps = gaps  # (steps that did not start at the previous end, their starts)
        # prefix caching: the free blocks that still hold cached KV (evictable, counted as free); else None
        self.cached_free_blocks_after_schedule = cached_free_blocks_after_schedule

    @property
    def start_time(self) -> np.ndarray:
        start = np.empty_like(self.end_time)
        start[1:] = self.end_time[:-1]
        index, value = self._gaps
        start[index] = value
        return start

    def _column(self, name: str) -> np.ndarray:
        runs = self._runs
        return np.repeat(runs[:, RUN_COLUMNS.index(name)], runs[:, 0])

    @property
    def num_scheduled(self) -> np.ndarray:  # requests in the step
        return self._column("num_scheduled")

    @property
    def num_tokens(self) -> np.ndarray:
        return self._column("num_tokens")

    @property
    def prefill_tokens(self) -> np.ndarray:
        return self._column("prefill_tokens")

    @property
    def num_decodes(self) -> np.ndarray:
        return self._column("num_decodes")

    @property
    def num_running_after(self) -> np.ndarray:
        col = self._column("num_running_after")
        if col.size:
            col[np.cumsum(self._runs[:, 0]) - 1] = self._runs[:, -1]
        return col

    @property
    def num_waiting_after(self) -> np.ndarray:
        return self._column("num_waiting_after")

    @property
    def num_preempted(self) -> np.ndarray:
        return self._column("num_preempted")

    def runs(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A run column as (value of each run, its length in steps): statistics without expanding it."""
        runs = self._runs
        return runs[:, RUN_COLUMNS.index(name)], runs[:, 0]

    def total(self, name: str) -> int:
        """The sum of a run column over every step, without expanding it."""
        runs = self._runs
        return int(np.dot(runs[:, RUN_COLUMNS.index(name)].astype(np.int64), runs[:, 0]))

    def __len__(self) -> int:
        return len(self.end_time)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StepArrays):
            return NotImplemented
        names = ("end_time", "start_time", "duration", "free_blocks_after_schedule", *RUN_COLUMNS[1:-1])
        return self.usable_blocks == other.usable_blocks and all(
            np.array_equal(getattr(self, f), getattr(other, f)) for f in names)

    __hash__ = None


class StepLog:
    """Appends steps as the engine runs them (see `StepArrays`)."""

    __slots__ = ("_end", "_duration", "_free", "_runs", "_gap_index", "_gap_start", "_cached")

    def __init__(self, prefix_caching: bool = False) -> None:
        self._end, self._duration = array("d"), array("d")
        self._free = array("i")  # int32: 4 bytes a value
        self._runs = array("i")  # one row of RUN_COLUMNS per run, flat
        self._gap_index, self._gap_start = array("q"), array("d")
        self._cached = array("i") if prefix_caching else None  # cached free blocks after each step's schedule

    def _start_at(self, start: float) -> None:
        if not self._end or self._end[-1] != start:
            self._gap_index.append(len(self._end))
            self._gap_start.append(start)

    def add(self, start: float, duration: float, num_scheduled: int, num_tokens: int, prefill_tokens: int,
            num_decodes: int, free_blocks: int | None, running: int, waiting: int, preempted: int,
            cached_free: int | None = None) -> None:
        self._start_at(start)
        if cached_free is not None:
            self._cached.append(cached_free)
        self._end.append(start + duration)
        self._duration.append(duration)
        self._free.append(-1 if free_blocks is None else free_blocks)
        self._runs.extend((1, num_scheduled, num_tokens, prefill_tokens, num_decodes, running, waiting, preempted,
                           running))

    def extend(self, times: list[float], durations: list[float], n: int, free_blocks: list[int],
               running_last: int, waiting: int, cached_free: list[int] | None = None) -> None:
        """A steady stretch: k steps of n one-token decodes, step j from times[j] to times[j + 1];
        `running_last` requests run after its last step."""
        if cached_free is not None:
            self._cached.extend(cached_free)
        end = self._end
        if not end or end[-1] != times[0]:
            self._gap_index.append(len(end))
            self._gap_start.append(times[0])
        end.extend(times[1:])
        self._duration.extend(durations)
        self._free.extend(free_blocks)
        self._runs.extend((len(durations), n, n, 0, n, n, waiting, 0, running_last))

    def __len__(self) -> int:
        return len(self._end)

    def last_free_after_schedule(self) -> int | None:
        """The free KV blocks after the last step's schedule (None with unlimited KV)."""
        v = self._free[-1]
        return None if v < 0 else v

    def freeze(self, usable_blocks: int | None) -> StepArrays:
        def view(a: array, dtype) -> np.ndarray:
            return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)

        return StepArrays(view(self._end, np.float64), view(self._duration, np.float64), view(self._free, np.int32),
                          view(self._runs, np.int32).reshape(-1, len(RUN_COLUMNS)),
                          (view(self._gap_index, np.int64), view(self._gap_start, np.float64)), usable_blocks,
                          None if self._cached is None else view(self._cached, np.int32))
