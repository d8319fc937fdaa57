"""Every request's timeline as columns: the `requests` of a `SimResult`.

A sequence of `RequestTimeline`s (indexing and iterating build them on the fly) whose data are numpy columns and
one flat array of token runs: ~100 bytes a request instead of ~300 as Python objects, and metrics read the
columns directly (a million requests: no pass over a million objects).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from servesim.engine.records import RequestTimeline, TokenClock
from servesim.engine.token_runs import expand

FLOAT_COLUMNS = ("arrival_time", "first_scheduled_time", "finish_time", "time_preempted")
INT_COLUMNS = ("prompt_len", "output_len", "priority", "num_preemptions", "num_prefill_chunks", "num_cached_tokens",
               "cached_from")  # cached_from: the index of the request whose blocks served the hits (-1: none)
# the tokens each request produced (speculative decoding: a step can bring several); None where every token step
# brought one (a cluster's, a hand-made result's)
OUTPUTS = "num_output_tokens"


class Timelines(Sequence[RequestTimeline]):
    """Requests in workload order. `first_scheduled_time` and `finish_time` are NaN where the timeline has None;
    request i's tokens are runs[run_offsets[i]:run_offsets[i + 1]] (first step, count, first step, count, ...),
    over the clock's live steps (`servesim.engine.token_runs`); `step_runs()` gives them as runs of consecutive
    steps."""

    __slots__ = ("ids", *FLOAT_COLUMNS, *INT_COLUMNS, OUTPUTS, "run_offsets", "runs", "clock", "_steps")

    def __init__(self, ids: list[str], columns: dict[str, np.ndarray], run_offsets: np.ndarray, runs: np.ndarray,
                 clock: TokenClock | None) -> None:
        self.ids = ids
        for name in (*FLOAT_COLUMNS, *INT_COLUMNS):
            setattr(self, name, columns[name])
        self.num_output_tokens = columns.get(OUTPUTS)
        self.run_offsets, self.runs, self.clock = run_offsets, runs, clock
        self._steps: tuple[np.ndarray, np.ndarray, TokenClock | None] | None = None

    def step_runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(runs, run_offsets) with every run of consecutive steps: the runs expanded over the steps they skip
        (nobody decoded in them), built once."""
        if self._steps is None:
            clock = self.clock
            if clock is None or clock.skip is None:
                self._steps = (self.runs, self.run_offsets, clock)
            else:  # (their clock skips nothing)
                self._steps = (*expand(self.runs, self.run_offsets, clock.skip), TokenClock(clock.ends))
        return self._steps[:2]

    @classmethod
    def of(cls, timelines: Sequence[RequestTimeline]) -> Timelines:
        """Columns from timeline objects (results built by hand); a `Timelines` is returned as it is."""
        if isinstance(timelines, Timelines):
            return timelines
        nan = float("nan")
        columns = {
            "arrival_time": [r.arrival_time for r in timelines],
            "first_scheduled_time": [nan if r.first_scheduled_time is None else r.first_scheduled_time
                                     for r in timelines],
            "finish_time": [nan if r.finish_time is None else r.finish_time for r in timelines],
            "time_preempted": [r.time_preempted for r in timelines],
            **{name: [getattr(r, name) for r in timelines] for name in INT_COLUMNS[:-1]},
        }
        index = {r.id: i for i, r in enumerate(timelines)}
        columns["cached_from"] = [-1 if r.cached_from is None else index[r.cached_from] for r in timelines]
        if any(r.num_output_tokens is not None for r in timelines):
            columns[OUTPUTS] = [r.num_tokens for r in timelines]
        lengths = [len(r.token_steps) for r in timelines]
        runs = [v for r in timelines for v in r.token_steps]
        clock = next((r.clock for r in timelines if r.clock is not None), None)
        if clock is not None and clock.skip is not None:  # token_steps are runs of consecutive steps
            clock = TokenClock(clock.ends)
        return cls.from_lists([r.id for r in timelines], columns, lengths, runs, clock)

    @classmethod
    def from_lists(cls, ids: list[str], columns: dict[str, list], run_lengths: list[int], runs: list[int],
                   clock: TokenClock | None) -> Timelines:
        arrays = {name: np.array(columns[name], dtype=np.float64) for name in FLOAT_COLUMNS}
        missing = {"num_cached_tokens": 0, "cached_from": -1}  # (no prefix cache)
        arrays.update({name: np.array(columns[name], dtype=np.int64) if name in columns
                       else np.full(len(ids), missing[name], np.int64) for name in INT_COLUMNS})
        if OUTPUTS in columns:
            arrays[OUTPUTS] = np.array(columns[OUTPUTS], dtype=np.int64)
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(run_lengths, out=offsets[1:])
        return cls(ids, arrays, offsets, np.array(runs, dtype=np.int64), clock)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        first, finish = self.first_scheduled_time[i], self.finish_time[i]
        runs, offsets = self.step_runs()
        return RequestTimeline(
            self.ids[i], float(self.arrival_time[i]), int(self.prompt_len[i]), int(self.output_len[i]),
            None if first != first else float(first),
            tuple(runs[offsets[i]:offsets[i + 1]].tolist()),
            None if finish != finish else float(finish), int(self.num_preemptions[i]), int(self.priority[i]),
            int(self.num_prefill_chunks[i]), float(self.time_preempted[i]), self._steps[2],
            int(self.num_cached_tokens[i]), None if self.cached_from[i] < 0 else self.ids[self.cached_from[i]],
            None if self.num_output_tokens is None else int(self.num_output_tokens[i]),
        )

    def __iter__(self) -> Iterator[RequestTimeline]:
        return (self[i] for i in range(len(self)))

    def index_of(self, request_id: str) -> int:
        return self.ids.index(request_id)

    @property
    def finished(self) -> np.ndarray:
        return ~np.isnan(self.finish_time)

    def first_token_time(self) -> np.ndarray:
        """Each request's first token time (NaN without tokens)."""
        out = np.full(len(self), np.nan)
        has = self.run_offsets[1:] > self.run_offsets[:-1]
        if has.any():
            out[has] = self.clock.ends[self.runs[self.run_offsets[:-1][has]]]
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, Timelines):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        if not isinstance(other, Timelines):
            return NotImplemented
        # the same tokens at the same steps, however the runs are kept (over live steps or consecutive ones)
        mine, theirs = self.step_runs(), other.step_runs()
        return (self.ids == other.ids and self._steps[2] == other._steps[2]
                and all(np.array_equal(getattr(self, c), getattr(other, c), equal_nan=True) for c in FLOAT_COLUMNS)
                and all(np.array_equal(getattr(self, c), getattr(other, c)) for c in INT_COLUMNS)
                and (self.num_output_tokens is None) == (other.num_output_tokens is None)
                and (self.num_output_tokens is None or np.array_equal(self.num_output_tokens, other.num_output_tokens))
                and np.array_equal(mine[1], theirs[1]) and np.array_equal(mine[0], theirs[0]))

    __hash__ = None

    def __repr__(self) -> str:
        return f"Timelines({len(self)} requests)"


def timelines_from_states(states: list, clock: TokenClock, several_per_step: bool = False) -> Timelines:
    """The engine's request states (`RequestState`) as timelines in columns, in workload order; each state goes
    as its row is read (a million requests never hold both)."""
    order = sorted(range(len(states)), key=lambda i: states[i].index)
    nan = float("nan")
    ids, cols, lengths, runs = [], {name: [] for name in (*FLOAT_COLUMNS, *INT_COLUMNS)}, [], []
    arrival, first, finish, preempted = (cols[c] for c in FLOAT_COLUMNS)
    prompt, output, priority, num_preemptions, chunks, cached, cached_from = (cols[c] for c in INT_COLUMNS)
    outputs = None
    if several_per_step:  # (speculative decoding)
        outputs = cols[OUTPUTS] = []
    for i in order:
        s, states[i] = states[i], None
        r = s.request
        ids.append(r.request_id)
        arrival.append(r.arrival_time)
        first.append(nan if s.first_scheduled_time is None else s.first_scheduled_time)
        finish.append(nan if s.finish_time is None else s.finish_time)
        preempted.append(s.time_preempted)
        prompt.append(r.prompt_len)
        output.append(r.output_len)
        priority.append(r.priority)
        num_preemptions.append(s.num_preemptions)
        chunks.append(s.num_prefill_chunks)
        cached.append(max(0, s.first_cached_tokens))
        cached_from.append(s.cached_from)  # a state's index is its workload row
        lengths.append(len(s.token_runs))
        runs += s.token_runs
        if outputs is not None:
            outputs.append(s.num_output_tokens)
    return Timelines.from_lists(ids, cols, lengths, runs, clock)
