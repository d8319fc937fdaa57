"""Statistics of values with whole-number weights (value i repeated w[i] times), in bounded memory.

A run's pooled inter-token latencies are the gaps between consecutive step ends, each counted once per request
decoding across it: a million-request run has ~18 M of them. Sorting them with their weights would take ~28 bytes a
gap of temporaries; beyond `SORT_UP_TO` values (below it sorting is faster, and small) the data are read in
chunks of `CHUNK` and only a few small bins are ever sorted:

1. edges: every `EDGE_EVERY`-th value of a sorted, strided sample of `SAMPLE` values;
2. every value falls in a bin: strictly between two edges (few values, by construction), or equal to an edge (one
   value, however often it repeats); the weight in each bin is counted chunk by chunk;
3. a rank's bin follows from the cumulative counts; an edge bin's value is its edge, and the few bins between
   edges that hold a wanted rank are gathered and sorted.

The values found are the exact order statistics (numpy's on the repeated data); the moments are chunked dot
products, equal to numpy's up to summation order.
"""

from __future__ import annotations

import math

import numpy as np

CHUNK = 1 << 20
SAMPLE = 1 << 16
EDGE_EVERY = 16
SORT_UP_TO = 1 << 21  # sorted outright up to here: ~28 bytes a value, and faster than two passes over the bins


def values_at_ranks(x: np.ndarray, w: np.ndarray, ranks: list[int]) -> list[float]:
    """The values at 0-based `ranks` (each below w.sum()) of x[i] repeated w[i] times, sorted."""
    if len(x) <= SORT_UP_TO:
        return _sorted_at(x, w, ranks)
    edges = np.unique(np.sort(x[::len(x) // SAMPLE])[::EDGE_EVERY])
    nbins = 2 * len(edges) + 1
    counts = np.zeros(nbins, np.int64)
    for a in range(0, len(x), CHUNK):
        counts += np.bincount(_bins(edges, x[a:a + CHUNK]), weights=w[a:a + CHUNK], minlength=nbins).astype(np.int64)
    cum = np.cumsum(counts)
    out: list[float] = [0.0] * len(ranks)
    wanted: dict[int, list[tuple[int, int]]] = {}  # bin between edges -> (position in out, rank inside the bin)
    for i, r in enumerate(ranks):
        b = int(np.searchsorted(cum, r, side="right"))
        if b % 2:
            out[i] = edges[b // 2].item()
        else:
            wanted.setdefault(b, []).append((i, r - (int(cum[b - 1]) if b else 0)))
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {b: [] for b in wanted}
    for a in range(0, len(x), CHUNK) if wanted else ():
        xc, wc = x[a:a + CHUNK], w[a:a + CHUNK]
        bins = _bins(edges, xc)
        for b in wanted:
            hit = bins == b
            parts[b].append((xc[hit], wc[hit]))
    for b, items in wanted.items():
        xs = np.concatenate([p for p, _ in parts[b]])
        ws = np.concatenate([q for _, q in parts[b]])
        for (i, _), v in zip(items, _sorted_at(xs, ws, [r for _, r in items])):
            out[i] = v
    return out


def _sorted_at(x: np.ndarray, w: np.ndarray, ranks: list[int]) -> list[float]:
    """Sort, then the first value whose cumulative weight exceeds each rank."""
    order = np.argsort(x, kind="stable")
    cum = np.cumsum(w[order], dtype=np.int64)
    return x[order][np.searchsorted(cum, ranks, side="right")].tolist()


def _bins(edges: np.ndarray, x: np.ndarray) -> np.ndarray:
    """2i for values strictly between edges i-1 and i, 2i+1 for values equal to edge i: monotone in the value."""
    return np.searchsorted(edges, x, side="left") + np.searchsorted(edges, x, side="right")


def moments(x: np.ndarray, w: np.ndarray, n: int) -> tuple[float, float]:
    """Mean and (population) standard deviation of the repeated data; `n` = w.sum() > 0."""
    total = 0.0
    for a in range(0, len(x), CHUNK):
        total += float(np.dot(x[a:a + CHUNK], w[a:a + CHUNK].astype(np.float64)))
    mean = total / n
    squares = 0.0
    for a in range(0, len(x), CHUNK):
        d = x[a:a + CHUNK] - mean
        squares += float(np.dot(w[a:a + CHUNK].astype(np.float64), d * d))
    return mean, math.sqrt(squares / n)
