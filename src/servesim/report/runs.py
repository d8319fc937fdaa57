"""The runs a report lays side by side: one policy, several (`--policies`), or one knob's values (`--set`).

The same rules as `servesim compare` (`analysis.compare`): a token budget applies to the chunking policies only.
Each run keeps the step records of its first `DETAIL_STEPS` steps (`simulate(max_records=...)`): a small run keeps
them all, and its report is exact (every prompt chunk, every waiting reason); a large one (a one-hour trace:
~350,000 steps) runs at the speed of record="summary" after that, and its report is drawn from the step log and
the timelines, aggregated, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servesim.cost import CostModel
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engine.result import SimResult
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError

DETAIL_STEPS = 5000  # steps whose full records a report keeps


@dataclass(frozen=True, slots=True)
class LabelledRun:
    label: str  # the policy, or knob=value
    result: SimResult


def _simulate(requests: Sequence[Request], config: EngineConfig, policy: str, cost: CostModel | str,
              progress=None) -> SimResult:
    return simulate(requests, config, policy, cost, record="full", max_records=DETAIL_STEPS, progress=progress)


def report_runs(requests: Sequence[Request], config: EngineConfig, cost: CostModel | str, policy: str,
                policies: str | None = None, set_: str | None = None,
                progress=None) -> tuple[list[LabelledRun], list[str]]:
    """The runs and the notes to print with them (a budget that applies to chunking policies only)."""
    from servesim.analysis.compare import parse_set, policy_configs

    if policies is not None and set_ is not None:
        raise ConfigError("give one of --policies A,B,... or --set KNOB=V1,V2,..., not both")
    if set_ is not None:
        knob, values = parse_set(set_)
        return [LabelledRun(f"{knob}={v}", _simulate(requests, config.with_knobs({knob: v}), policy, cost, progress))
                for v in values], []
    names = [policy] if policies is None else [p.strip() for p in policies.split(",") if p.strip()]
    if not names:
        raise ConfigError(f"--policies {policies!r}: name at least one policy")
    if len(set(names)) < len(names):
        raise ConfigError(f"--policies {policies!r}: a policy is named twice")
    # several policies: each its own config, as `compare` gives it (an engine's section for its runs only, vLLM's
    # sizes carried over to an engine with its own knobs, a budget for the chunking policies only)
    configs, notes, skipped = policy_configs(names, config) if policies is not None else ({policy: config}, [], [])
    runs = [LabelledRun(name, _simulate(requests, cfg, name, cost, progress)) for name, cfg in configs.items()]
    if skipped:
        budget = next(r.result.config.max_num_batched_tokens for r in runs if r.label == skipped[0])
        notes.append(f"max_num_batched_tokens {config.max_num_batched_tokens} applies to the chunking policies "
                     f"only; {', '.join(skipped)} never chunk, so their budget is vLLM's default without chunking, "
                     f"max(max_model_len, 2048) = {budget}")
    return runs, notes
