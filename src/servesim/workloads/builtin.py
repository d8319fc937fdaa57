"""Small workloads shipped with the package, so nothing needs downloading."""

from __future__ import annotations

from collections.abc import Callable

from servesim.errors import WorkloadError
from servesim.request import Request


def seed() -> list[Request]:
    """The lesson's scenario: four short requests decoding, then a 2000-token prompt arrives at 20 ms."""
    reqs = [Request(f"d{i}", 0.0, 32, 40) for i in range(4)]
    reqs.append(Request("L", 0.020, 2000, 5))
    return reqs


def lesson_slots() -> list[Request]:
    """The chapter's worked example: A, B, C with output lengths 2, 1, 2, all waiting at time 0."""
    return [Request("A", 0.0, 1, 2), Request("B", 0.0, 1, 1), Request("C", 0.0, 1, 2)]


BUILTIN_WORKLOADS: dict[str, Callable[[], list[Request]]] = {"seed": seed, "lesson-slots": lesson_slots}


def builtin_workload(name: str) -> list[Request]:
    try:
        return BUILTIN_WORKLOADS[name]()
    except KeyError:
        raise WorkloadError(
            f"unknown built-in workload {name!r}; valid: {', '.join(sorted(BUILTIN_WORKLOADS))} (or a file path)"
        ) from None
