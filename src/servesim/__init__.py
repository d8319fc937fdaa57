"""servesim: trace, simulate and explain how an LLM serving engine schedules work.

The names below are imported on first use (PEP 562), so that `import servesim.cli` does not load numpy and the
engine before the command line has been read.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesim.config import EngineConfig
    from servesim.engine import simulate
    from servesim.request import Request, RequestStatus
    from servesim.run import Run

__all__ = ["EngineConfig", "Request", "RequestStatus", "Run", "__version__", "simulate"]
__version__ = "0.1.0"

_HOMES = {"EngineConfig": "servesim.config", "simulate": "servesim.engine", "Request": "servesim.request",
          "RequestStatus": "servesim.request", "Run": "servesim.run"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'servesim' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # once: later look-ups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
