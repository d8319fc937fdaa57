"""What the engines' conformance formats share (`servesim.engines.<name>.conformance`): a scenario's shape, a
recorded trace's bytes, and the comparison of two traces step by step. Each format says which fields of a step a
match compares."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

from servesim.cost.specs import InputDoc, check_keys, decode_input, read_input_bytes
from servesim.errors import WorkloadError


def check_scenario_shape(scenario: Any, doc: InputDoc, keys) -> None:
    """A scenario is a JSON object of known keys with 'config' and 'requests' (vLLM's and SGLang's formats)."""
    if not isinstance(scenario, dict):
        doc.fail_type((), scenario, "a JSON object with 'config' and 'requests'")
    check_keys(doc, scenario, (), keys)
    for key in ("config", "requests"):
        if key not in scenario:
            doc.fail((key,), "missing field; expected a scenario with 'config' and 'requests'")


def read_trace_text(path: Path, what: str) -> str:
    """A recorded trace's text, gunzipped when it is gzipped (one-line errors naming `what` was expected)."""
    data = read_input_bytes(path, what, WorkloadError)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise WorkloadError(f"{path}: not a readable gzip file ({exc}); expected {what}") from None
    return decode_input(path, data, what, WorkloadError)


def step_difference(i: int, e: dict[str, Any], a: dict[str, Any], entry_keys: tuple[str, ...],
                    step_keys: tuple[str, ...]) -> tuple[int, str, Any, Any] | None:
    """Step i's first differing field: its scheduled entries compared under `entry_keys` (0 where absent), then
    `step_keys` in order; None if they agree."""
    es = [{k: x.get(k, 0) for k in entry_keys} for x in e["scheduled"]]
    as_ = [{k: x.get(k, 0) for k in entry_keys} for x in a["scheduled"]]
    if es != as_:
        return i, "scheduled", es, as_
    for k in step_keys:
        if e.get(k) != a.get(k):
            return i, k, e.get(k), a.get(k)
    return None


def count_difference(exp: list, act: list) -> tuple[int, str, Any, Any] | None:
    """Traces that agree step for step as far as both go must have as many steps."""
    if len(exp) != len(act):
        return min(len(exp), len(act)), "number of steps", len(exp), len(act)
    return None
