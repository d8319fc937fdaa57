"""Speculative decoding in vLLM 0.33's v1 scheduler (`vllm/v1/core/sched/scheduler.py`, `async_scheduler.py`,
`v1/engine/core.py`): the scheduler's side of rules S1-S9 of ../shared/conformance/specdec/README.md, which
`VLLMScheduler.schedule` calls at its decision points (docs/speculative.md lists each rule with its source lines).

- S1 a running request asks for its drafts as extra tokens: `num_tokens_with_spec + num_output_placeholders -
  num_computed_tokens`, capped by the input budget less the draft slots and by `max_model_len - computed - 1`; the
  drafts scheduled are what is left past its known tokens, and its drafts are cleared (838-857, 1010-1025).
- S2 under draft_model each scheduled request costs `max_num_new_slots_for_drafting` input slots (797, 1003, 1295).
- S3/S6 KV for `min(computed + scheduled + num_lookahead_tokens, max_model_len)` (917, 1404-1440).
- S7 a waiting request with one token to compute is padded to 1 + K when something ran (1306-1330).
- S8 drafts proposed after a step go to the requests it scheduled, none to a partial prompt chunk
  (`update_draft_token_ids`, 2860-2876; `EngineCore.post_step`, `engine/core.py` 699-706); a preempted request
  loses its drafts (1823).
- S9 async scheduling: 1 + drafts placeholders on every request but a partial chunk after each schedule, and
  `[-1] * K` drafts, so the next step schedules 1 + K before the acceptance is known (`async_scheduler.py` 24-50).
"""

from __future__ import annotations

from servesim.engine.acceptance import Acceptance
from servesim.engine.kv import blocks_for
from servesim.engine.request import RequestState, RequestStatus
from servesim.engine.speculation import SpecDecodingStats, SpecStep
from servesim.engines.config import EngineConfig


class SpecDecode:
    """One run's speculative decoding on the scheduler's side: the config's derived numbers, the step's state (the
    input budget left), and under async scheduling what vLLM has not yet seen of the last step (`pending`)."""

    __slots__ = ("k", "lookahead", "draft_slots", "max_model_len", "acceptance", "async_scheduling",
                 "can_skip_drafts", "input_budget", "step", "pending", "stats")

    def __init__(self, cfg: EngineConfig) -> None:
        spec = cfg.speculative_config
        self.k = spec.num_speculative_tokens
        self.lookahead = spec.num_lookahead_tokens
        self.draft_slots = spec.max_num_new_slots_for_drafting
        self.max_model_len = cfg.max_model_len
        self.acceptance = (None if cfg.acceptance_rate is None
                           else Acceptance(cfg.acceptance_rate, cfg.acceptance_seed))
        self.async_scheduling = cfg.async_scheduling
        # the V2 runner skips drafting where nobody can use the drafts, for drafters with lookahead (319-321)
        self.can_skip_drafts = self.lookahead > 0 and cfg.use_v2_model_runner
        self.input_budget = cfg.max_num_batched_tokens
        self.step = SpecStep()
        self.stats = SpecDecodingStats(self.k)  # the run's, as vLLM counts them
        # async scheduling (S9): the last step's outcome per request that sampled in it, which vLLM processes only
        # after the next schedule(): (tokens gained, computed tokens rolled back, 1 + drafts placeholders)
        self.pending: dict[RequestState, tuple[int, int, int]] = {}

    def begin(self, budget: int) -> SpecStep:
        """A new schedule(): the input budget in full (max_num_batched_tokens), a new step."""
        self.input_budget = budget
        self.step = SpecStep()
        return self.step

    # -- vLLM's view of a request ----------------------------------------------------------------------------------
    def view(self, s: RequestState) -> tuple[int, int, int]:
        """(num_tokens, num_computed_tokens, num_output_placeholders) as vLLM's scheduler sees them: under async
        scheduling the last step's output is still in flight (its tokens not appended, its rollbacks not made,
        1 + its drafts held as placeholders); synchronously the request's own."""
        new, back, placeholders = self.pending.get(s, NOTHING_PENDING)
        return s.num_tokens - new, s.num_computed_tokens + back, placeholders

    def computed(self, s: RequestState) -> int:
        return s.num_computed_tokens + self.pending.get(s, NOTHING_PENDING)[1]

    # -- the running loop (S1, S2, S6, S9) --------------------------------------------------------------------------
    def out_of_slots(self) -> bool:
        """The scan stops once the input budget cannot hold a request's draft slots (797, 1068)."""
        return self.input_budget <= self.draft_slots

    def num_new_tokens(self, s: RequestState) -> int:
        """What a running request asks for: its known tokens, its drafts and its tokens in flight, less those
        computed (838-843); none under async scheduling once it finishes even with every draft in flight
        rejected (799-811)."""
        num_tokens, computed, placeholders = self.view(s)
        if placeholders and computed + 2 - placeholders >= s.request.prompt_len + s.request.output_len:
            return 0
        return num_tokens + s.num_spec_token_ids + placeholders - computed

    def cap(self, s: RequestState, n: int) -> int:
        """The input budget less the draft slots, and the model length less one sampled token (845-857)."""
        return min(n, self.input_budget - self.draft_slots, self.max_model_len - self.computed(s) - 1)

    def slots(self, s: RequestState, n: int) -> int:
        """Lookahead KV slots past `n` scheduled tokens, the whole capped at max_model_len (S3, S6)."""
        end = self.computed(s) + n
        return max(0, min(end + self.lookahead, self.max_model_len) - end)

    def blocks_for_slots(self, computed: int, n: int, block_size: int) -> int:
        """The blocks a request with `computed` tokens needs for `n` more and their lookahead slots."""
        return blocks_for(min(computed + n + self.lookahead, self.max_model_len), block_size)

    def scheduled(self, s: RequestState, n: int) -> None:
        """`s` got `n` tokens: the drafts among them are verified this step, the rest of its drafts dropped
        (1010-1025), and its input slots spent."""
        self.input_budget -= n + self.draft_slots
        held = s.num_spec_token_ids
        self.step.before[s] = held
        if held:
            num_tokens, computed, placeholders = self.view(s)
            d = min(held, n + computed - num_tokens - placeholders)
            if d > 0:
                self.step.drafts[s] = d
            s.num_spec_token_ids = 0

    def unscheduled(self, s: RequestState, n: int) -> None:
        """A priority victim already scheduled gives back its tokens, its draft slots and its drafts (946-957)."""
        self.input_budget += n + self.draft_slots
        self.step.drafts.pop(s, None)
        self.step.before.pop(s, None)
        self.step.padded.discard(s)

    # -- the waiting loop (S7) ------------------------------------------------------------------------------------
    def request_budget(self, budget: int) -> int:
        return min(budget, self.input_budget - self.draft_slots)

    def pads(self, s: RequestState, n: int, computed: int, ran: bool, prefill_scheduled: bool) -> bool:
        """A waiting request with one token to compute is padded to 1 + K drafts of -1 to keep the batch uniform,
        when no running prompt chunk was scheduled, something ran or was computed, and 1 + K + the sampled token
        fit in the model length (1306-1330)."""
        return (n == 1 and not prefill_scheduled and (ran or computed > 0)
                and computed + 1 + self.k + 1 <= self.max_model_len)

    def padded(self, s: RequestState) -> None:
        self.step.padded.add(s)
        self.step.drafts[s] = self.k

    # -- after schedule() ------------------------------------------------------------------------------------------
    def finish_schedule(self, scheduled: dict[RequestState, int]) -> SpecStep:
        """skip_drafts (informational: it cannot change a schedule, S11), each verification's acceptance, and under
        async scheduling K placeholder drafts on every request that samples (S9)."""
        step = self.step
        step.skip_drafts = self.can_skip_drafts and all(self._drafts_unused(s, n) for s, n in scheduled.items())
        step.draw(self.acceptance, self.stats)
        if self.async_scheduling:
            for s, n in scheduled.items():
                num_tokens, computed, placeholders = self.view(s)
                if computed + n >= num_tokens + placeholders:  # (not a partial prompt chunk)
                    s.num_spec_token_ids = self.k
        return step

    def _drafts_unused(self, s: RequestState, n: int) -> bool:
        """Drafts proposed after this step would go unused: a partial prompt chunk, or a request sure to finish
        even with every draft rejected (`_drafts_unused`, 502-545)."""
        num_tokens, computed, placeholders = self.view(s)
        if computed + n < num_tokens:
            return True
        least = num_tokens - s.request.prompt_len + 1 + (1 if placeholders else 0)
        return least >= s.request.output_len

    # -- after the step ------------------------------------------------------------------------------------------
    def after_step(self, scheduled: dict[RequestState, int]) -> None:
        """Synchronously, the engine core's post_step hands the drafter's proposals to the requests the step ran:
        K drafts each (the V1 runner's variable n-gram proposals: min(draft_lens[i], K)), none after a partial
        prompt chunk, none to a finished request (S8). Asynchronously it hands back nothing (the placeholders stand
        for the drafts), and what vLLM has not seen of this step is kept for the next schedule()."""
        if self.async_scheduling:
            self._keep_pending()
            return
        for s in scheduled:
            if s.status is not RequestStatus.RUNNING:  # (finished, or preempted)
                continue
            if s.is_prefill_chunk:
                s.num_spec_token_ids = 0
                continue
            lens = s.request.draft_lens
            if lens is not None:
                s.num_spec_token_ids = min(lens[s.num_proposals % len(lens)], self.k)
                s.num_proposals += 1
            else:
                s.num_spec_token_ids = 0 if self.step.skip_drafts else self.k

    def _keep_pending(self) -> None:
        step, pending = self.step, {}
        for s, gained in step.outputs.items():
            d, a = step.drafts.get(s, 0), step.accepted.get(s, 0)
            pending[s] = (gained, d - a + 1 + a - gained, 1 + d)
        self.pending = pending


NOTHING_PENDING = (0, 0, 0)
