"""The engines servesim reproduces, each declared once by its own package (`servesim.engines.<name>.engine.ENGINE`).

The CLI, `conform`, `compare`, `sweep`, the cluster layer and the report look an engine up here by policy name
instead of branching on names: its schedulers, how its configuration is resolved, its own config section and CLI
flags, its host-overhead preset and its conformance format. A new engine is one package and one line below.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servesim.errors import ConfigError

if TYPE_CHECKING:
    from servesim.engine.request import Request
    from servesim.engine.scheduler import Scheduler
    from servesim.engines.config import EngineConfig

DEFAULT_POLICY = "vllm"  # what `simulate` runs when no policy is named
# servesim.engines.<package>.engine.ENGINE, in the order `--help` lists them
PACKAGES = ("lesson", "vllm", "sglang", "trtllm")


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """What an engine package declares. Modules named as "module:attribute" are imported on first use (the CLI's
    flags need typer; a conformance module imports the loop; a run imports its own policy's scheduler only)."""

    name: str  # the package: servesim.engines.<name>
    display: str  # how messages name the engine ("vLLM", "SGLang")
    version: str  # the release its rules follow ("0.33.0"); each module's docstring pins it too
    policies: Mapping[str, str]  # --policy name -> its scheduler class, "module:Class" (`scheduler(policy)`)
    # (config, scheduler class, requests, cost) -> the frozen config a run uses: defaults per GPU and model filled,
    # the engine's start-up checks made
    resolve: Callable[[EngineConfig, type[Scheduler], Sequence[Request], Any], EngineConfig]
    section: str | None = None  # the EngineConfig field that holds the engine's own server arguments
    # its CLI flags' module: `FLAGS`, a dataclass of typer options that `cli.options.SimOptions` mixes in, and for
    # an engine with a section `given(opts)`, the section's fields given (`FLAG_OF`: a field's flag, if not
    # --field-name)
    flags: str | None = None
    host_preset: str | None = None  # the roofline's engine profile when --engine is not given (None: the default)
    conformance: str | None = None  # the module that runs a shared conformance scenario and compares traces
    # the shared knobs (vLLM's names) under this engine's own names, for messages; and the hook that carries a
    # config's shared sizes over into the engine's section (None: the shared knobs are the engine's own)
    own_names: Mapping[str, str] = field(default_factory=dict)
    from_shared_sizes: Callable[..., tuple[EngineConfig, list[str]]] | None = None
    sizes_caveat: str = ""  # what a note on the carried-over sizes adds (how they differ in meaning)
    preemption_word: str = "preemptions"  # what the engine calls taking a running request off the GPU
    rejected_by: str | None = None  # who refuses a request longer than max_model_len (None: `display`)
    pd_decode: tuple[str, ...] = ()  # its policies a P/D decode pool can run (it admits remotely prefilled requests)
    # a resolved run's config with chunked prefill off, to run again (explain's counterfactual); None: the shared
    # knob off and the budget back at its default
    unchunked: Callable[[EngineConfig], EngineConfig] | None = None
    # a resolved run's config without its engine's own speculative decoding, the same pool (explain's comparison)
    unspeculative: Callable[[EngineConfig], EngineConfig] | None = None
    # explain's "what bound each step" under the engine's own names, filled from a resolved config (None: vLLM's)
    bound_text: Callable[[EngineConfig], dict[str, str]] | None = None

    @property
    def rejecter(self) -> str:
        return self.rejected_by or self.display

    def load(self, what: str) -> Any:
        return _import(getattr(self, what))

    def scheduler(self, policy: str) -> type[Scheduler]:
        return _import(self.policies[policy])


def _import(name: str) -> Any:
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr) if attr else importlib.import_module(module)


_ENGINES: tuple[EngineSpec, ...] | None = None


def engines() -> tuple[EngineSpec, ...]:
    global _ENGINES
    if _ENGINES is None:
        _ENGINES = tuple(importlib.import_module(f"servesim.engines.{p}.engine").ENGINE for p in PACKAGES)
    return _ENGINES


def policies() -> tuple[str, ...]:
    """Every policy name (`policy_class` imports one's scheduler)."""
    return tuple(name for e in engines() for name in e.policies)


def engine_for(policy: str) -> EngineSpec:
    for e in engines():
        if policy in e.policies:
            return e
    raise ConfigError(f"unknown policy {policy!r}; valid: {', '.join(policies())}")


def policy_class(policy: str) -> type[Scheduler]:
    return engine_for(policy).scheduler(policy)


def by_section(section: str) -> EngineSpec:
    return next(e for e in engines() if e.section == section)


def sections() -> tuple[str, ...]:
    """The EngineConfig fields that hold an engine's own server arguments."""
    return tuple(e.section for e in engines() if e.section)


def conformance_for(scenario: Any) -> EngineSpec | None:
    """The engine whose conformance format a parsed scenario is in: the one whose scenario config takes every key
    the scenario's config has (beyond the queue policy, which both formats have); None when not exactly one."""
    config = scenario.get("config") if isinstance(scenario, dict) else None
    keys = set(config) - {"policy"} if isinstance(config, dict) else set()
    found = [e for e in engines() if e.conformance and keys and keys <= set(e.load("conformance").SCENARIO_CONFIG_KEYS)]
    return found[0] if len(found) == 1 else None


def make_scheduler(policy: str, config: EngineConfig, explain: bool = True,
                   prefix_caching: bool = False) -> Scheduler:
    """`prefix_caching`: the KV pool keeps block identities and the prefix cache (policies that model it)."""
    sched = policy_class(policy)(config, explain=explain)
    if prefix_caching:
        sched.use_prefix_cache()
    return sched
