"""A step's speculative decoding, as the engine loop reads it: the drafts each request verifies, how many it
accepts, and what its output becomes (engine-neutral; an engine's scheduler fills `SpecStep`, e.g.
`servesim.engines.vllm.spec_decode`).

A verification of d drafts that accepts a yields a + 1 tokens (the accepted drafts and one bonus or corrected
token); the d - a rejected drafts were computed for nothing, so the computed tokens roll back by them. Tokens past
the request's last are dropped, and the computed tokens roll back by those too (vLLM's `update_from_output` and
`_update_request_with_output`, `v1/core/sched/scheduler.py` 2346-2364, 2752-2764).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servesim.engine.acceptance import Acceptance, listed
from servesim.engine.request import RequestState


@dataclass(slots=True)
class SpecStep:
    """What a step verifies, per request scheduled with drafts (a request absent has none)."""

    drafts: dict[RequestState, int] = field(default_factory=dict)  # drafts scheduled (verified this step)
    accepted: dict[RequestState, int] = field(default_factory=dict)  # of those, accepted
    before: dict[RequestState, int] = field(default_factory=dict)  # drafts it held before schedule()
    padded: set[RequestState] = field(default_factory=set)  # drafts the scheduler padded in (never accepted)
    outputs: dict[RequestState, int] = field(default_factory=dict)  # tokens each sampling request gained (the loop's)
    skip_drafts: bool = False  # the drafter proposes nothing after this step (no request could use the drafts)

    def draw(self, acceptance: Acceptance | None, stats: SpecDecodingStats | None = None) -> None:
        """Each verification's accepted drafts (the target model's rejection sampling, given), the requests'
        counters and the run's `stats`."""
        for s, d in self.drafts.items():
            step = s.num_verify_steps
            s.num_verify_steps += 1
            padded = s in self.padded
            a = 0 if padded else num_accepted(s, step, d, acceptance)
            self.accepted[s] = a
            s.num_draft_tokens += d
            s.num_accepted_tokens += a
            if stats is not None:  # (padded drafts are vLLM's invalid ones: observed as none)
                stats.observe_draft(0 if padded else d, a)


@dataclass(slots=True)
class SpecDecodingStats:
    """A run's speculative decoding as vLLM 0.33 counts it (`v1/spec_decode/metrics.py`, `SpecDecodingStats`;
    `vllm bench serve`'s "Speculative Decoding" block reads the same counters): verifications (`num_drafts`),
    drafts verified and accepted, and how often each position was accepted. A verification of drafts the scheduler
    padded in counts with none (vLLM subtracts them as invalid, `scheduler.py` 3313-3319)."""

    num_spec_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.num_accepted_tokens_per_pos:
            self.num_accepted_tokens_per_pos = [0] * self.num_spec_tokens

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        for i in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[i] += 1

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts over drafts verified (`vllm bench serve`'s "Acceptance rate", as a fraction)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def acceptance_length(self) -> float:
        """Tokens a verification yields on average: 1 + accepted / verifications ("Acceptance length")."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0

    @property
    def per_position_acceptance_rates(self) -> list[float]:
        """How often the i-th draft was accepted, per verification."""
        n = self.num_drafts
        return [a / n if n else 0.0 for a in self.num_accepted_tokens_per_pos]

    @property
    def num_wasted_tokens(self) -> int:
        """Drafts computed and rejected: the target's work for nothing."""
        return self.num_draft_tokens - self.num_accepted_tokens


def num_accepted(s: RequestState, step: int, num_drafts: int, acceptance: Acceptance | None) -> int:
    """Drafts accepted at `s`'s `step`-th verification: its own list if it has one, else the run's draw."""
    accept = s.request.accept
    if accept is not None:
        return listed(accept, step, num_drafts)
    return 0 if acceptance is None else acceptance.draw(s.index, step, num_drafts)


def verified(s: RequestState, num_drafts: int, num_accepted: int) -> int:
    """Roll `s` back past its rejected drafts and the tokens beyond its last; the tokens it gains (>= 1)."""
    s.num_computed_tokens -= num_drafts - num_accepted
    sampled = 1 + num_accepted
    kept = min(sampled, s.request.output_len - s.num_output_tokens)
    s.num_computed_tokens -= sampled - kept
    return kept
