"""The Pareto front of a sweep: the points no other point beats on every axis at once.

Axes: TTFT p99 (lower is better), TPOT p99 (lower) and output throughput per GPU (higher). A point is dominated
when another is at least as good on all three and better on one. Overloaded points do not compete: their tail
latencies grow with the run's length (`analysis.overload`), so they describe the run, not the configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

AXES = (("p99_ttft_ms", -1.0), ("p99_tpot_ms", -1.0), ("output_throughput_per_gpu", 1.0))  # (column, sign)


def pareto_mask(rows: Sequence[dict[str, Any]]) -> list[bool]:
    """True for each row on the front (in row order)."""
    ok = [not r["overloaded"] and r["completed"] > 0 for r in rows]
    idx = [i for i, good in enumerate(ok) if good]
    front = [False] * len(rows)
    if not idx:
        return front
    # every axis as "higher is better"
    x = np.array([[sign * float(rows[i][col]) for col, sign in AXES] for i in idx])
    for k, i in enumerate(idx):
        at_least = (x >= x[k]).all(axis=1)
        better = (x > x[k]).any(axis=1)
        front[i] = not (at_least & better).any()
    return front
