"""TensorRT-LLM's overlap scheduler (pinned: TensorRT-LLM 1.2, `tensorrt_llm/_torch/pyexecutor/py_executor.py`,
`PyExecutor._executor_loop_overlap`; on unless the LLM API's `disable_overlap_scheduler`, `TorchLlmArgs`'s default
False).

Each iteration schedules and launches step k + 1 (`_prepare_and_schedule_batch`, `prepare_resources`,
`_forward_step` with the previous batch's device tokens as the generation requests' inputs) before it processes
step k's outputs (`_update_requests(self.previous_batch.sample_state)`, then `_process_previous_batch`). So:

- a request whose last token step k samples is still a generation request when step k + 1 is scheduled
  (`_update_request_states_tp` marks it GENERATION_TO_COMPLETE, which `isGenerationInProgressState` counts): it
  keeps its place among the active requests, its KV and its reservation, and step k + 1 computes one more token
  for it, which is discarded; `_handle_responses` then ends it and `_terminate_request` frees its KV, after
  step k + 1 was scheduled;
- the context blocks step k computed are stored for reuse by `update_resources` in the same
  `_process_previous_batch`, so the schedule of step k + 1 cannot reuse them yet;
- an iteration that schedules nothing still processes the previous batch (`should_process_previous_batch`).

`PreviousBatch` is `self.previous_batch`: what the step in flight leaves to process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.request import RequestState, RequestStatus

if TYPE_CHECKING:
    from servesim.engines.trtllm.scheduler import TrtllmScheduler


class PreviousBatch:
    """The requests of the step in flight whose outputs are not processed yet: `finishing`, those its tokens end
    (GENERATION_TO_COMPLETE), and `computed`, each scheduled request with the tokens its KV held after the step
    (their full blocks stored for reuse when the batch is processed)."""

    __slots__ = ("finishing", "computed", "landed")

    def __init__(self) -> None:
        self.finishing: list[RequestState] = []
        self.computed: list[tuple[RequestState, int]] = []
        self.landed: list[RequestState] = []  # finished by the step that just ran (its batch becomes the previous)

    def __bool__(self) -> bool:
        return bool(self.finishing or self.computed)

    def land(self, s: RequestState) -> None:
        """The step just run sampled `s`'s last token: it is done (its finish time is that step's end) but, its
        output unprocessed, still active and holding its KV (GENERATION_TO_COMPLETE)."""
        s.status = RequestStatus.FINISHED
        self.landed.append(s)

    def process(self, sched: TrtllmScheduler) -> None:
        """`_process_previous_batch`: `_handle_responses` ends the finished requests (`_terminate_request`: their
        KV freed, their full blocks stored), then `update_resources` stores the blocks the step computed."""
        finishing, computed = self.finishing, self.computed
        self.finishing, self.computed = [], []
        for s in finishing:
            if s in sched.active:  # (else released already: paused under MAX_UTILIZATION)
                sched.terminate(s)
        if sched.prefix:
            for s, n in computed:
                if s.status is RequestStatus.RUNNING:  # (a request paused since gave its blocks back)
                    sched.kv.cache_upto(s, n)

    def launch(self, sched: TrtllmScheduler) -> None:
        """The step that just ran becomes the batch in flight (`self.previous_batch = BatchState(...)`)."""
        self.finishing, self.landed = self.landed, []
        if sched.prefix:
            self.computed = [(s, s.num_computed_tokens) for s in sched.out.scheduled
                             if s.status is RequestStatus.RUNNING]
