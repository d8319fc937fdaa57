"""What a simulation returns: the step records, the per-request timelines and the preemption ledger."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servesim.engine.records import Preemption, RequestTimeline, StepRecord
from servesim.engine.speculation import SpecDecodingStats
from servesim.engine.steplog import StepArrays
from servesim.engine.timelines import Timelines
from servesim.engines.config import EngineConfig


@dataclass(frozen=True, slots=True)
class PrefixCacheStats:
    """vLLM's prefix-cache counters over a run: tokens looked up at (re)admissions, tokens hit, blocks evicted."""

    query_tokens: int
    hit_tokens: int
    evicted_blocks: int
    # with record="full" only (None otherwise): tokens, and (re)admissions, whose lookup stopped at a block that
    # had been cached and was evicted, counted over the run of blocks it would then have hit
    lost_tokens: int | None = None
    lost_admissions: int | None = None

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


@dataclass(frozen=True, slots=True)
class SimResult:
    policy: str
    cost_model: str
    config: EngineConfig  # as resolved for the workload (defaults filled in)
    steps: tuple[StepRecord, ...]
    requests: Sequence[RequestTimeline]  # in workload order: `Timelines` (columns) from the engine
    preemptions: tuple[Preemption, ...]
    step_log: StepArrays | None = None  # compact per-step arrays, kept at every record level
    record: str = "full"  # which step records were kept: full (with waiting reasons) | steps | summary
    # ids of the requests that failed on arrival, longer than max_model_len (vLLM rejects them; `vllm bench serve`
    # counts them as failed): never scheduled, no tokens
    rejected: tuple[str, ...] = ()
    prefix_cache: PrefixCacheStats | None = None  # with prefix caching on requests that carry hash_ids
    # ids of the requests sent without max_tokens whose output was cut at max_model_len - prompt_len (vLLM's
    # get_max_tokens): they ran, with fewer output tokens than their output_len
    clamped: tuple[str, ...] = ()
    # SGLang's overlap loop: iterations that ran no forward, only processed the last step's result (no step record)
    idle_iterations: int = 0
    # speculative decoding: verifications, drafts verified and accepted, per position (vLLM's SpecDecodingStats)
    spec_decoding: SpecDecodingStats | None = None

    @property
    def timelines(self) -> Timelines:
        """The timelines as columns (the engine's own; built from objects for a result made by hand)."""
        return Timelines.of(self.requests)

    @property
    def makespan(self) -> float:
        """Seconds from the first arrival to the last finish."""
        t = self.timelines
        if not len(t):
            return 0.0
        start = float(t.arrival_time.min())
        done = t.finish_time[t.finished]
        return (float(done.max()) if done.size else start) - start

    def request(self, request_id: str) -> RequestTimeline:
        t = self.timelines
        try:
            return t[t.index_of(request_id)]
        except ValueError:
            import difflib

            from servesim.errors import UnknownRequest

            ids = [str(i) for i in t.ids]
            near = difflib.get_close_matches(str(request_id), ids, n=3)
            if near:
                hint = f"; did you mean {', '.join(near)}?"
            else:
                hint = f"; its ids: {', '.join(ids[:8])}{', ...' if len(ids) > 8 else ''}" if ids else ""
            raise UnknownRequest(f"request {request_id!r} is not in this run{hint}") from None

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
