"""Rich renderings of step records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.records import Kind, StepRecord
from servesim.engine.result import SimResult

if TYPE_CHECKING:
    from rich.table import Table


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.4g}"


def events(step: StepRecord) -> str:
    parts = []
    if step.arrivals:
        parts.append("arrived " + ",".join(step.arrivals))
    for p in step.preempted:
        parts.append(f"preempted {p}")
    if step.swap_out_blocks:
        parts.append(f"swapped out {step.swap_out_blocks} blocks")
    if step.swap_in_blocks:
        parts.append(f"swapped in {step.swap_in_blocks} blocks")
    resumed = [e.id for e in step.scheduled if e.resumed]
    if resumed:
        parts.append("resumed " + ",".join(resumed))
    if step.finished:
        parts.append("finished " + ",".join(step.finished))
    if step.waiting:
        by_reason: dict[str, list[str]] = {}
        for w in step.waiting:
            by_reason.setdefault(w.reason.value, []).append(w.id)
        for reason, ids in by_reason.items():
            head = next(w for w in step.waiting if w.reason.value == reason)
            detail = f" ({head.detail})" if head.detail and reason != "blocked_behind_head" else ""
            who = ",".join(ids[:4]) + (f" +{len(ids) - 4}" if len(ids) > 4 else "")
            parts.append(f"held {who}: {reason.replace('_', ' ')}{detail}")
    return "; ".join(parts)


def step_table(result: SimResult, title: str | None = None, limit: int | None = None) -> Table:
    from rich.table import Table

    has_kv = result.config.num_gpu_blocks is not None
    t = Table(title=title or f"{result.policy}: per-step schedule", title_justify="left", show_lines=False)
    for col, kw in [("step", {"justify": "right"}), ("start ms", {"justify": "right"}),
                    ("dur ms", {"justify": "right"}), ("decodes", {"justify": "right"}), ("prefill chunks", {}),
                    ("tokens/budget", {"justify": "right"})]:
        t.add_column(col, **kw)
    if has_kv:
        t.add_column("free KV", justify="right")
    t.add_column("events", overflow="fold")
    steps = result.steps if limit is None else result.steps[:limit]
    for s in steps:
        chunks = " ".join(f"{e.id}:{e.num_scheduled_tokens}" for e in s.scheduled if e.kind is Kind.PREFILL)
        row = [str(s.step), _ms(s.start_time), _ms(s.duration), str(s.num_decodes), chunks,
               f"{s.total_scheduled_tokens}/{s.token_budget}"]
        if has_kv:
            row.append(str(s.free_blocks_after_step))
        row.append(events(s))
        t.add_row(*row)
    return t
