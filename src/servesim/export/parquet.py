"""Stream step records to Parquet, so a large run never holds them in memory.

`ParquetRecords(folder)` is a `simulate(sink=...)`: it buffers records and writes row groups to three files,
`steps.parquet` (one row a step), `scheduled.parquet` (one row per scheduled request per step) and, at
record="full", `waiting.parquet` (one row per request that got nothing, with why). Field names are the step
record's. Needs pyarrow (a core dependency).

Each file is written under a hidden temporary name and renamed when the run ends: an interrupted run leaves no
truncated file under a final name (and the folder's earlier files as they were); a finished run leaves exactly its
own files (a `waiting.parquet` from an earlier run at record="full" is removed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servesim.engine.records import StepRecord
from servesim.errors import ConfigError

STEP_FIELDS = ("step", "start_time", "duration", "total_scheduled_tokens", "prefill_tokens", "num_decodes",
               "num_running_after", "num_waiting_after", "free_blocks_after_schedule", "free_blocks_after_step",
               "token_budget", "swap_in_blocks", "swap_out_blocks")
LIST_FIELDS = ("arrivals", "preempted", "finished", "finished_observed")
RECORD_FILES = ("steps", "scheduled", "waiting")
ENTRY_FIELDS = ("id", "num_scheduled_tokens", "kind", "num_computed_tokens_before", "num_tokens_before", "resumed",
                "samples_token", "num_blocks")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError("writing Parquet needs pyarrow: pip install pyarrow") from None
    return pyarrow


class ParquetRecords:
    def __init__(self, folder: str | Path, rows_per_group: int = 65536) -> None:
        self.pa = _pyarrow()
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"{folder}: cannot create the records folder ({e.strerror})") from None
        self.rows_per_group = rows_per_group
        self._writers: dict[str, Any] = {}
        self._new()

    def _new(self) -> None:
        self._steps: dict[str, list] = {f: [] for f in STEP_FIELDS + LIST_FIELDS}
        self._entries: dict[str, list] = {f: [] for f in ("step",) + ENTRY_FIELDS}
        self._waiting: dict[str, list] = {"step": [], "id": [], "reason": [], "detail": []}

    def __call__(self, r: StepRecord) -> None:
        st = self._steps
        for f in STEP_FIELDS:
            st[f].append(getattr(r, f))
        for f in LIST_FIELDS:
            st[f].append(list(getattr(r, f)))
        en = self._entries
        for e in r.scheduled:
            en["step"].append(r.step)
            for f in ENTRY_FIELDS:
                v = getattr(e, f)
                en[f].append(v.value if f == "kind" else v)
        wa = self._waiting
        for w in r.waiting:
            wa["step"].append(r.step)
            wa["id"].append(w.id)
            wa["reason"].append(w.reason.value)
            wa["detail"].append(w.detail)
        if len(st["step"]) >= self.rows_per_group:
            self.flush()

    def _schemas(self) -> dict[str, Any]:
        pa = self.pa
        i64, f64, text = pa.int64(), pa.float64(), pa.string()
        floats = {"start_time", "duration"}
        steps = [(f, f64 if f in floats else i64) for f in STEP_FIELDS] + [(f, pa.list_(text)) for f in LIST_FIELDS]
        kinds = {"id": text, "kind": text, "resumed": pa.bool_(), "samples_token": pa.bool_()}
        entries = [("step", i64)] + [(f, kinds.get(f, i64)) for f in ENTRY_FIELDS]
        waiting = [("step", i64), ("id", text), ("reason", text), ("detail", text)]
        return {"steps": pa.schema(steps), "scheduled": pa.schema(entries), "waiting": pa.schema(waiting)}

    def flush(self) -> None:
        schemas = self._schemas()
        for name, cols in (("steps", self._steps), ("scheduled", self._entries), ("waiting", self._waiting)):
            if cols["step"]:
                self._write(name, self.pa.table(cols, schema=schemas[name]))
        self._new()

    def _partial(self, name: str) -> Path:
        return self.folder / f".{name}.parquet.partial"

    def _write(self, name: str, table: Any) -> None:
        writer = self._writers.get(name)
        if writer is None:
            writer = self._writers[name] = self.pa.parquet.ParquetWriter(self._partial(name), table.schema)
        writer.write_table(table)

    def close(self) -> None:
        """The run finished: the files take their final names, and no other records file stays."""
        self.flush()
        for w in self._writers.values():
            w.close()
        for name in RECORD_FILES:
            final = self.folder / f"{name}.parquet"
            if name in self._writers:
                self._partial(name).replace(final)
            else:
                final.unlink(missing_ok=True)
        self._writers.clear()

    def abort(self) -> None:
        """The run stopped early: the partial files go, the folder's earlier files stay as they were."""
        for name, w in self._writers.items():
            try:
                w.close()
            finally:
                self._partial(name).unlink(missing_ok=True)
        self._writers.clear()

    def __enter__(self) -> ParquetRecords:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
