"""Small workloads shipped with the package, so nothing needs downloading. None of them needs polars."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from importlib import resources

import numpy as np

from servesim.engine.request import Request
from servesim.errors import WorkloadError
from servesim.workloads.synthetic import arrival_times, parse_length
from servesim.workloads.table import RequestTable, read_servesim_csv


def seed() -> list[Request]:
    """The lesson's scenario: four short requests decoding, then a 2000-token prompt arrives at 20 ms."""
    reqs = [Request(f"d{i}", 0.0, 32, 40) for i in range(4)]
    reqs.append(Request("L", 0.020, 2000, 5))
    return reqs


def lesson_slots() -> list[Request]:
    """The chapter's worked example: A, B, C with output lengths 2, 1, 2, all waiting at time 0."""
    return [Request("A", 0.0, 1, 2), Request("B", 0.0, 1, 1), Request("C", 0.0, 1, 2)]


MIXED_CLASSES = {  # name: (share, prompt length, output length), in `--prompt-len` syntax
    "chat": (0.7, "lognormal:500:0.6:16:4000", "lognormal:250:0.6:8:1000"),
    "document": (0.2, "uniform:4000:8000", "normal:100:30:20:200"),
    "generation": (0.1, "normal:200:50:50:400", "uniform:800:1500"),
}


def mixed_table() -> RequestTable:
    """200 requests, Poisson at 4 req/s (seed 0): 70% chat, 20% long documents (long prefills), 10% long
    generations (long decodes). Request ids say the class: `chat-0`, `document-1`, ..."""
    rng = np.random.default_rng(0)
    n = 200
    names = list(MIXED_CLASSES)
    kind = rng.choice(len(names), size=n, p=[MIXED_CLASSES[k][0] for k in names])
    prompt, output = np.empty(n, np.int64), np.empty(n, np.int64)
    for k, name in enumerate(names):
        rows = np.flatnonzero(kind == k)
        prompt[rows] = parse_length(MIXED_CLASSES[name][1]).sample(len(rows), rng)
        output[rows] = parse_length(MIXED_CLASSES[name][2]).sample(len(rows), rng)
    ids = np.array([f"{names[k]}-{i}" for i, k in enumerate(kind)], dtype=object)
    return RequestTable(arrival_times(n, 4.0, 1.0, rng), prompt, output, request_id=ids)


# Samples of public traces: the first minutes of each; see data/workloads/ATTRIBUTION.md.
TRACE_SAMPLES = {"azure-conv-sample": None, "azure-code-sample": None, "mooncake-sample": 512}  # hash block size


def sample_table(name: str) -> RequestTable:
    text = (resources.files("servesim") / "data" / "workloads" / f"{name}.csv").read_text(encoding="utf-8")
    return replace(read_servesim_csv(text, name), hash_block_size=TRACE_SAMPLES[name])


BUILTIN_WORKLOADS: dict[str, Callable[[], list[Request]]] = {
    "seed": seed,
    "lesson-slots": lesson_slots,
    "mixed": lambda: mixed_table().to_requests(),
    **{name: (lambda name=name: sample_table(name).to_requests()) for name in TRACE_SAMPLES},
}


def builtin_table(name: str) -> RequestTable:
    """A built-in workload as a request table (hash_ids kept for the Mooncake sample)."""
    if name in TRACE_SAMPLES:
        return sample_table(name)
    if name == "mixed":
        return mixed_table()
    return RequestTable.from_requests(builtin_workload(name))


def builtin_workload(name: str) -> list[Request]:
    try:
        return BUILTIN_WORKLOADS[name]()
    except KeyError:
        raise WorkloadError(
            f"unknown built-in workload {name!r}; valid: {', '.join(sorted(BUILTIN_WORKLOADS))} (or a file path)"
        ) from None
