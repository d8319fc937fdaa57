"""servesim: trace, simulate and explain how an LLM serving engine schedules work.

The names below are imported on first use (PEP 562), so that `import servesim.cli` does not load numpy and the
engine before the command line has been read.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from servesim.version import __version__

if TYPE_CHECKING:
    from servesim.cluster import simulate_cluster
    from servesim.engine.loop import simulate
    from servesim.engine.request import Request, RequestStatus
    from servesim.engines.config import EngineConfig
    from servesim.lesson.functions import (
        chunk_size,
        chunked_iteration_time,
        continuous_slots,
        plan_chunks,
        static_slots,
        tokens_processed,
        utilization,
        worst_stall,
    )
    from servesim.plan.api import capacity, sweep
    from servesim.run import Run

_LESSON = ("chunk_size", "chunked_iteration_time", "continuous_slots", "plan_chunks", "static_slots",
           "tokens_processed", "utilization", "worst_stall")
__all__ = ["EngineConfig", "Request", "RequestStatus", "Run", "__version__", "capacity", "chunk_size",
           "chunked_iteration_time", "continuous_slots", "plan_chunks", "simulate", "simulate_cluster", "static_slots",
           "sweep",
           "tokens_processed", "utilization", "worst_stall"]

_HOMES = {"EngineConfig": "servesim.engines.config", "simulate": "servesim.engine.loop",
          "Request": "servesim.engine.request", "RequestStatus": "servesim.engine.request", "Run": "servesim.run",
          "simulate_cluster": "servesim.cluster", "sweep": "servesim.plan.api", "capacity": "servesim.plan.api",
          **dict.fromkeys(_LESSON, "servesim.lesson.functions")}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'servesim' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # once: later look-ups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
