"""Transforms on a request table: time window, rate scaling, sampling, capping at max_model_len.

Each returns a new table and, where it changed or dropped requests, a note saying how many.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from servesim.errors import WorkloadError
from servesim.workloads.table import MAX_ARRIVAL_S, RequestTable


def time_window(table: RequestTable, start: float, end: float = math.inf) -> RequestTable:
    """Requests arriving in [start, end) seconds, re-based so the first of them arrives at 0."""
    if not (0 <= start < end):
        raise WorkloadError(f"--window: got {start}:{end}; expected START:END seconds with 0 <= START < END")
    t = table.arrival_time
    lo, hi = np.searchsorted(t, start, side="left"), np.searchsorted(t, end, side="left")
    if lo == hi:
        raise WorkloadError(
            f"--window {start:g}:{end:g}: no requests arrive in it; the workload spans 0 to {t[-1]:g} s"
        )
    kept = table.take(np.arange(lo, hi))
    kept = replace(kept, arrival_time=kept.arrival_time - kept.arrival_time[0])
    return kept.with_note(f"window {start:g}-{end:g} s kept {hi - lo:,} of {len(table):,} requests")


def scale_rate(table: RequestTable, factor: float) -> RequestTable:
    """Multiply the request rate by `factor`: arrival times are divided by it (2 = twice as fast)."""
    if not (factor > 0 and math.isfinite(factor)):
        raise WorkloadError(f"--rate-scale: got {factor}; expected a finite factor > 0 (2 = twice the rate)")
    span = float(table.arrival_time[-1]) / factor if len(table) else 0.0
    if not span <= MAX_ARRIVAL_S:
        raise WorkloadError(
            f"--rate-scale: got {factor:g}; the arrivals would span {span:.3g} s, expected at most "
            f"{MAX_ARRIVAL_S:,} s (10 years, servesim's limit)"
        )
    return replace(table, arrival_time=table.arrival_time / factor)


def sample(table: RequestTable, n: int, rng: np.random.Generator) -> RequestTable:
    """`n` requests drawn without replacement (seeded), kept in arrival order."""
    if n < 1:
        raise WorkloadError(f"--num-requests: got {n}; expected at least 1")
    if n >= len(table):
        if n > len(table):
            return table.with_note(f"asked for {n:,} requests, the workload has {len(table):,}: using all")
        return table
    index = np.sort(rng.choice(len(table), size=n, replace=False))
    return table.take(index).with_note(f"sampled {n:,} of {len(table):,} requests")


def cap_lengths(table: RequestTable, max_model_len: int) -> RequestTable:
    """Make every request fit max_model_len: prompt at most max_model_len - 1 (one token must come out), then
    output at most max_model_len - prompt. vLLM would reject these requests; we shorten them and count them."""
    if max_model_len < 2:
        raise WorkloadError(f"--max-model-len: got {max_model_len}; expected at least 2 (one token in, one out)")
    prompt = np.minimum(table.prompt_len, max_model_len - 1)
    output = np.minimum(table.output_len, max_model_len - prompt)
    capped = int(np.count_nonzero((prompt != table.prompt_len) | (output != table.output_len)))
    if not capped:
        return table
    return replace(table, prompt_len=prompt, output_len=output).with_note(
        f"capped {capped:,} requests to max_model_len {max_model_len:,} (prompt + output tokens)"
    )
