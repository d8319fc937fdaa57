"""Step records as text for the terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.records import StepRecord
from servesim.engine.result import SimResult

if TYPE_CHECKING:
    pass


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
    resumed = [e.id for e in step.scheduled.rest if e.resumed]  # the decode cohort never resumes
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


def _fixed_ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"  # fixed-point: 3,600,000.0, never 3.6e+06


def step_lines(result: SimResult, limit: int | None = None, width: int = 80) -> list[str]:
    """The per-step schedule as plain lines that fit `width` columns: fixed columns (step, start and duration in
    ms, decodes, tokens/budget, free KV blocks after the step), then the prefill chunks as id:tokens and the
    events, wrapped under the row."""
    import textwrap

    has_kv = result.config.num_gpu_blocks is not None
    cols = f"{'step':>5} {'start ms':>11} {'dur ms':>8} {'dec':>4} {'tokens':>11}" + (f" {'free KV':>7}" if has_kv
                                                                                       else "")
    indent = len(cols) + 2
    if width - indent < 24:  # too narrow for the text beside the columns: it goes on lines of its own
        indent = 8
    lines = [cols + "  prefill chunks; events"]
    steps = result.steps if limit is None else result.steps[:limit]
    for s in steps:
        row = (f"{s.step:>5} {_fixed_ms(s.start_time):>11} {_fixed_ms(s.duration):>8} {s.num_decodes:>4} "
               f"{f'{s.total_scheduled_tokens}/{s.token_budget}':>11}")
        if has_kv:
            row += f" {s.free_blocks_after_step:>7}"
        chunks = " ".join(f"{e.id}:{e.num_scheduled_tokens}" for e in s.scheduled.prefill())
        text = "; ".join(x for x in (chunks, events(s)) if x)
        if not text:
            lines.append(row)
            continue
        wrapped = textwrap.wrap(text, max(width - indent, 24), break_on_hyphens=False)
        if indent > len(row):
            lines.append(f"{row}{' ' * (indent - len(row))}{wrapped[0]}")
            wrapped = wrapped[1:]
        else:
            lines.append(row)
        lines += [" " * indent + w for w in wrapped]
    return lines


def text_table(header: list[str], rows: list[list[str]], right: set[int] = frozenset(), width: int = 80) -> str:
    """Plain aligned columns, two spaces apart; the last column is left-aligned and wraps to `width`."""
    import textwrap

    cols = list(zip(header, *rows))
    widths = [max(len(c) for c in col) for col in cols[:-1]]
    indent = sum(widths) + 2 * len(widths)
    room = max(width - indent, 12)

    def line(cells: list[str]) -> list[str]:
        head = "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        tail = textwrap.wrap(cells[-1], room) or [""]
        return [f"{head}  {tail[0]}".rstrip()] + [" " * indent + t for t in tail[1:]]

    out = line(header)
    for r in rows:
        out += line(r)
    return "\n".join(out)
