"""Scheduling policies, chosen by name. Each is one readable `schedule()` over the shared scheduler state."""

from __future__ import annotations

from servesim.engine.config import EngineConfig
from servesim.errors import ConfigError
from servesim.policies.base import Scheduler, SchedulerOutput
from servesim.policies.sglang import SGLangScheduler
from servesim.policies.static import StaticScheduler
from servesim.policies.vllm import ContinuousScheduler, VLLMScheduler
from servesim.policies.vllm_v0 import VLLMv0Scheduler

POLICIES: dict[str, type[Scheduler]] = {
    "static": StaticScheduler,
    "continuous": ContinuousScheduler,
    "vllm": VLLMScheduler,
    "vllm-v0": VLLMv0Scheduler,
    "sglang": SGLangScheduler,
}


def policy_class(name: str) -> type[Scheduler]:
    try:
        return POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown policy {name!r}; valid: {', '.join(POLICIES)}") from None


def make_scheduler(name: str, config: EngineConfig, explain: bool = True, prefix_caching: bool = False) -> Scheduler:
    """`prefix_caching`: the KV pool keeps block identities and the prefix cache (policies that model it)."""
    sched = policy_class(name)(config, explain=explain)
    if prefix_caching:
        sched.use_prefix_cache()
    return sched


__all__ = ["POLICIES", "Scheduler", "SchedulerOutput", "make_scheduler", "policy_class"]
