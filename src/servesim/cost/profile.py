"""Calibrated profiles: a JSON (or TOML) file of fitted `CostParams` for one model and GPU, usable as `--cost`.

Format (`servesim calibrate` writes it; `get_cost_model("profile", path=...)` or `get_cost_model(PATH)` reads it):

    {"servesim_profile": 1, "model": "llama-2-7b", "gpu": "a100-80gb", "tp": 1,
     "params": {"compute_efficiency": 0.74, "memory_efficiency": 0.75, "kernel_latency_s": 6e-06,
                "step_overhead_s": 0.001, "allreduce": {"2": [[4.3e-05, 0.56]], "4": [...]}},
     "fit": {...held-out errors, for the record...}}

`allreduce` maps a tensor-parallel size to its (latency seconds, bandwidth efficiency) protocols; a `tp` the
profile has no entry for falls back to the GPU's default.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from servesim.cost.roofline import CostParams, Roofline
from servesim.cost.specs import load_gpu
from servesim.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROFILE_SUFFIXES = (".json", ".toml")


def profile_dict(model: str, gpu: str, tp: int, params: CostParams,
                 allreduce_by_tp: dict[int, tuple[tuple[float, float], ...]], fit: dict | None = None) -> dict:
    return {
        "servesim_profile": 1, "model": model, "gpu": gpu, "tp": tp,
        "params": {
            "compute_efficiency": params.compute_efficiency, "memory_efficiency": params.memory_efficiency,
            "kernel_latency_s": params.kernel_latency, "step_overhead_s": params.step_overhead,
            "allreduce": {str(k): [list(p) for p in v] for k, v in sorted(allreduce_by_tp.items())},
        },
        "fit": fit or {},
    }


def save_profile(path: str | Path, data: dict) -> None:
    path = Path(path)
    if path.suffix != ".json":
        raise ConfigError(f"{path}: profiles are written as .json (TOML profiles can be read, not written)")
    path.write_text(json.dumps(data, indent=2) + "\n")


def load_profile(path: str | Path, tp: int | None = None, model: str | None = None) -> Roofline:
    """A roofline with the profile's fitted constants; `tp`/`model` override the profile's own."""
    path = Path(path)
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such profile") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise ConfigError(f"{path}: not a readable profile ({exc})") from None
    try:
        p = data["params"]
        gpu = load_gpu(data["gpu"])
        tp = int(tp or data.get("tp", 1))
        by_tp = {int(k): tuple((float(a), float(b)) for a, b in v) for k, v in p.get("allreduce", {}).items()}
        params = replace(CostParams.defaults(gpu), compute_efficiency=float(p["compute_efficiency"]),
                         memory_efficiency=float(p["memory_efficiency"]),
                         kernel_latency=float(p["kernel_latency_s"]), step_overhead=float(p["step_overhead_s"]))
        if tp in by_tp:
            params = replace(params, allreduce=by_tp[tp])
        return Roofline(model or data["model"], gpu, tp, params)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise ConfigError(f"{path}: {exc}") from None
        raise ConfigError(f"{path}: malformed profile (field {exc})") from None
