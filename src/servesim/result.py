"""What a simulation returns: the step records, the per-request timelines and the preemption ledger."""

from __future__ import annotations

from dataclasses import dataclass

from servesim.config import EngineConfig
from servesim.records import Preemption, RequestTimeline, StepRecord
from servesim.steplog import StepArrays


@dataclass(frozen=True, slots=True)
class SimResult:
    policy: str
    cost_model: str
    config: EngineConfig  # as resolved for the workload (defaults filled in)
    steps: tuple[StepRecord, ...]
    requests: tuple[RequestTimeline, ...]  # in workload order
    preemptions: tuple[Preemption, ...]
    step_log: StepArrays | None = None  # compact per-step arrays, kept at every record level
    record: str = "full"  # which step records were kept: full (with waiting reasons) | steps | summary

    @property
    def makespan(self) -> float:
        """Seconds from the first arrival to the last finish."""
        if not self.requests:
            return 0.0
        start = min(r.arrival_time for r in self.requests)
        end = max((r.finish_time for r in self.requests if r.finish_time is not None), default=start)
        return end - start

    def request(self, request_id: str) -> RequestTimeline:
        for r in self.requests:
            if r.id == request_id:
                return r
        raise KeyError(request_id)

    @property
    def tokens_processed(self) -> int:
        if self.step_log is not None:
            return self.step_log.total("num_tokens")
        return sum(s.total_scheduled_tokens for s in self.steps)

    @property
    def recomputed_tokens(self) -> int:
        return sum(p.tokens_discarded for p in self.preemptions)

    @property
    def recompute_tax(self) -> float:
        """Recomputed tokens / all tokens processed (0 when nothing was preempted)."""
        total = self.tokens_processed
        return self.recomputed_tokens / total if total else 0.0
