"""The request table: a workload as numpy columns, so a million requests cost a few arrays, not a million objects.

Loaders, generators and transforms all produce a `RequestTable`; `to_requests()` turns it into the `Request`s the
engine consumes. Rows are sorted by arrival (ties keep file order); arrival times are seconds.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from servesim.engine.request import Request, unchecked_requests
from servesim.errors import WorkloadError

# Bounds on what a workload can hold; loaders and generators refuse values beyond them with a WorkloadError.
MAX_TOKENS = 2**31 - 1  # a prompt or output length: no context window comes near it; larger is a typo, not a workload
MAX_ARRIVAL_S = 315_576_000  # 10 (Julian) years: arrival times, from the first request, are at most this many seconds
MAX_SYNTHETIC_REQUESTS = 100_000_000  # `--workload random --num-requests`: ~2.4 GB of columns before any simulating

# The canonical file format (`--format servesim`), written by `servesim workload generate`.
SERVESIM_COLUMNS = ("arrival_time", "prompt_len", "output_len", "priority", "session_id", "hash_ids")


@dataclass(frozen=True, slots=True, eq=False)
class RequestTable:
    arrival_time: np.ndarray  # float64 seconds, non-decreasing
    prompt_len: np.ndarray  # int64 >= 1
    output_len: np.ndarray  # int64 >= 1
    row: np.ndarray | None = None  # int64 data row in the source (0-based); the default request id. None: 0..n-1
    priority: np.ndarray | None = None  # int64, lower runs first (vLLM's priority policy)
    session_id: np.ndarray | None = None  # int64 (string ids are numbered in order of first appearance)
    hash_ids: np.ndarray | None = None  # int64 prefix-block hashes of all rows, concatenated (Mooncake)
    hash_offsets: np.ndarray | None = None  # int64, n + 1: row i's hashes are hash_ids[off[i]:off[i + 1]]
    hash_block_size: int | None = None  # tokens per hashed block (Mooncake: 512)
    request_id: np.ndarray | None = None  # object array of str, when the file names its requests
    has_arrivals: bool = True  # False for length-only files: arrival_time is all zeros until arrivals are made
    notes: tuple[str, ...] = ()  # what loading changed or ignored (dropped, sorted, capped): shown to the user

    def __post_init__(self) -> None:
        n = len(self.arrival_time)
        for name in ("prompt_len", "output_len", "row", "priority", "session_id", "request_id"):
            col = getattr(self, name)
            if col is not None and len(col) != n:
                raise ValueError(f"{name} has {len(col)} rows, arrival_time has {n}")
        if (self.hash_ids is None) != (self.hash_offsets is None):
            raise ValueError("hash_ids and hash_offsets go together")
        if self.hash_offsets is not None and len(self.hash_offsets) != n + 1:
            raise ValueError(f"hash_offsets needs {n + 1} entries, has {len(self.hash_offsets)}")
        if self.hash_offsets is not None and self.hash_offsets[-1] != len(self.hash_ids):  # type: ignore[arg-type]
            raise ValueError(f"hash_offsets end at {self.hash_offsets[-1]}, hash_ids has {len(self.hash_ids)}")
        if n and (min(self.prompt_len.min(), self.output_len.min()) < 1):
            raise ValueError("prompt_len and output_len must be >= 1")
        if n > 1 and np.any(np.diff(self.arrival_time) < 0):
            raise ValueError("arrival_time must be sorted")

    def __len__(self) -> int:
        return len(self.arrival_time)

    @classmethod
    def from_columns(
        cls, arrival_time: Sequence[float], prompt_len: Sequence[int], output_len: Sequence[int], **extra: object
    ) -> RequestTable:
        """Build from plain sequences (sorted by arrival, stably); for tests and small built-ins."""
        t = np.asarray(arrival_time, dtype=np.float64)
        order = np.argsort(t, kind="stable")
        cols = {"prompt_len": np.asarray(prompt_len, dtype=np.int64), "output_len": np.asarray(output_len, np.int64)}
        for name in ("priority", "session_id", "request_id"):
            if extra.get(name) is not None:
                cols[name] = np.asarray(extra.pop(name))[order]
        if extra.get("hash_ids") is not None:
            extra["hash_ids"], extra["hash_offsets"] = take_hashes(extra["hash_ids"], extra["hash_offsets"], order)
        cols["prompt_len"], cols["output_len"] = cols["prompt_len"][order], cols["output_len"][order]
        return cls(t[order], row=order, **cols, **extra)  # type: ignore[arg-type]

    @classmethod
    def from_requests(cls, requests: Sequence[Request]) -> RequestTable:
        reqs = sorted(requests, key=lambda r: r.arrival_time)  # sorted() is stable: ties keep list order
        return cls(
            np.array([r.arrival_time for r in reqs], dtype=np.float64),
            np.array([r.prompt_len for r in reqs], dtype=np.int64),
            np.array([r.output_len for r in reqs], dtype=np.int64),
            priority=np.array([r.priority for r in reqs], dtype=np.int64),
            request_id=np.array([r.request_id for r in reqs], dtype=object),
        )

    @property
    def request_ids(self) -> list[str]:
        if self.request_id is not None:
            return [str(x) for x in self.request_id]
        rows = self.row.tolist() if self.row is not None else range(len(self))
        return list(map(str, rows))

    def id_of(self, i: int) -> str:
        if self.request_id is not None:
            return str(self.request_id[i])
        return str(int(self.row[i])) if self.row is not None else str(i)

    def hashes(self, i: int) -> np.ndarray:
        """Row i's prefix-block hashes (empty when the workload has none)."""
        if self.hash_ids is None or self.hash_offsets is None:
            return np.empty(0, dtype=np.int64)
        return self.hash_ids[self.hash_offsets[i] : self.hash_offsets[i + 1]]

    def to_requests(self) -> list[Request]:
        prio = self.priority.tolist() if self.priority is not None else [0] * len(self)
        t = self.arrival_time
        if len(t) and not (np.isfinite(t).all() and t.min() >= 0):  # what Request() checks, for all rows at once
            bad = int(np.flatnonzero(~(np.isfinite(t) & (t >= 0)))[0])
            raise ValueError(f"arrival_time must be a finite number of seconds >= 0, got {t[bad]!r}")
        # lengths >= 1 and sorted arrivals are checked when the table is made
        hashes = None
        if self.hash_ids is not None and self.hash_offsets is not None:  # block identities, for prefix caching
            ids, off = self.hash_ids.tolist(), self.hash_offsets.tolist()
            hashes = [tuple(ids[off[i]:off[i + 1]]) or None for i in range(len(self))]
        out = unchecked_requests(self.request_ids, t.tolist(), self.prompt_len.tolist(),
                                 self.output_len.tolist(), prio, hashes, self.hash_block_size)
        if self.session_id is not None:  # multi-turn sessions: a turn's prompt extends the conversation so far
            from servesim.workloads.sessions import session_requests

            out = session_requests(out, self.session_id)
        return out

    def take(self, index: np.ndarray) -> RequestTable:
        """The rows at `index`, which must keep arrival order (an increasing subset)."""
        return take_rows(self, np.asarray(index, dtype=np.int64))

    def with_note(self, note: str) -> RequestTable:
        return replace(self, notes=(*self.notes, note))

    def write_csv(self, path: str | Path) -> None:
        """Write the canonical format where `path` points (`servesim.output`: atomically over a file, `-` is
        stdout): a failed write leaves any existing file untouched."""
        from servesim.output import write_output

        write_output(path, self.to_csv_text().encode(), "output")

    def to_csv_text(self) -> str:
        cols: dict[str, list[object]] = {
            "arrival_time": [repr(x) for x in self.arrival_time.tolist()],  # repr: round-trips exactly
            "prompt_len": self.prompt_len.tolist(),
            "output_len": self.output_len.tolist(),
        }
        for name in ("priority", "session_id"):
            if (col := getattr(self, name)) is not None:
                cols[name] = col.tolist()
        if self.hash_ids is not None:
            cols["hash_ids"] = [" ".join(map(str, self.hashes(i).tolist())) for i in range(len(self))]
        if self.request_id is not None:
            cols["request_id"] = list(self.request_id)
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(cols)
        w.writerows(zip(*cols.values(), strict=True))
        return out.getvalue()


def take_hashes(hash_ids: np.ndarray, offsets: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The hash lists of rows `index`, in that order, without a Python loop over rows."""
    starts, lengths = offsets[index], offsets[index + 1] - offsets[index]
    new_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    flat = np.repeat(starts - new_offsets[:-1], lengths) + np.arange(new_offsets[-1], dtype=np.int64)
    return hash_ids[flat], new_offsets


def take_rows(table: RequestTable, index: np.ndarray) -> RequestTable:
    hash_ids, offsets = table.hash_ids, table.hash_offsets
    if hash_ids is not None and offsets is not None:
        hash_ids, offsets = take_hashes(hash_ids, offsets, index)
    pick = lambda col: None if col is None else col[index]  # noqa: E731
    return replace(
        table,
        arrival_time=table.arrival_time[index],
        prompt_len=table.prompt_len[index],
        output_len=table.output_len[index],
        row=table.row[index] if table.row is not None else index,
        priority=pick(table.priority),
        session_id=pick(table.session_id),
        request_id=pick(table.request_id),
        hash_ids=hash_ids,
        hash_offsets=offsets,
    )


def read_servesim_csv(text: str, name: str) -> RequestTable:
    """Parse the canonical format with the standard library only: how built-in workloads load without polars."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or rows[0][:3] != list(SERVESIM_COLUMNS[:3]):
        raise WorkloadError(f"{name}: line 1: expected the header {','.join(SERVESIM_COLUMNS[:3])},...")
    header, body = rows[0], [r for r in rows[1:] if r]
    cols = {h: [r[j] for r in body] for j, h in enumerate(header)}
    try:
        extra: dict[str, object] = {}
        for c in ("priority", "session_id"):
            if c in cols:
                extra[c] = np.array(cols[c], dtype=np.int64)
        if "hash_ids" in cols:
            lists = [np.array(s.split(), dtype=np.int64) for s in cols["hash_ids"]]
            extra["hash_ids"] = np.concatenate(lists) if lists else np.empty(0, dtype=np.int64)
            extra["hash_offsets"] = np.concatenate(([0], np.cumsum([len(x) for x in lists]))).astype(np.int64)
        if "request_id" in cols:
            extra["request_id"] = np.array(cols["request_id"], dtype=object)
        return RequestTable.from_columns(
            np.array(cols["arrival_time"], dtype=np.float64),
            np.array(cols["prompt_len"], dtype=np.int64),
            np.array(cols["output_len"], dtype=np.int64),
            **extra,
        )
    except ValueError as exc:
        raise WorkloadError(f"{name}: not a valid servesim CSV: {exc}") from None
