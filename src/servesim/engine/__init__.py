"""The engine: requests in, one iteration at a time, frozen step records and request timelines out.

- `loop`: the iteration loop (`simulate`); `fastpath`: what the loop calls of the fast path, the decode cohort
  (`cohort`) and its stretches of steps planned at once (`stretch`);
- `request`, `config`, `kv`: what arrives, the knobs (vLLM's names), the paged KV block manager;
- `records`, `steplog`, `timelines`, `result`: what a run leaves for the readers in `servesim.analysis`.

`simulate` and `resolve_config` are imported on first use: the policies import this package's state types, and
the loop imports the policies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesim.engine.loop import RECORD_LEVELS, simulate
    from servesim.engine.resolve import resolve_config

__all__ = ["RECORD_LEVELS", "resolve_config", "simulate"]
_HOMES = {"simulate": "servesim.engine.loop", "RECORD_LEVELS": "servesim.engine.loop",
          "resolve_config": "servesim.engine.resolve"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'servesim.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
