"""TensorRT-LLM's scheduler, one iteration of the PyTorch executor's loop (pinned: TensorRT-LLM 1.2,
`tensorrt_llm/_torch/pyexecutor/py_executor.py`, `scheduler.py`'s `SimpleScheduler`; the capacity and micro-batch
schedulers in `capacity_scheduler` and `micro_batch_scheduler`).

Each step: new requests join the active list up to `max_batch_size` (`_fetch_new_requests`); the capacity
scheduler of `scheduler_config.capacity_scheduler_policy` picks those that fit in the KV cache and those to pause;
the paused give their KV back and go back to the context phase with their outputs as prompt (`_pause_requests`:
`LlmRequest::pause`, recomputed when they run again); the micro-batch scheduler picks the step's context chunks
and generation tokens; then KV is allocated (`prepare_resources`): a first context chunk takes blocks for its whole
context, reusing cached ones (`setPrepopulatedPromptLen` moves its chunk past them), a generation token a block when
it starts one. Context and generation requests share one batch (in-flight batching).

The overlap scheduler (`disable_overlap_scheduler` False, the default) schedules step k + 1 before step k's outputs
are processed: a request its last token ends stays active one step more (`overlap`).

Not modelled: beam search, speculative decoding, LoRA pages, attention windows, partial block reuse.
"""

from __future__ import annotations

from collections import deque

from servesim.engine.kv import KVCache
from servesim.engine.records import Preemption, Reason, Waiting
from servesim.engine.request import RequestState, RequestStatus
from servesim.engine.scheduler import FINISHED_IN_FLIGHT, Scheduler, SchedulerOutput
from servesim.engines.config import EngineConfig
from servesim.engines.trtllm.capacity_scheduler import CAPACITY_SCHEDULERS, Capacity
from servesim.engines.trtllm.kv_cache_manager import ReuseKV
from servesim.engines.trtllm.llm_args import TrtllmConfig
from servesim.engines.trtllm.micro_batch_scheduler import MicroBatch, schedule_micro_batch
from servesim.engines.trtllm.overlap import PreviousBatch

PAUSE = "pause (recompute)"  # the preemption ledger's mode for a MAX_UTILIZATION pause


class TrtllmScheduler(Scheduler):
    name = "trtllm"
    prefix_caching = True  # kv_cache_config.enable_block_reuse (the engine's prefix cache flag, set at resolution)
    # NOTE: every step goes through schedule(): the fast path's decode cohort advances running decodes without
    # asking the policy, and GUARANTEED_NO_EVICT's reservation, MAX_UTILIZATION's pause scan and the
    # micro-batch scheduler's order all read every active request
    stretches = False
    reserves_lifetime_kv = True
    unread: dict[str, str] = {}

    def __init__(self, config: EngineConfig, explain: bool = True) -> None:
        super().__init__(config, explain)
        self.trt = trt = config.trtllm or TrtllmConfig()
        self.capacity_scheduler = CAPACITY_SCHEDULERS[trt.capacity_scheduler_policy]()
        self.max_seq_len = config.max_model_len
        self.kv = KVCache(trt.tokens_per_block, config.num_gpu_blocks, None, config.kv_blocks_per_request)
        self.active: list[RequestState] = []  # the executor's active requests, in arrival order
        self.waiting = RequestQueue(self.active)  # arrived and holding no KV: queued, or active but not started
        # the overlap scheduler (`_executor_loop_overlap`): the step in flight's outputs, processed after the next
        # step is scheduled; None: `_executor_loop`, each step's outputs processed before the next is scheduled
        self.previous_batch = None if trt.disable_overlap_scheduler else PreviousBatch()

    def use_prefix_cache(self) -> None:
        self.kv = ReuseKV(self.config.block_size, self.config.num_gpu_blocks, track_evictions=self.explain,
                          per_request=self.config.kv_blocks_per_request)
        self.prefix = True

    def has_work(self) -> bool:
        return bool(self.active or self.waiting.new)

    @property
    def unprocessed(self) -> bool:
        """The overlap scheduler: requests its last step finished are still to be processed (the loop runs on)."""
        return self.previous_batch is not None and bool(self.previous_batch.finishing)

    def blocks_held(self, states: list[RequestState]) -> int:
        if not self.prefix:
            return super().blocks_held(states)
        ids = {b for s in states for b in (s.block_ids or ())}  # a reused block is held once
        return len(ids)

    # -- the iteration ------------------------------------------------------------------------------------------
    def schedule(self, num_decoding_ahead: int = 0) -> SchedulerOutput:
        if num_decoding_ahead:
            raise RuntimeError("the trtllm policy takes no decodes ahead (a servesim bug)")
        self.out = out = SchedulerOutput()
        self._fetch_new_requests()
        cap = self.capacity_scheduler(self, self.active)
        self._pause_requests(cap.paused)
        trt = self.trt
        chunking = trt.chunking_policy if trt.enable_chunked_prefill else None
        mb = schedule_micro_batch(cap.fitting, trt.max_batch_size, trt.max_num_tokens, chunking,
                                  trt.tokens_per_block)
        self._prepare_resources(mb)
        if self.explain:
            self._reasons(cap, mb)
        if not out.scheduled and not out.preempted and self.previous_batch:
            # an iteration with nothing to run still processes the batch in flight (should_process_previous_batch);
            # no forward, no time: the next iteration schedules again
            self.previous_batch.process(self)
            self.idle_iterations += 1
            out.processed_only = True
        return out

    def _fetch_new_requests(self) -> None:
        """Requests join the active list in arrival order while fewer than max_batch_size are active
        (`max_num_active_requests`)."""
        while self.waiting.new and len(self.active) < self.trt.max_batch_size:
            self.active.append(self.waiting.new.popleft())

    def _pause_requests(self, paused: list[RequestState]) -> None:
        """LlmRequest::pause and _terminate_request: its KV freed, its outputs taken into its prompt, back to its
        first context chunk; it keeps its place among the active requests."""
        for v in paused:
            if v.status is RequestStatus.FINISHED:  # (the overlap scheduler: its last token in flight)
                self._pause_finishing(v)
                continue
            blocks, discarded = v.num_blocks, v.num_computed_tokens
            if self.prefix:  # (removeSequence stores its full blocks for reuse)
                self.kv.store_context_blocks(v)
            self.kv.free(v)
            self.running.remove(v)
            v.num_preemptions += 1
            v.num_computed_tokens = 0
            v.sampled_since_admission = False
            v.status = RequestStatus.WAITING
            self.out.preempted.append(v)
            self.out.preemptions.append(Preemption(self.step_index, v.request_id, PAUSE, discarded, 0, blocks, 0.0,
                                                   v.num_preemptions > 1))

    def _pause_finishing(self, v: RequestState) -> None:
        """A request whose last token is in flight (GENERATION_TO_COMPLETE) paused: its KV is freed now
        (`_terminate_request`); its outputs are complete, so nothing is recomputed and it leaves the active list."""
        blocks = v.num_blocks
        self.terminate(v)
        v.num_preemptions += 1
        self.out.preempted.append(v)
        self.out.preemptions.append(Preemption(self.step_index, v.request_id, FINISHED_IN_FLIGHT, 0, 0, blocks, 0.0,
                                               v.num_preemptions > 1))

    def _prepare_resources(self, mb: MicroBatch) -> None:
        """The batch's KV (KVCacheManager's addSequence for a first chunk, addToken for a generation token), then
        the step's work in the record's order: context chunks, then generation tokens."""
        scheduled = self.out.scheduled
        for s, chunk in mb.context.items():
            if s.status is RequestStatus.WAITING:
                chunk = self._add_sequence(s, chunk)
            scheduled[s] = chunk
        for s in mb.generation:
            self._allocate(s, s.num_computed_tokens + 1)
            scheduled[s] = 1

    def _add_sequence(self, s: RequestState, chunk: int) -> int:
        """A first context chunk: blocks for its whole context, the reusable prefix taken first; its chunk moved
        past the prefix, ending on a block boundary unless it reaches the end (setPrepopulatedPromptLen)."""
        if self.prefix:
            hits = self.kv.lookup(s)
            self.kv.count_query(s, hits)
            if hits:
                self.kv.take_hits(s, hits)  # (num_computed_tokens = the prepopulated prompt length)
        prepopulated, end, tpb = s.num_computed_tokens, s.num_tokens, self.trt.tokens_per_block
        if prepopulated:
            chunk = (prepopulated + chunk) // tpb * tpb - prepopulated if prepopulated + chunk < end \
                else end - prepopulated
        self._allocate(s, end)
        s.status = RequestStatus.RUNNING
        self.running.append(s)
        if s.num_preemptions:
            self.out.resumed.add(s)
        return chunk

    def _allocate(self, s: RequestState, num_tokens: int) -> None:
        if not self.kv.allocate(s, num_tokens):  # the capacity scheduler counted these blocks
            raise RuntimeError(f"trtllm: {s.request_id}'s KV did not fit after the capacity scheduler "
                               "admitted it (a servesim bug)")

    def freed_if_removed(self, s: RequestState) -> int:
        """schedulingRemoveSequence: the blocks a paused request gives back to this step's books."""
        return self.kv.scheduling_remove_sequence(s) if self.prefix else s.num_blocks

    def end_step(self) -> None:
        """After the step: its outputs are processed, the blocks it computed become reusable (storeContextBlocks).
        Under the overlap scheduler the previous step's are, and this step's wait for the next."""
        if self.previous_batch is not None:
            self.previous_batch.process(self)
            self.previous_batch.launch(self)
        elif self.prefix:
            for s in self.out.scheduled:
                if s.status is RequestStatus.RUNNING:
                    self.kv.store_context_blocks(s)

    def finish(self, s: RequestState) -> None:
        """`s`'s last token was sampled: it ends now, or under the overlap scheduler when its step's outputs are
        processed, after the next step was scheduled."""
        if self.previous_batch is None:
            self.terminate(s)
            return
        self.running.remove(s)
        self.previous_batch.land(s)

    def terminate(self, s: RequestState) -> None:
        """_handle_responses and _terminate_request: it leaves the active list, its KV is freed (removeSequence
        stores its full blocks for reuse)."""
        if self.prefix:
            self.kv.store_context_blocks(s)
        if s in self.running:
            self.running.remove(s)
        s.status = RequestStatus.FINISHED
        self.kv.free(s)
        self.active.remove(s)
        if self.on_finish is not None:
            self.on_finish(s)

    def add_request(self, s: RequestState) -> None:
        self.waiting.new.append(s)

    # -- reasons ----------------------------------------------------------------------------------------------
    def _reasons(self, cap: Capacity, mb: MicroBatch) -> None:
        """Every request present that got nothing this step, and why, in TensorRT-LLM's terms."""
        add, scheduled = self.out.waiting.append, self.out.scheduled
        for s in self.active:
            if s in scheduled:
                continue
            reason, detail = cap.waiting.get(s) or mb.waiting.get(s) or (
                Reason.TOKEN_BUDGET, "not in this step's batch")
            add(Waiting(s.request_id, reason, detail))
        queued = len(self.waiting.new)
        for s in self.waiting.new:
            add(Waiting(s.request_id, Reason.MAX_NUM_SEQS, f"not yet active: the active requests are at "
                        f"max_batch_size {self.trt.max_batch_size} ({queued:,} queued)"))


class RequestQueue:
    """What the engine counts as waiting: the executor's request queue (`new`: arrived, not yet active) and the
    active requests that hold no KV (first context chunk not yet run, or paused)."""

    __slots__ = ("new", "active")

    def __init__(self, active: list[RequestState]) -> None:
        self.new: deque[RequestState] = deque()
        self.active = active

    def __len__(self) -> int:
        return len(self.new) + sum(s.status is RequestStatus.WAITING for s in self.active)

    def __iter__(self):
        yield from (s for s in self.active if s.status is RequestStatus.WAITING)
        yield from self.new
