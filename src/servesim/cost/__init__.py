"""Cost models, chosen by name. Each gives a step's duration in seconds from its composition.

`get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb", tp=1)` is the datasheet roofline;
`get_cost_model("profile", path="fit.json")`, or simply `get_cost_model("fit.json")`, a calibrated one;
`get_cost_model("aic", ...)` the measured-kernel tier (`servesim.cost.aic`, the `servesim[aic]` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servesim.cost.base import CostModel, StepShape
from servesim.cost.profile import PROFILE_SUFFIXES, load_profile
from servesim.cost.roofline import CostParams, OpCost, Roofline
from servesim.cost.simple import ToyCost, UnitCost
from servesim.cost.specs import GpuSpec, ModelSpec, load_gpu, load_model
from servesim.errors import ConfigError


def _aic(**params) -> CostModel:
    from servesim.cost.aic import AicKernels  # (aiconfigurator-core is imported only when asked for)

    return AicKernels(**params)


COST_MODELS: dict[str, Callable[..., CostModel]] = {
    "aic": _aic,
    "toy": ToyCost,
    "unit": UnitCost,
    "roofline": Roofline,
    "profile": load_profile,
}
# What a real workload gets when the user names no cost model (the lessons keep `toy`).
DEFAULT_REAL_COST = {"name": "roofline", "model": "llama-3-8b", "gpu": "h100-80gb", "tp": 1}


def get_cost_model(name: str, **params) -> CostModel:
    """Build a cost model by name, or from a profile path (`*.json`/`*.toml`); unknown names list the valid ones."""
    if name not in COST_MODELS and Path(name).suffix in PROFILE_SUFFIXES:
        return load_profile(name, **params)
    try:
        factory = COST_MODELS[name]
    except KeyError:
        raise ConfigError(
            f"unknown cost model {name!r}; valid: {', '.join(sorted(COST_MODELS))}, or a profile PATH.json"
        ) from None
    try:
        return factory(**params)
    except TypeError as exc:  # an option this cost model does not have
        raise ConfigError(f"cost model {name!r}: {exc}") from None


__all__ = [
    "COST_MODELS", "DEFAULT_REAL_COST", "CostModel", "CostParams", "GpuSpec", "ModelSpec", "OpCost", "Roofline",
    "StepShape", "ToyCost", "UnitCost", "get_cost_model", "load_gpu", "load_model", "load_profile",
]
