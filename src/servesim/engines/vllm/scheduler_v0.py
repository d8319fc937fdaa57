"""vLLM v0's default scheduler (pinned: vLLM v0.5.x, commit 0dce2b29; chunked prefill off): every step is all
prefills or all decodes, prefills first.

Rules as read in vLLM v0's `vllm/core/scheduler.py` (`Scheduler._schedule_default`, `_schedule_prefills`,
`_schedule_running`, `_schedule_swapped`, `_preempt`) at commit 0dce2b29 (the v0.5.x line, block manager v1 the
default) and `vllm/core/block_manager_v1.py` (`can_allocate`, `can_append_slots`, `can_swap_in`):

1. Nothing swapped: waiting requests are admitted in FCFS order, whole prompts (a recomputed request: prompt and
   outputs so far), each needing free - required >= watermark blocks, then prompt tokens within
   max_num_batched_tokens and running + admitted <= max_num_seqs; the first that fails stops admission (no
   skipping). A step that admits anything is a prefill step: no decode runs in it.
2. No prefill admitted: every running request decodes one token, in running order; a decode whose block does not
   fit preempts the last running request (the newest), itself when it is the last; recompute, or swap
   (`preemption_mode`).
3. A decode step without a preemption then swaps requests back in, oldest first, while their blocks fit above the
   watermark and a seat is free. While anything is swapped, no prefill is tried.

Differences, on purpose: a decode needs a block only when it fills its last one (block manager v2's exact count;
v1 asks one free block per running request every step); the watermark counts only while anything runs
(`Scheduler.watermark_blocks`), which changes only requests v0 could never admit; v0's prompt limit
(min(max_model_len, budget), FINISHED_IGNORED) never fires here, as the engine rejects requests longer than
max_model_len on arrival and the budget is at least max_model_len; a full swap pool recomputes the victim
(v0 aborts the engine).
"""

from __future__ import annotations

from servesim.engine.kv import blocks_for
from servesim.engine.records import Reason
from servesim.engine.request import RequestState
from servesim.engine.scheduler import Scheduler, SchedulerOutput


class VLLMv0Scheduler(Scheduler):
    name = "vllm-v0"
    unread = {"long_prefill_token_threshold": "vLLM v0's default scheduler never splits a prompt",
              "long_prefill_token_threshold_adaptive": "vLLM v0's default scheduler never splits a prompt",
              **dict.fromkeys(("max_num_active_seqs", "prefill_schedule_interval"),
                              "a vLLM 0.33 v1 scheduler knob (v0 has none)"),
              "enable_prefix_caching": "servesim's vLLM v0 keeps no prefix cache (v0's was opt-in and is not modelled)",
              "speculative_config": "vLLM v0's speculative decoding is not modelled (vLLM 0.33 speculates in v1: "
                                    "--policy vllm)"}
    chunked = False  # the budget defaults to max(max_model_len, 2048)
    # A prefill step runs no decode, so decodes scheduled ahead of schedule() (the engine's decode cohort) are
    # wrong whenever a waiting request can be admitted: the engine must then bring the cohort up to date first.
    decodes_ahead = False

    def schedule(self, num_decoding_ahead: int = 0) -> SchedulerOutput:
        self.out = out = SchedulerOutput()
        if self.swapped:  # swapped requests resume first: no prefill is tried
            self.note_rest(self.waiting, Reason.BLOCKED_BEHIND_HEAD, "prefill could not run: swapped requests "
                           "resume first", shared=True)
        else:
            why = self._admit_prefills()
            if out.scheduled:
                if num_decoding_ahead:
                    raise RuntimeError("vllm-v0: decodes were scheduled ahead of a prefill step (a servesim bug: the "
                                       "fast path honours Scheduler.decodes_ahead)")
                return out
            if why:
                reason, detail, shared = why
                self.note_rest(self.waiting, reason, f"prefill could not run: {detail}", shared)
        self._decode_running(num_decoding_ahead)
        if out.preempted:  # no swap-in in a step that preempted
            self.note_rest(self.swapped, Reason.ADMISSION_FROZEN, "a request was preempted this step")
        else:
            self._swap_in()
        return out

    def _admit_prefills(self) -> tuple[Reason, str, bool] | None:
        """Whole prompts in queue order until one cannot be admitted; returns why the head stopped (None: the
        queue emptied). In a step that admits some, the rest get their reasons here."""
        waiting, budget = self.waiting, self.config.max_num_batched_tokens
        while len(waiting):
            req = waiting.peek()
            n = req.num_tokens_needed  # the whole prompt (and outputs so far, after a recompute preemption)
            why = self._cannot_admit(req, n, budget)
            if why:
                if self.out.scheduled:
                    self.note_rest(waiting, *why)
                return why
            self.kv.allocate(req, n)
            waiting.pop()
            if req.num_preemptions:
                self.out.resumed.add(req)
            self.admit(req, n)
            budget -= n
        return None

    def _cannot_admit(self, req: RequestState, n: int, budget: int) -> tuple[Reason, str, bool] | None:
        """v0's order: KV blocks (block manager), then the token budget and the seats (SchedulingBudget)."""
        need, reserve = blocks_for(n, self.config.block_size), self.watermark_blocks()
        if not self.kv.can_fit(need, reserve):
            return Reason.KV_BLOCKS, f"needs {need} blocks + {reserve} watermark, {self.kv.free_blocks} free", False
        if len(self.running) >= self.config.max_num_seqs:
            return Reason.MAX_NUM_SEQS, f"{len(self.running)} running = max_num_seqs", True
        if n > budget:
            return Reason.TOKEN_BUDGET, f"prompt of {n} tokens, {budget} of the budget left", False
        return None

    def _decode_running(self, i: int) -> None:
        """Every running request from `running[i]` decodes one token; a shortfall preempts the newest."""
        running, kv, out = self.running, self.kv, self.out
        while i < len(running):
            req = running[i]
            while not kv.allocate(req, req.num_computed_tokens + 1):
                victim = running[-1]  # never one already scheduled: those stand before `req`
                self.preempt(victim)
                if victim is req:
                    break
            else:
                out.scheduled[req] = 1
                i += 1

    def _swap_in(self) -> None:
        """Swapped requests come back oldest first, each as a one-token decode, while blocks and seats allow."""
        while self.swapped:
            req = self.swapped[0]
            if len(self.running) >= self.config.max_num_seqs:
                self.note_rest(self.swapped, Reason.MAX_NUM_SEQS, f"{len(self.running)} running = max_num_seqs")
                return
            need, reserve = blocks_for(req.num_computed_tokens + 1, self.config.block_size), self.watermark_blocks()
            if not self.kv.can_fit(need, reserve):
                self.note_rest(self.swapped, Reason.KV_BLOCKS,
                               f"needs {need} blocks + {reserve} watermark, {self.kv.free_blocks} free")
                return
            self.swapped.popleft()
            self.swap_in(req, 1)
