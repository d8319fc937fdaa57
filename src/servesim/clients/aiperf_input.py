"""AIPerf's `--input-file` with `--custom-dataset-type mooncake_trace` (pinned: ai-dynamo/aiperf at db4f639,
read in `aiperf/dataset/loader/mooncake_trace.py`, `aiperf/timing/fixed_schedule_strategy.py`,
`aiperf/common/config/user_config.py`, `aiperf/dataset/generator/prompt.py`).

The file: one JSON object a line, `input_length`, `output_length` (servesim needs it: AIPerf would send no
max_tokens), `hash_ids` (each one block of `--isl-block-size` tokens, 512 by default, the last block the rest:
AIPerf refuses a length whose last block is empty or longer than a block), `timestamp` (ms). Lines with
`text_input`, `session_id` or `delay` (AIPerf's multi-turn form) are not modelled yet and are refused.

The schedule: a file with timestamps runs AIPerf's fixed schedule (turned on by itself, as AIPerf does, or by
`--fixed-schedule`): entries outside [`--fixed-schedule-start-offset`, `--fixed-schedule-end-offset`] (ms,
inclusive) are dropped when loading; each is sent at its timestamp less the zero: the first timestamp with
`--fixed-schedule-auto-offset`, else the start offset, else 0. Without timestamps the entries are the dataset:
as many requests as entries (AIPerf's count for a mooncake_trace), each picking an entry with replacement
(AIPerf: Python's `random.choice`; servesim: numpy's, seeded by `--seed`), sent by `--concurrency` or
`--request-rate` as for synthetic data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.errors import ConfigError, WorkloadError

DEFAULT_BLOCK_SIZE = 512
TYPES = ("single_turn", "multi_turn", "random_pool", "mooncake_trace")


@dataclass(frozen=True, slots=True)
class Entry:
    timestamp: int | None  # ms
    input_length: int
    output_length: int
    hash_ids: tuple | None


def read_entries(opts: Any) -> list[Entry]:
    """The file's entries, checked (AIPerf's own rules), offsets applied."""
    if opts.custom_dataset_type is None:
        raise ConfigError(f"--input-file: give --custom-dataset-type ({', '.join(TYPES)})")
    if opts.custom_dataset_type != "mooncake_trace":
        if opts.custom_dataset_type in TYPES:
            raise ConfigError(f"--custom-dataset-type {opts.custom_dataset_type}: not modelled yet; servesim "
                              "reads mooncake_trace files")
        raise ConfigError(f"--custom-dataset-type {opts.custom_dataset_type!r}: expected one of {', '.join(TYPES)}")
    start, end = opts.fixed_schedule_start_offset, opts.fixed_schedule_end_offset
    for flag, v in (("--fixed-schedule-start-offset", start), ("--fixed-schedule-end-offset", end)):
        if v is not None and v < 0:
            raise ConfigError(f"{flag} {v}: expected ms >= 0")
    if start is not None and opts.fixed_schedule_auto_offset:
        raise ConfigError("--fixed-schedule-start-offset and --fixed-schedule-auto-offset: give one (AIPerf "
                          "refuses both)")
    if start is not None and end is not None and start > end:
        raise ConfigError(f"--fixed-schedule-start-offset {start} > --fixed-schedule-end-offset {end}: expected "
                          "start <= end")
    path = Path(opts.input_file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{path}: not readable ({exc.__class__.__name__}); expected a mooncake_trace JSONL "
                            "file") from None
    block = opts.isl_block_size
    if block < 1:
        raise ConfigError(f"--isl-block-size {block}: expected tokens >= 1")
    entries = [e for i, line in enumerate(text.splitlines(), 1) if line.strip()
               for e in [_entry(path, i, line, block)] if _within(e.timestamp, start, end)]
    if not entries:
        raise WorkloadError(f"{path}: no entries (within the offsets given); expected mooncake_trace lines")
    return entries


def _within(t: int | None, start: int | None, end: int | None) -> bool:
    return t is None or ((start is None or t >= start) and (end is None or t <= end))


def _entry(path: Path, line_no: int, line: str, block: int) -> Entry:
    where = f"{path}:{line_no}"
    try:
        d = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where}: not valid JSON: {exc.msg}; expected a mooncake_trace object") from None
    if not isinstance(d, dict):
        raise WorkloadError(f"{where}: expected a JSON object, got {type(d).__name__}")
    for key in ("text_input", "session_id", "delay"):
        if d.get(key) is not None:
            raise WorkloadError(f"{where}: {key}: AIPerf's text prompts and multi-turn sessions are not modelled "
                                "yet; expected input_length, output_length, hash_ids, timestamp")
    values = {}
    for key in ("input_length", "output_length", "timestamp"):
        v = d.get(key)
        if v is None and key != "timestamp":
            raise WorkloadError(f"{where}: {key}: missing; expected tokens >= 1 (servesim needs each request's "
                                "output length)")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (0 if key == "timestamp" else 1)):
            raise WorkloadError(f"{where}: {key}: got {v!r}; expected an integer >= "
                                f"{0 if key == 'timestamp' else 1}")
        values[key] = v
    ids = d.get("hash_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise WorkloadError(f"{where}: hash_ids: expected a list of integers, got {ids!r}")
        last = values["input_length"] - (len(ids) - 1) * block
        if ids and not 0 < last <= block:
            raise WorkloadError(f"{where}: input_length {values['input_length']} with {len(ids)} hash_ids of "
                                f"{block} tokens: the last block would be {last}; expected 1 to {block} (AIPerf "
                                "refuses it)")
    return Entry(values["timestamp"], values["input_length"], values["output_length"],
                 tuple(ids) if ids else None)


def fixed_schedule(opts: Any, entries: list[Entry]) -> bool:
    """Whether AIPerf runs the fixed schedule: `--fixed-schedule`, or a mooncake_trace with timestamps (AIPerf
    looks at the first line)."""
    if opts.fixed_schedule and any(e.timestamp is None for e in entries):
        raise ConfigError("--fixed-schedule: every entry needs a timestamp (ms)")
    return opts.fixed_schedule or entries[0].timestamp is not None


def send_times(opts: Any, entries: list[Entry]) -> list[float]:
    """Seconds from the schedule's start, each entry at its timestamp less the zero."""
    stamps = [e.timestamp for e in entries]
    if any(t is None for t in stamps):
        raise ConfigError("--input-file: some entries have a timestamp and some none; expected all or none")
    zero = min(stamps) if opts.fixed_schedule_auto_offset else opts.fixed_schedule_start_offset or 0
    return [(t - zero) / 1000 for t in stamps]  # (an entry before the start offset was dropped when loading)
