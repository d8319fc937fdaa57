"""The lesson layer: exactly the functions and worked example of `../shared/spec/lesson.txt`.

Chunked prefill splits a long prompt into pieces and mixes one piece into each iteration under a total token
budget. These functions are the lesson's arithmetic; the engine reproduces the same numbers step by step.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

DECODE_MS = 1.0  # the lesson's toy cost: 1 ms per decoding sequence
PREFILL_TOKEN_MS = 0.1  # and 0.1 ms per prefill token

SlotRows = list[list[str | None]]


def _count(name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def _ms(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of milliseconds >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a number of milliseconds >= 0, got {value}")
    return float(value)


def chunk_size(token_budget: int, decodes: int) -> int:
    """Prompt tokens that fit in an iteration after the decodes: max(0, token_budget - decodes)."""
    return max(0, _count("token_budget", token_budget) - _count("decodes", decodes))


def plan_chunks(prompt_tokens: int, chunk: int) -> list[int]:
    """Chunk sizes that add up to `prompt_tokens`: all `chunk` except possibly a smaller last one."""
    _count("prompt_tokens", prompt_tokens)
    if isinstance(chunk, bool) or not isinstance(chunk, int):
        raise TypeError(f"chunk must be an integer >= 1, got {type(chunk).__name__} {chunk!r}")
    if chunk < 1:
        raise ValueError(f"chunk must be an integer >= 1, got {chunk}")
    full, rest = divmod(prompt_tokens, chunk)
    return [chunk] * full + ([rest] if rest else [])


def chunked_iteration_time(
    decodes: int, chunk: int, *, decode_ms: float = DECODE_MS, prefill_token_ms: float = PREFILL_TOKEN_MS
) -> float:
    """Toy cost in ms of an iteration with `decodes` decoding sequences and `chunk` prefill tokens."""
    # Decimal arithmetic so that the lesson's decimal costs give its numbers exactly (4 + 252 x 0.1 = 29.2)
    total = (_count("decodes", decodes) * Decimal(repr(_ms("decode_ms", decode_ms)))
             + _count("chunk", chunk) * Decimal(repr(_ms("prefill_token_ms", prefill_token_ms))))
    return float(total)


def worst_stall(decodes: int, chunk: int, **costs: float) -> float:
    """The longest wait a running request sees: the time of an iteration that contains a full chunk."""
    return chunked_iteration_time(decodes, chunk, **costs)


def tokens_processed(chunks: Sequence[int]) -> int:
    """The total of all chunk sizes: the earlier context is still fully processed."""
    return sum(_count("chunk", c) for c in chunks)


# -- the chapter's worked example: slots over iterations --------------------------------------------------------

def _names(output_lengths: Sequence[int]) -> list[str]:
    if len(output_lengths) > 26:
        raise ValueError(f"the slot example names requests A..Z: at most 26, got {len(output_lengths)}")
    for n in output_lengths:
        _count("output length", n, 1)
    return [chr(ord("A") + i) for i in range(len(output_lengths))]


def static_slots(output_lengths: Sequence[int], slots: int) -> SlotRows:
    """Static batching: groups of `slots` requests run until the longest member is done; freed slots idle."""
    names, _ = _names(output_lengths), _count("slots", slots, 1)
    rows: SlotRows = []
    for g in range(0, len(names), slots):
        group = list(range(g, min(g + slots, len(names))))
        for it in range(max(output_lengths[i] for i in group)):
            row = [names[i] if it < output_lengths[i] else None for i in group]
            rows.append(row + [None] * (slots - len(row)))
    return rows


def continuous_slots(output_lengths: Sequence[int], slots: int) -> SlotRows:
    """Continuous admission: a slot freed at the end of an iteration takes the next request at the next one.

    Each row lists the active requests in admission order, then the idle slots.
    """
    names, _ = _names(output_lengths), _count("slots", slots, 1)
    left = list(output_lengths)
    active: list[int] = []
    nxt, rows = 0, []
    while nxt < len(names) or active:
        while len(active) < slots and nxt < len(names):
            active.append(nxt)
            nxt += 1
        rows.append([names[i] for i in active] + [None] * (slots - len(active)))
        for i in active:
            left[i] -= 1
        active = [i for i in active if left[i]]
    return rows


def utilization(rows: SlotRows) -> float:
    """Active slots / available slots (the chapter's simplified, equal-cost measure)."""
    available = sum(len(row) for row in rows)
    return sum(x is not None for row in rows for x in row) / available if available else 0.0
