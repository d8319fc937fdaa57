"""`--workload NAME|PATH`: a built-in name or a file."""

from __future__ import annotations

from pathlib import Path

from servesim.errors import WorkloadError
from servesim.request import Request
from servesim.workloads.builtin import BUILTIN_WORKLOADS, builtin_workload


def load_workload(spec: str) -> list[Request]:
    """Resolve a built-in workload name or a path to a trace file into requests sorted by arrival."""
    if spec in BUILTIN_WORKLOADS:
        return builtin_workload(spec)
    path = Path(spec)
    if not path.exists():
        raise WorkloadError(
            f"{spec}: no such file, and not a built-in workload (built-ins: {', '.join(sorted(BUILTIN_WORKLOADS))})"
        )
    raise WorkloadError(f"{spec}: trace files are not supported yet")
