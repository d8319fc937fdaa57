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

    def draw(self, acceptance: Acceptance | None) -> None:
        """Each verification's accepted drafts (the target model's rejection sampling, given), and the requests'
        counters."""
        for s, d in self.drafts.items():
            step = s.num_verify_steps
            s.num_verify_steps += 1
            a = 0 if s in self.padded else num_accepted(s, step, d, acceptance)
            self.accepted[s] = a
            s.num_draft_tokens += d
            s.num_accepted_tokens += a


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
