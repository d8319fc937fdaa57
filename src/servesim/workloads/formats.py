"""Trace formats: which columns hold arrival, prompt and output, and in what time unit.

A format is only a column mapping; whether the bytes are CSV, JSONL or Parquet is read from the file itself, so a
Mooncake trace exported to Parquet loads with `--format mooncake` too.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from servesim.errors import WorkloadError
from servesim.workloads.source import CONTAINERS

TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9, "datetime": 1.0}  # units per second


@dataclass(frozen=True, slots=True)
class TraceFormat:
    name: str
    arrival: str | None  # None: a length-only file, arrivals come from a synthetic process
    prompt: str
    output: str
    time_unit: str = "s"  # a key of TIME_UNITS; "datetime" parses wall-clock strings
    optional: dict[str, str] = field(default_factory=dict)  # role -> column, used when the file has it
    required_extra: dict[str, str] = field(default_factory=dict)  # role -> column, must exist (--columns)
    hash_block_size: int | None = None
    description: str = ""

    @property
    def required(self) -> tuple[str, ...]:
        cols = (self.arrival,) if self.arrival else ()
        return (*cols, self.prompt, self.output, *self.required_extra.values())


FORMATS: dict[str, TraceFormat] = {
    f.name: f
    for f in (
        TraceFormat(
            "azure",
            "TIMESTAMP",
            "ContextTokens",
            "GeneratedTokens",
            "datetime",
            description="Azure LLM inference trace 2023/2024 (and 2025 multimodal: NumImages is ignored)",
        ),
        TraceFormat(
            "burstgpt",
            "Timestamp",
            "Request tokens",
            "Response tokens",
            "s",
            optional={"session": "Session ID"},
            description="BurstGPT; failed requests (0 response tokens) dropped by default",
        ),
        TraceFormat(
            "mooncake",
            "timestamp",
            "input_length",
            "output_length",
            "ms",
            optional={"hash_ids": "hash_ids"},
            hash_block_size=512,
            description="Mooncake FAST'25 JSONL (hash_ids: 512-token prefix blocks)",
        ),
        TraceFormat(
            "vidur",
            "arrived_at",
            "num_prefill_tokens",
            "num_decode_tokens",
            "s",
            description="Vidur / Splitwise processed trace",
        ),
        TraceFormat(
            "lengths",
            None,
            "num_prefill_tokens",
            "num_decode_tokens",
            description="lengths only (Vidur's length files): give --request-rate for arrivals",
        ),
        TraceFormat(
            "servesim",
            "arrival_time",
            "prompt_len",
            "output_len",
            "s",
            optional={
                "priority": "priority",
                "session": "session_id",
                "hash_ids": "hash_ids",
                "id": "request_id",
            },
            description="servesim's own CSV, as written by `servesim workload generate`",
        ),
    )
}
ALIASES = {"splitwise": "vidur", "azure-2023": "azure", "azure-2024": "azure", "azure-2025": "azure"}
ROLES = ("arrival", "prompt", "output", "priority", "session", "hash_ids", "id")


def parse_columns(spec: str, time_unit: str | None) -> TraceFormat:
    """`arrival=ts,prompt=in,output=out[,priority=..,session=..,hash_ids=..,id=..]`; arrival may be left out."""
    mapping: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        role, sep, col = part.partition("=")
        role = role.strip()
        if not sep or not col.strip():
            raise WorkloadError(
                f"--columns: {part!r} is not ROLE=COLUMN; expected e.g. arrival=ts,prompt=in,output=out"
            )
        if role not in ROLES:
            raise WorkloadError(
                f"--columns: unknown role {role!r}{did_you_mean(role, ROLES)}; valid: {', '.join(ROLES)}"
            )
        mapping[role] = col.strip()
    missing = [r for r in ("prompt", "output") if r not in mapping]
    if missing:
        raise WorkloadError(f"--columns: no {' or '.join(missing)} column given; expected e.g. prompt=in,output=out")
    unit = time_unit or "s"
    if unit not in TIME_UNITS:
        raise WorkloadError(f"--time-unit: got {unit!r}; expected one of {', '.join(TIME_UNITS)}")
    extra = {r: c for r, c in mapping.items() if r not in ("arrival", "prompt", "output")}
    return TraceFormat("columns", mapping.get("arrival"), mapping["prompt"], mapping["output"], unit, {}, extra)


def choose_format(
    name: str | None, columns: str | None, time_unit: str | None, header: tuple[str, ...], where: str
) -> TraceFormat:
    """The format named by --format/--columns, or the first known format whose columns all appear in the header."""
    if columns:
        if name and name not in CONTAINERS:
            raise WorkloadError(f"--columns goes with a generic --format ({', '.join(CONTAINERS)}), not {name!r}")
        return parse_columns(columns, time_unit)
    if name in CONTAINERS:
        raise WorkloadError(f"--format {name} needs --columns, e.g. --columns arrival=ts,prompt=in,output=out")
    if name:
        key = ALIASES.get(name, name)
        if key not in FORMATS:
            valid = sorted([*FORMATS, *ALIASES, *CONTAINERS])
            raise WorkloadError(
                f"--format: unknown format {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}"
            )
        fmt = FORMATS[key]
    else:
        found = [f for f in FORMATS.values() if all(c in header for c in f.required)]
        if not found:
            raise WorkloadError(
                f"{where}: line 1: unrecognised columns {names(header)}; expected one of: "
                + "; ".join(f"{f.name} ({', '.join(f.required)})" for f in FORMATS.values())
                + ". Or give --columns arrival=COL,prompt=COL,output=COL"
            )
        fmt = found[0]
    if time_unit and time_unit != fmt.time_unit:
        raise WorkloadError(f"--time-unit applies to --columns; --format {fmt.name} is in {fmt.time_unit!r}")
    return fmt


def check_header(fmt: TraceFormat, header: tuple[str, ...], where: str) -> None:
    spare = [h for h in header if h not in fmt.required]  # never suggest a column the format already uses
    for col in fmt.required:
        if col not in header:
            raise WorkloadError(
                f"{where}: line 1: no column {col!r}{did_you_mean(col, spare)} (format {fmt.name}); "
                f"columns present: {names(header)}"
            )


def names(header: tuple[str, ...]) -> str:
    """Column names for a message: as they are, or quoted with escapes when they hold control characters."""
    return ", ".join(h if h.isprintable() else repr(h) for h in header) or "(none)"


def did_you_mean(word: str, options: object) -> str:
    close = difflib.get_close_matches(word, [str(o) for o in options], n=1, cutoff=0.6)  # type: ignore[attr-defined]
    if not close:
        close = [str(o) for o in options if str(o).strip().lower() == word.strip().lower()]  # type: ignore[attr-defined]
    return f" (did you mean {close[0]!r}?)" if close else ""
