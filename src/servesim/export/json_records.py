"""Step records and request timelines as plain JSON-able data."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from servesim.engine.records import RequestTimeline, StepRecord
from servesim.engine.result import SimResult
from servesim.output import open_output


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):  # (an engine's config section)
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def step_to_dict(step: StepRecord) -> dict[str, Any]:
    d = {f.name: getattr(step, f.name) for f in fields(step)}
    d["scheduled"] = [asdict(e) for e in step.scheduled]
    d["waiting"] = [asdict(w) for w in step.waiting]
    d = _plain(d)
    d["total_scheduled_tokens"] = step.total_scheduled_tokens
    return d


def timeline_to_dict(r: RequestTimeline) -> dict[str, Any]:
    d = {f.name: getattr(r, f.name) for f in fields(r) if f.name not in ("token_steps", "clock")}
    d["token_times"] = list(r.token_times)
    return d


def result_to_dict(result: SimResult) -> dict[str, Any]:
    cfg = _plain({f.name: getattr(result.config, f.name) for f in fields(result.config)})
    return {
        "policy": result.policy,
        "cost_model": result.cost_model,
        "config": cfg,
        "steps": [step_to_dict(s) for s in result.steps],
        "requests": [timeline_to_dict(r) for r in result.requests],
        "preemptions": [_plain(asdict(p)) for p in result.preemptions],
    }


def write_json(path: str | Path, data: Any, option: str = "output") -> None:
    """Write where `path` points (`servesim.output`: `-` is stdout, links followed, atomically over a file)."""
    with open_output(path, option) as f:
        json.dump(data, f, indent=1)
        f.write("\n")
