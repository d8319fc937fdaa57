"""State and verbs shared by every policy: the queues, the KV cache, admit, preempt, finish.

A policy is a `Scheduler` subclass with one `schedule()` that decides a step's work; mutation goes through the
verbs here so that every policy keeps the same books (KV blocks, preemption ledger, reasons).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from servesim.engine.kv import KVCache, blocks_for
from servesim.engine.queue import make_queue
from servesim.engine.records import Preemption, Reason, Waiting
from servesim.engine.request import RequestState, RequestStatus
from servesim.engine.speculation import SpecStep
from servesim.engines.config import EngineConfig

# the ledger's mode for a victim whose last token was in flight (async scheduling): dropped, never recomputed
FINISHED_IN_FLIGHT = "drop (last token in flight)"


@dataclass(slots=True)
class SchedulerOutput:
    """One step's decisions, before the step runs."""

    scheduled: dict[RequestState, int] = field(default_factory=dict)  # request -> new tokens, in order
    preempted: list[RequestState] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)  # ledger entries made this step
    waiting: list[Waiting] = field(default_factory=list)  # who got nothing, and why
    resumed: set[RequestState] = field(default_factory=set)  # (re)admitted after a preemption this step
    swap_in_blocks: int = 0
    swap_out_blocks: int = 0
    prefill_deferred: bool = False  # vLLM's prefill_schedule_interval held prompts back: the queue may move next step
    # policy sglang: what SGLang decided (see StepRecord)
    forward_mode: str | None = None
    new_token_ratio: float | None = None
    chunked_request: str | None = None
    # SGLang's overlap loop: an iteration that ran no forward, only processed the last step's result (no step)
    processed_only: bool = False
    spec: SpecStep | None = None  # speculative decoding: the drafts each request verifies in this step


class Scheduler:
    name = "base"
    chunked = True  # False: prompts are never split, and the budget defaults to max_model_len
    reserves_lifetime_kv = False  # True: a request's blocks are allocated for its whole length at admission
    prefix_caching = False  # True: the policy looks up and reuses cached prefix blocks (vLLM v1)
    decodes_ahead = True  # False: a step may run prompts without the running decodes (vLLM v0): the engine's fast
    #                       path then schedules no decode ahead of schedule() while a request waits
    cohort_whole = False  # True: the fast path takes the decode cohort only when it is the whole running batch
    decode_evicts = False  # True: a decode step short of KV evicts the policy's prefix cache for it (SGLang), so
    #                        the fast path may make that room itself (`kv.make_room`) and keep its cohort
    stretches = True  # False: the engine runs every step through schedule() (no decode cohort, no stretch)
    chunked_req = None  # a request between prompt chunks outside the running list (SGLang): no stretch meanwhile
    end_step = None  # a policy's hook after each step has run (SGLang inserts prefilled tokens in its radix tree)
    unprocessed = False  # True: a step's result is still to be processed (SGLang's overlap loop): run once more
    holds_finished = False  # True: finished requests hold KV until the next step's end (`release_held`)
    in_flight = False  # True: a step's output is still to be processed though nothing was scheduled (vLLM's async
    #                    speculative decoding): the step runs empty, as vLLM's engine core drains its batch queue
    spec_decoding = None  # speculative decoding: the run's SpecDecodingStats (`servesim.engine.speculation`)
    idle_iterations = 0  # iterations that ran no forward, only processed the last step's result (SGLang overlap)
    after_stretch = None  # a policy's hook after the fast path's stretch of steps (before its last record)
    # shared knobs the policy never reads, and why: refused when given (`engine.resolve`), never silently ignored
    unread: dict[str, str] = {}

    def __init__(self, config: EngineConfig, explain: bool = True) -> None:
        self.config = config
        self.explain = explain  # build the per-request reasons (skipped for summary-only runs)
        self.kv = KVCache(config.block_size, config.num_gpu_blocks, config.num_cpu_blocks,
                          config.kv_blocks_per_request)
        self.waiting = make_queue(config.policy)
        self.running: list[RequestState] = []
        self.swapped: deque[RequestState] = deque()
        self.step_index = 0
        self.out = SchedulerOutput()
        self.prefix = False  # the KV pool is a prefix cache (`use_prefix_cache`)
        self.on_finish = None  # the engine's hook for closed-loop followers (multi-turn sessions)

    def skipped(self, k: int, queue_empty: bool) -> None:
        """The engine's fast path ran `k` steps without calling schedule() (`queue_empty`: nobody waited in
        them). A policy whose state counts its schedule() passes catches up here."""

    def release_held(self) -> int:
        """Let go now of what finished requests hold until the next step's end (`holds_finished`); the blocks
        freed."""
        return 0

    def use_prefix_cache(self) -> None:
        """Make the KV pool a prefix cache (a policy with `prefix_caching` defines it)."""
        raise NotImplementedError(f"policy {self.name} has no prefix cache")

    # -- the engine's side ------------------------------------------------------------------------------------
    def blocks_held(self, states: list[RequestState]) -> int:
        """The KV blocks the requests hold, each counted once, its own books checked on the way (the engine's
        invariant: free + held = usable)."""
        return sum(s.num_blocks for s in states)

    def add_request(self, s: RequestState) -> None:
        self.waiting.add(s)

    def has_work(self) -> bool:
        return bool(self.running or len(self.waiting) or self.swapped)

    def schedule(self, num_decoding_ahead: int = 0) -> SchedulerOutput:
        """Decide the step's work. The first `num_decoding_ahead` running requests are already scheduled for one
        decode token each, their blocks allocated (the engine's decode cohort, `servesim.engine.fastpath`): start after
        them."""
        raise NotImplementedError

    def finish(self, s: RequestState) -> None:
        """The request produced its last token: free its blocks and its seat."""
        s.status = RequestStatus.FINISHED
        self.kv.free(s)
        self.running.remove(s)
        if self.on_finish is not None:
            self.on_finish(s)

    # -- verbs for policies -------------------------------------------------------------------------------------
    def admit(self, s: RequestState, num_new_tokens: int) -> None:
        """Move `s` from a queue into the running list with `num_new_tokens` scheduled (blocks already checked)."""
        s.status = RequestStatus.RUNNING
        self.running.append(s)
        self.out.scheduled[s] = num_new_tokens

    def preempt(self, victim: RequestState) -> None:
        """Take `victim` off the GPU: by recompute (drop its KV) or by swap (copy its KV to the host pool)."""
        out, cfg, kv = self.out, self.config, self.kv
        self.running.remove(victim)
        blocks = victim.num_blocks
        repeat = victim.num_preemptions > 0
        victim.num_preemptions += 1
        victim.num_spec_token_ids = 0  # (speculative decoding: its drafts are dropped)
        if victim.status is RequestStatus.FINISHED:
            # async scheduling: its last token is in flight and still finishes it, so it only gives its blocks
            # back now (the engine's release then has nothing left to free) and nothing is recomputed
            kv.free(victim)
            entry = Preemption(self.step_index, victim.request_id, FINISHED_IN_FLIGHT, 0, 0, blocks, 0.0, repeat)
        elif cfg.preemption_mode == "swap" and kv.can_swap_out(victim):
            kv.swap_out(victim)
            nbytes = blocks * cfg.block_size * cfg.kv_bytes_per_token
            out.swap_out_blocks += blocks
            victim.status = RequestStatus.SWAPPED
            self.swapped.append(victim)
            entry = Preemption(self.step_index, victim.request_id, "swap", 0, nbytes, blocks,
                               nbytes / cfg.pcie_bandwidth, repeat)
        else:
            mode = "recompute" if cfg.preemption_mode == "recompute" else "recompute (swap pool full)"
            discarded = victim.num_computed_tokens
            kv.free(victim)
            victim.num_computed_tokens = 0
            victim.sampled_since_admission = False  # it will prefill its prompt and outputs again
            victim.status = RequestStatus.WAITING
            self.waiting.push_front(victim)
            entry = Preemption(self.step_index, victim.request_id, mode, discarded, 0, blocks, 0.0, repeat)
        out.preempted.append(victim)
        out.preemptions.append(entry)

    def swap_in(self, s: RequestState, num_new_tokens: int) -> None:
        self.out.swap_in_blocks += self.kv.swap_in(s)
        self.kv.allocate(s, s.num_computed_tokens + num_new_tokens)
        self.out.resumed.add(s)
        self.admit(s, num_new_tokens)

    def admission_blocks(self, s: RequestState, num_new_tokens: int) -> int:
        """Blocks a queued request must find free to be admitted: for its whole current length with vLLM's
        `scheduler_reserve_full_isl` (the default), else for the chunk it is about to get."""
        tokens = s.num_tokens if self.config.scheduler_reserve_full_isl else num_new_tokens
        return blocks_for(tokens, self.config.block_size) + self.config.kv_blocks_per_request

    def watermark_blocks(self) -> int:
        cfg = self.config
        if cfg.num_gpu_blocks is None or not self.running:
            return 0
        return int(cfg.watermark * cfg.num_gpu_blocks)

    # -- reasons ----------------------------------------------------------------------------------------------
    def note(self, s: RequestState, reason: Reason, detail: str = "") -> None:
        if self.explain:
            self.out.waiting.append(Waiting(s.request_id, reason, detail))

    def note_rest(self, requests, head_reason: Reason, head_detail: str = "", shared: bool | None = None) -> None:
        """The head of a queue got `head_reason`; the rest share it (a full batch, a spent budget, a frozen
        admission) or wait behind the head (no skipping)."""
        if not self.explain:
            return
        if shared is None:
            shared = head_reason in (Reason.MAX_NUM_SEQS, Reason.TOKEN_BUDGET, Reason.ADMISSION_FROZEN,
                                     Reason.BATCH_CLOSED)
        rest = iter(requests)
        head = next(rest, None)
        if head is None:
            return
        add = self.out.waiting.append  # hot with a long queue: one record per queued request per step
        add(Waiting(head.request.request_id, head_reason, head_detail))
        if not shared:
            head_reason, head_detail = Reason.BLOCKED_BEHIND_HEAD, f"behind {head.request.request_id}"
        for s in rest:
            add(Waiting(s.request.request_id, head_reason, head_detail))
