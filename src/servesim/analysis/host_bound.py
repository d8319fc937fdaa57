"""Whether the host or the GPU bound a run's decode steps: a reader over the step records, never in the loop.

A cost model with an engine profile (`Roofline(..., engine=...)`) splits a step into device seconds, host seconds
and eager issue seconds (`Roofline.split`). Re-pricing every step of a long run would cost as much as the run, so
at most `sample` decode-only steps are read, evenly spaced over the run; the sentence says how many.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.cost.base import StepShape
from servesim.engine.records import Kind, StepRecord
from servesim.engine.result import SimResult

SAMPLE_STEPS = 2000


@dataclass(frozen=True, slots=True)
class HostSplit:
    steps: int  # decode-only steps read
    of: int  # decode-only steps in the run
    host: float  # mean seconds of host work per step: the engine's per-step work and (eager) its kernel launches
    launch: float  # of which launching kernels one by one (--enforce-eager)
    device: float  # mean seconds of GPU kernel work per step

    @property
    def host_bound(self) -> bool:
        return self.host > self.device


def shape_of(step: StepRecord) -> StepShape:
    """The step as the cost model priced it: each entry's new tokens after its computed ones."""
    entries = list(step.scheduled)
    return StepShape(tuple(e.num_scheduled_tokens for e in entries),
                     tuple(e.num_computed_tokens_before for e in entries),
                     tuple(e.kind is Kind.DECODE for e in entries), sum(e.samples_token for e in entries))


def decode_split(result: SimResult, cost, sample: int = SAMPLE_STEPS) -> HostSplit | None:
    """Mean host and device time of the run's decode-only steps; None without an engine profile or decodes."""
    if getattr(cost, "engine", None) is None or not hasattr(cost, "split"):
        return None
    decode = [s for s in result.steps if s.total_scheduled_tokens and not s.prefill_tokens]
    if not decode:
        return None
    picked = decode[:: max(1, -(-len(decode) // sample))]
    host = launch = device = 0.0
    for s in picked:
        d, h, issue = cost.split(shape_of(s))
        host, launch, device = host + h + issue, launch + issue, device + d
    n = len(picked)
    return HostSplit(n, len(decode), host / n, launch / n, device / n)


def host_bound_sentence(result: SimResult, cost) -> str | None:
    """"decode steps were host-bound: 6.1 ms of host work against 4.3 ms of GPU work ..." when they were."""
    split = decode_split(result, cost)
    if split is None or not split.host_bound:
        return None
    eager = f" ({split.launch * 1e3:.1f} ms of it launching kernels eagerly)" if split.launch else ""
    read = f"all {split.of:,}" if split.steps == split.of else f"{split.steps:,} of {split.of:,}, evenly spaced"
    return (f"Decode steps were host-bound: {split.host * 1e3:.1f} ms of host work{eager} against "
            f"{split.device * 1e3:.1f} ms of GPU work per step (means over {read} decode-only steps; engine "
            f"{cost.engine.name}).")
