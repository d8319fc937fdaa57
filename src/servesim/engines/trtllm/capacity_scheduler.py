"""TensorRT-LLM's capacity scheduler: which active requests fit in the KV cache this step, and which to pause
(pinned: TensorRT-LLM 1.2, `cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp`; the C++ scheduler is what the
PyTorch executor binds by default, `BindCapacityScheduler`).

Each policy is one call over the active requests in their order (arrival order; a paused request keeps its
place): `GuaranteedNoEvictScheduler`, `MaxUtilizationScheduler`, `StaticBatchScheduler`. What a policy decides is a
`Capacity`: the fitting requests (the micro-batch scheduler picks the batch among them), the paused ones, and why
each other one waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from servesim.engine.records import Reason
from servesim.engine.request import RequestState, RequestStatus
from servesim.engines.trtllm.kv_cache_manager import get_needed_blocks_one_step, get_remaining_blocks_to_completion

if TYPE_CHECKING:
    from servesim.engines.trtllm.scheduler import TrtllmScheduler


@dataclass(slots=True)
class Capacity:
    fitting: list[RequestState] = field(default_factory=list)
    paused: list[RequestState] = field(default_factory=list)
    waiting: dict[RequestState, tuple[Reason, str]] = field(default_factory=dict)  # (only when explaining)

    def skip_for_reuse(self, s: RequestState, other: str) -> None:
        self.waiting[s] = (Reason.REUSE_SKIP, f"beneficialToSkip: {other} computes its first new block this step; "
                           "it waits to reuse it")


def is_generation(s: RequestState) -> bool:
    """isGenerationInProgressState: past its context (GENERATION_IN_PROGRESS), or, under the overlap scheduler,
    finished by the step in flight and not yet processed (GENERATION_TO_COMPLETE: an active request FINISHED)."""
    return s.status is not RequestStatus.WAITING and s.sampled_since_admission


def is_started(s: RequestState) -> bool:
    """A generation request, or a context request past its first chunk: it holds KV blocks."""
    return s.status is not RequestStatus.WAITING


class ContributedBlocks:
    """beneficialToSkip's books: the first new context block each request scheduled this step contributes (by
    its key), starting with those of chunked contexts already executing
    (`prefillWithChunkedContextsAlreadyExecuting`)."""

    __slots__ = ("sched", "by")

    def __init__(self, sched: TrtllmScheduler, active: list[RequestState]) -> None:
        self.sched, self.by = sched, {}
        if sched.prefix:
            for s in active:
                if is_started(s) and not s.sampled_since_admission:
                    self._contribute(s)

    def _contribute(self, s: RequestState) -> str | None:
        key = self.sched.kv.find_new_context_block(s)
        if key is None:
            return None
        owner = self.by.setdefault(key, s.request_id)
        return owner if owner != s.request_id else None

    def beneficial_to_skip(self, s: RequestState) -> str | None:
        """A first context chunk whose first new block another request contributes in this step: better skip it
        this step and reuse that block in the next (the other's id); else it contributes its own (None)."""
        if not self.sched.prefix or s.status is not RequestStatus.WAITING:
            return None
        return self._contribute(s)


class GuaranteedNoEvictScheduler:
    """GuaranteedNoEvictScheduler::impl<false>: every generation request runs, and the blocks it may still need
    to finish are reserved (`getRemainingBlocksToCompletion`); then the other requests, in order, each only if its
    remaining lifetime of blocks fits in what is left, and the first that does not stops the scan (no skipping
    past it)."""

    name = "GUARANTEED_NO_EVICT"
    static_batch = False

    def __call__(self, sched: TrtllmScheduler, active: list[RequestState]) -> Capacity:
        cap, kv, tc = Capacity(), sched.kv, sched.trt
        explain = sched.explain
        contributed = None if self.static_batch else ContributedBlocks(sched, active)
        available = kv.free_blocks  # None: an unlimited pool
        pending = []
        for s in active:
            if is_generation(s):
                cap.fitting.append(s)
                if available is not None:
                    available -= get_remaining_blocks_to_completion(s, tc.tokens_per_block, sched.max_seq_len,
                                                                    kv.per_request)
            else:
                pending.append(s)
        if self.static_batch and cap.fitting:
            for s in pending if explain else ():
                cap.waiting[s] = (Reason.BATCH_CLOSED, f"STATIC_BATCH: {len(cap.fitting)} generation requests run; "
                                  "requests start when the batch drains")
            return cap
        for i, s in enumerate(pending):
            other = contributed.beneficial_to_skip(s) if contributed is not None else None
            if other is not None:
                if explain:
                    cap.skip_for_reuse(s, other)
                continue
            need = get_remaining_blocks_to_completion(s, tc.tokens_per_block, sched.max_seq_len, kv.per_request)
            if available is not None and need > available:
                if explain:
                    self._note_blocked(cap, pending[i:], need, available)
                break
            cap.fitting.append(s)
            if available is not None:
                available -= need
        return cap

    def _note_blocked(self, cap: Capacity, rest: list[RequestState], need: int, available: int) -> None:
        head = rest[0]
        cap.waiting[head] = (Reason.LIFETIME_KV, f"its lifetime KV ({need:,} blocks) does not fit beside the running "
                             f"requests' reservations ({max(available, 0):,} blocks left) under {self.name}")
        for s in rest[1:]:
            cap.waiting.setdefault(s, (Reason.BLOCKED_BEHIND_HEAD, f"behind {head.request_id} ({self.name} "
                                       "admits in order)"))


class StaticBatchScheduler(GuaranteedNoEvictScheduler):
    """StaticBatchScheduler (GuaranteedNoEvictScheduler::impl<true>): as GUARANTEED_NO_EVICT, but new requests
    start only when no generation request is running, and nothing is skipped for reuse."""

    name = "STATIC_BATCH"
    static_batch = True


class MaxUtilizationScheduler:
    """MaxUtilizationScheduler: requests in order, each if the blocks of its next step fit beside those of the
    requests before it (`trySchedulingRequestMaxUtilization`, `getNeededBlocksOneStep`); when one does not, the
    last started request from it to the end of the list is paused (its blocks given back for this step's books,
    `schedulingRemoveSequence`) and the request tried again; with none left to pause the scan stops."""

    name = "MAX_UTILIZATION"

    def __call__(self, sched: TrtllmScheduler, active: list[RequestState]) -> Capacity:
        cap, kv, tc = Capacity(), sched.kv, sched.trt
        contributed = ContributedBlocks(sched, active)
        free, scheduled = kv.free_blocks, 0  # startScheduling: this step's books start at the free blocks
        end, i = len(active), 0
        while i < end:
            s = active[i]
            other = contributed.beneficial_to_skip(s)
            if other is not None:
                if sched.explain:
                    cap.skip_for_reuse(s, other)
                i += 1
                continue
            need = get_needed_blocks_one_step(s, tc.tokens_per_block, kv.per_request)
            if free is None or scheduled + need <= free:
                scheduled += need
                cap.fitting.append(s)
                i += 1
                continue
            victim = next((j for j in range(end - 1, i - 1, -1) if is_started(active[j])), None)
            if victim is None:
                if sched.explain:
                    self._note_blocked(cap, active[i:end], need, free - scheduled)
                break
            v = active[victim]
            free += sched.freed_if_removed(v)
            cap.paused.append(v)
            if sched.explain:
                cap.waiting[v] = (Reason.PREEMPTED, f"paused under {self.name}: {s.request_id}'s next step "
                                  f"({need} blocks) did not fit; it resumes by recomputing its "
                                  f"{v.num_tokens:,} tokens")
            end = victim
        return cap

    def _note_blocked(self, cap: Capacity, rest: list[RequestState], need: int, left: int) -> None:
        head = rest[0]
        cap.waiting[head] = (Reason.KV_BLOCKS, f"its next step's KV ({need:,} blocks) does not fit ({left:,} blocks "
                             f"left) under {self.name}, and no started request is left to pause")
        for s in rest[1:]:
            cap.waiting.setdefault(s, (Reason.BLOCKED_BEHIND_HEAD, f"behind {head.request_id} ({self.name} stops "
                                       "at the first request that does not fit)"))


CAPACITY_SCHEDULERS = {p.name: p for p in (GuaranteedNoEvictScheduler, MaxUtilizationScheduler,
                                           StaticBatchScheduler)}
