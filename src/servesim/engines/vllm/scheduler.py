"""vLLM v1's scheduler (pinned: vLLM 0.33.0, `vllm/v1/core/sched/scheduler.py`): one token budget, running
requests first, then waiting ones.

"There's no decoding phase nor prefill phase": each request needs `num_tokens - num_computed_tokens` tokens and
gets min(that, the long-prefill threshold, what is left of the budget), so a long prompt is chunked and mixed with
decodes. Rules as observed in vLLM 0.33.0; see docs/vllm-fidelity.md and ../shared/conformance.
"""

from __future__ import annotations

from servesim.engine.queue import priority_key
from servesim.engine.records import Reason
from servesim.engine.request import RequestState, RequestStatus
from servesim.engine.scheduler import Scheduler, SchedulerOutput
from servesim.engine.speculation import SpecDecodingStats
from servesim.engines.vllm.kv_cache_manager import PrefixCachingKV
from servesim.engines.vllm.spec_decode import SpecDecode
from servesim.errors import ConfigError


class VLLMScheduler(Scheduler):
    name = "vllm"
    prefix_caching = True

    def __init__(self, config, explain: bool = True) -> None:
        super().__init__(config, explain)
        # prefill_schedule_interval (V5): the last step that ran a prefill (counting steps from 1), and whether
        # the last admission pass left requests waiting (then no step is deferred)
        self.last_prefill_step = 0
        self.prefill_capacity_bound = False
        self.prefilled = False  # this step ran a prefill (a prompt chunk past the first, or >= 2 uncached tokens)
        self.chunk_ran = False  # this step scheduled a running request whose last chunk was partial
        # speculative decoding (`spec_decode`): drafts as extra tokens; every step through schedule(), the engine's
        # decode cohort (one token per decode) not being speculation's shape
        self.spec = SpecDecode(config) if config.speculative_config is not None else None
        if self.spec is not None:
            self.stretches = False
            self.end_step = self._propose

    @property
    def spec_decoding(self) -> SpecDecodingStats | None:
        return self.spec.stats if self.spec is not None else None

    def skipped(self, k: int, queue_empty: bool) -> None:
        if queue_empty:  # each of those passes scanned an empty queue: nothing was left waiting
            self.prefill_capacity_bound = False

    def use_prefix_cache(self) -> None:
        if self.config.preemption_mode == "swap":
            raise ConfigError("prefix caching with preemption_mode swap is not modelled (vLLM v1 has no swap): "
                              "set enable_prefix_caching=false or preemption_mode=recompute")
        self.kv = PrefixCachingKV(self.config.block_size, self.config.num_gpu_blocks, track_evictions=self.explain,
                                  async_scheduling=self.config.async_scheduling,
                                  per_request=self.config.kv_blocks_per_request)
        self.prefix = True

    def finish(self, s: RequestState) -> None:
        if self.prefix and self.config.async_scheduling:
            self.kv.cache_finished(s)
        elif self.prefix and self.spec is not None:  # (its accepted drafts' blocks, before they are freed)
            self.kv.cache_upto(s, s.num_computed_tokens)
        super().finish(s)

    def blocks_held(self, states: list[RequestState]) -> int:
        held = super().blocks_held(states)
        if not self.prefix:
            return held
        # cached blocks can be shared: count each once, and the pool's holds must agree
        ids = [b for s in states for b in (s.block_ids or ())] + [b for s in states for b in self.kv.window_ids(s)]
        assert len(ids) == held, "block lists and block counts disagree"
        pool = self.kv.pool
        assert all(pool.ref_cnt[b] == ids.count(b) for b in set(ids)), "ref counts off"
        assert not set(ids) & set(pool.free_queue), "a held block is in the free queue"
        return len(set(ids))

    def schedule(self, num_decoding_ahead: int = 0) -> SchedulerOutput:
        self.out = out = SchedulerOutput()
        cfg = self.config
        # the engine's decode cohort: the first running requests, already given one token each (engine.fastpath)
        budget = cfg.max_num_batched_tokens - num_decoding_ahead
        cap = self._threshold()
        out.prefill_deferred = defer = self._defers_prefill()
        self.prefilled = self.chunk_ran = False
        if self.spec is not None:
            out.spec = self.spec.begin(cfg.max_num_batched_tokens)
        budget = self._schedule_running(num_decoding_ahead, budget, cap)
        # waiting: only when nothing was preempted this step; in queue order, never skipping the head
        if out.preempted:
            self.note_rest(self.swapped, Reason.ADMISSION_FROZEN, "a request was preempted this step")
            self.note_rest(self.waiting, Reason.ADMISSION_FROZEN, "a request was preempted this step")
        else:
            budget = self._swap_in(budget, cap)
            if self.swapped:
                self.note_rest(self.waiting, Reason.BLOCKED_BEHIND_HEAD, "swapped requests resume first")
            else:
                self._admit_waiting(budget, cap)
                if not defer:  # (V5's escape: a pass that left requests waiting was bound by capacity)
                    self.prefill_capacity_bound = bool(len(self.waiting))
        if self.prefilled:
            self.last_prefill_step = self.step_index + 1
        if self.spec is not None:
            self.spec.finish_schedule(out.scheduled)
        return out

    def _propose(self) -> None:
        """After the step: the blocks its accepted drafts filled cached (synchronously; `update_from_output` with
        speculation), the drafter's proposals (the engine core's post_step)."""
        if self.prefix and not self.config.async_scheduling:
            for s in self.out.spec.outputs:
                if s.status is RequestStatus.RUNNING:
                    self.kv.cache_upto(s, s.num_computed_tokens)
        self.spec.after_step(self.out.scheduled)
        self.in_flight = bool(self.spec.pending)

    def _threshold(self) -> int:
        """long_prefill_token_threshold as it applies this step: never to a lone request; adaptive (vLLM 0.33),
        raised to the budget's share of the requests there are."""
        cfg = self.config
        many = len(self.running) + len(self.waiting) + len(self.swapped)
        if many <= 1 or not cfg.long_prefill_token_threshold:
            return 0
        if cfg.long_prefill_token_threshold_adaptive:
            return max(cfg.long_prefill_token_threshold, cfg.max_num_batched_tokens // many)
        return cfg.long_prefill_token_threshold

    def _defers_prefill(self) -> bool:
        """prefill_schedule_interval N (vLLM 0.33, local cadence): this step runs no prefill when the last one
        was fewer than N steps ago, the last admission pass was not bound by capacity, and someone running
        decodes (a step of prompt chunks alone is never deferred)."""
        n = self.config.prefill_schedule_interval
        return (n > 1 and not self.prefill_capacity_bound and self.step_index + 1 - self.last_prefill_step < n
                and not all(r.is_prefill_chunk for r in self.running))

    def _schedule_running(self, i: int, budget: int, cap: int) -> int:
        """Running requests from `running[i]`, in admission order; on a KV shortfall preempt until the request
        fits. Returns the budget left."""
        out, running, spec, kv = self.out, self.running, self.spec, self.kv
        defer = out.prefill_deferred
        while i < len(running) and budget > 0:
            if spec is not None and spec.out_of_slots():
                break
            req = running[i]
            if spec is None:
                n = min(req.num_tokens_needed, budget, cap or budget)
            else:  # its drafts too, within the input budget and the model length (S1, S2, S6)
                n = spec.cap(req, min(spec.num_new_tokens(req), budget, cap or budget))
            if n <= 0 or defer and req.is_prefill_chunk:  # async scheduling: its last token is in flight (it
                i += 1  # stays in `running` until released); or its next prompt chunk waits for a prefill step
                if n and self.explain:
                    self.note(req, Reason.PREFILL_INTERVAL, self._interval_detail())
                continue
            while not (kv.allocate(req, req.num_computed_tokens + n) if spec is None else self._allocate(req, n)):
                victim = self.pick_victim()
                if victim in out.scheduled:  # priority: an already scheduled request gives its tokens back
                    given = out.scheduled.pop(victim)
                    budget += given
                    if spec is not None:
                        spec.unscheduled(victim, given)
                    i -= 1
                # NOTE: as in vLLM, the scan index moves back only for a scheduled victim; an unscheduled one
                # standing before `req` (async: its last token in flight) shifts the scan past the next request.
                self.preempt(victim)
                if victim is req:
                    break
            else:
                out.scheduled[req] = n
                if spec is not None:
                    spec.scheduled(req, n)
                self.prefilled |= req.is_prefill_chunk
                self.chunk_ran |= req.is_prefill_chunk
                req.is_prefill_chunk = n < req.num_tokens_needed
                budget -= n
                i += 1
                continue
            if self.config.policy == "fcfs":
                break  # the request being scheduled was the last one running: nothing left to scan
        if self.explain:
            for req in running[i:]:
                if req not in out.scheduled and req.num_tokens_needed:
                    self.note(req, Reason.TOKEN_BUDGET, "budget spent on requests ahead")
        return budget

    def _allocate(self, req: RequestState, n: int) -> bool:
        """KV for `n` more tokens (and the drafter's lookahead slots, S3)."""
        if self.spec is None:
            return self.kv.allocate(req, req.num_computed_tokens + n)
        spec = self.spec
        if self.prefix:  # (only the tokens vLLM knows are cached: under async not those in flight)
            return self.kv.allocate(req, spec.computed(req) + n, spec.slots(req, n), spec.view(req)[0])
        return self.kv.allocate(req, spec.computed(req) + n, spec.slots(req, n))

    def _admit_waiting(self, budget: int, cap: int) -> None:
        waiting, spec = self.waiting, self.spec
        ran = bool(self.out.scheduled)  # (running requests scheduled this step, S7)
        while len(waiting):
            if spec is not None and spec.out_of_slots():
                self.note_rest(waiting, Reason.TOKEN_BUDGET, "no input slots left for a draft model's inputs")
                return
            req = waiting.peek()
            # prefix caching: the longest cached prefix, looked up at (re)admission only (P4)
            hits = self.kv.lookup(req) if self.prefix and not req.num_computed_tokens else ()
            cached = len(hits) * self.config.block_size
            n = req.num_tokens_needed - cached
            padded = spec is not None and spec.pads(req, n, req.num_computed_tokens + cached, ran, self.chunk_ran)
            if padded:  # one token to compute: 1 + K, drafts of -1 (S7)
                n = 1 + spec.k
            room = budget if spec is None else spec.request_budget(budget)  # (less a draft model's input slots)
            if cap and n > cap:  # the threshold caps first: with chunking off a long prompt still goes in chunks
                n = cap
            uncached = req.num_tokens - req.num_computed_tokens - cached
            if self.out.prefill_deferred and uncached >= 2:  # V5: only full hits but the last token go in
                self.note_rest(waiting, Reason.PREFILL_INTERVAL, self._interval_detail(), shared=True)
                return
            why = self._cannot_admit(req, room, n, hits, padded)
            if why:
                self.note_rest(waiting, *why)
                return
            n = min(n, room)
            if self.prefix:
                self.kv.count_query(req, hits)
            if hits:
                self.kv.take_hits(req, hits)
            self._allocate(req, n)  # (computed = cached, but for a remote prefill)
            waiting.pop()
            if req.num_preemptions:
                self.out.resumed.add(req)
            self.admit(req, n)
            self.prefilled |= uncached >= 2
            req.is_prefill_chunk = n < req.num_tokens_needed
            if spec is not None:
                spec.scheduled(req, n)
                if padded:
                    spec.padded(req)
            budget -= n

    def _cannot_admit(self, req: RequestState, budget: int, n: int,
                      hits: tuple | list = (), padded: bool = False) -> tuple[Reason, str, bool] | None:
        """Why the head of the queue, capped to `n` tokens by the threshold, cannot be admitted (None: it can).
        With prefix hits (P9): hit blocks in use cost nothing, evictable ones must leave the free queue."""
        cfg = self.config
        if len(self.running) >= cfg.max_num_active_reqs:  # (max_num_active_seqs, vLLM 0.33; else max_num_seqs)
            which = "max_num_seqs" if cfg.max_num_active_reqs == cfg.max_num_seqs else "max_num_active_seqs"
            return Reason.MAX_NUM_SEQS, f"{len(self.running)} running = {which}", True
        if budget <= 0:
            return Reason.TOKEN_BUDGET, f"0 of {cfg.max_num_batched_tokens} tokens left", True
        if padded and n > budget:  # (vLLM prefers not scheduling it to scheduling it unpadded)
            return Reason.TOKEN_BUDGET, f"padded to {n} tokens, {budget} left", False
        if not cfg.enable_chunked_prefill and n > budget:
            return Reason.TOKEN_BUDGET, f"needs {n} tokens, {budget} left, chunking off", False
        # (num_computed_tokens: 0, or a disaggregated decode replica's remotely prefilled prompt)
        need = (self.admission_blocks(req, req.num_computed_tokens + len(hits) * cfg.block_size + min(n, budget))
                + self.watermark_blocks())
        if hits:
            need += self.kv.num_evictable(hits) - len(hits)
        if not self.kv.can_fit(need):
            return Reason.KV_BLOCKS, f"needs {need} blocks, {self.kv.free_blocks} free", False
        if self.spec is not None:  # the allocation itself: the chunk and its lookahead slots (S3)
            computed = req.num_computed_tokens + len(hits) * cfg.block_size
            need = (self.spec.blocks_for_slots(computed, min(n, budget), cfg.block_size) + self.watermark_blocks()
                    + cfg.kv_blocks_per_request)
            if hits:
                need += self.kv.num_evictable(hits) - len(hits)
            if not self.kv.can_fit(need):
                return Reason.KV_BLOCKS, f"needs {need} blocks with the drafter's lookahead, " \
                    f"{self.kv.free_blocks} free", False
        return None

    def _swap_in(self, budget: int, cap: int) -> int:
        """Swap mode: swapped requests resume, oldest preemption first, before any new request."""
        while self.swapped:
            req = self.swapped[0]
            n = min(req.num_tokens_needed, budget, cap or budget)
            if len(self.running) >= self.config.max_num_active_reqs or n <= 0:
                self.note_rest(self.swapped, Reason.MAX_NUM_SEQS if n > 0 else Reason.TOKEN_BUDGET)
                break
            need = self.kv.blocks(req.num_computed_tokens + n) + self.watermark_blocks()
            if not self.kv.can_fit(need):
                self.note_rest(self.swapped, Reason.KV_BLOCKS, f"needs {need} blocks, {self.kv.free_blocks} free")
                break
            self.swapped.popleft()
            self.swap_in(req, n)
            budget -= n
        return budget

    def _interval_detail(self) -> str:
        n = self.config.prefill_schedule_interval
        return f"prefill_schedule_interval {n}: the last prefill ran {self.step_index + 1 - self.last_prefill_step} " \
               "step(s) ago"

    def pick_victim(self) -> RequestState:
        """fcfs: the newest running request; priority: the largest (priority, arrival_time). Under async
        scheduling a request whose last token is still in flight is still running, and can be the victim."""
        if self.config.policy == "priority":
            return max(self.running, key=priority_key)
        return self.running[-1]
