"""Request-level (static) batching, as ../shared/spec/lesson.txt describes it: a batch forms, runs to completion,
and only then does the next one form."""

from __future__ import annotations

from servesim.engine.records import Reason
from servesim.engine.request import RequestState
from servesim.engine.scheduler import Scheduler, SchedulerOutput


class StaticScheduler(Scheduler):
    name = "static"
    chunked = False
    reserves_lifetime_kv = True
    unread = {
        "long_prefill_token_threshold": "static batching never splits a prompt",
        "watermark": "static batching reserves each request's whole length when it joins a batch",
        "enable_prefix_caching": "static batching keeps no prefix cache",
        "speculative_config": "the lesson's static batching has no speculative decoding (--policy vllm has)",
        **dict.fromkeys(("preemption_mode", "swap_space", "num_cpu_blocks", "pcie_bandwidth", "kv_bytes_per_token"),
                        "static batching never preempts (each request holds KV for its whole length)"),
    }

    def schedule(self, num_decoding_ahead: int = 0) -> SchedulerOutput:
        self.out = out = SchedulerOutput()
        if self.running:  # a batch is in flight: its unfinished members decode; nothing joins
            for req in self.running[num_decoding_ahead:]:  # the engine's decode cohort already has its token
                if req.num_tokens_needed:
                    out.scheduled[req] = req.num_tokens_needed
            self.note_rest(self.waiting, Reason.BATCH_CLOSED, "the running batch must finish first")
            return out
        # a new batch: up to max_num_seqs waiting requests, prompts prefilled together in one step.
        # NOTE: a static batch cannot preempt, so it reserves KV for each member's whole lifetime.
        budget = self.config.max_num_batched_tokens
        while len(self.waiting):
            req = self.waiting.peek()
            why = self._cannot_admit(req, budget)
            if why:
                self.note_rest(self.waiting, *why)
                break
            self.kv.allocate(req, self._lifetime_tokens(req))
            self.waiting.pop()
            self.admit(req, req.num_tokens_needed)
            budget -= req.num_tokens_needed
        return out

    @staticmethod
    def _lifetime_tokens(req: RequestState) -> int:
        # the last output token is sampled but never fed back, so it never enters the cache
        return req.request.prompt_len + req.request.output_len - 1

    def _cannot_admit(self, req: RequestState, budget: int) -> tuple[Reason, str, bool] | None:
        if len(self.running) >= self.config.max_num_seqs:
            return Reason.MAX_NUM_SEQS, f"{len(self.running)} in the batch = max_num_seqs", True
        if req.num_tokens_needed > budget:
            return Reason.TOKEN_BUDGET, f"prompt of {req.num_tokens_needed} tokens, {budget} left", False
        need = self.kv.blocks_needed(req, self._lifetime_tokens(req))
        if not self.kv.can_fit(need):
            return Reason.KV_BLOCKS, f"needs {need} blocks for its whole length, {self.kv.free_blocks} free", False
        return None
