"""Cost models, chosen by name. Each gives a step's duration in seconds from its composition."""

from __future__ import annotations

from collections.abc import Callable

from servesim.cost.base import CostModel, StepShape
from servesim.cost.simple import ToyCost, UnitCost
from servesim.errors import ConfigError

COST_MODELS: dict[str, Callable[..., CostModel]] = {"toy": ToyCost, "unit": UnitCost}


def get_cost_model(name: str, **params) -> CostModel:
    """Build a cost model by name; an unknown name is an error that lists the valid ones."""
    try:
        factory = COST_MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown cost model {name!r}; valid: {', '.join(sorted(COST_MODELS))}") from None
    return factory(**params)


__all__ = ["COST_MODELS", "CostModel", "StepShape", "ToyCost", "UnitCost", "get_cost_model"]
