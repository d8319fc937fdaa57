"""TensorRT-LLM's micro-batch scheduler: the batch of one step among the requests that fit in the KV cache
(pinned: TensorRT-LLM 1.2, `cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp`; the PyTorch executor binds it
with max_context_length = max_num_tokens and a chunk unit of tokens_per_block, `_torch/pyexecutor/_util.py`).

The fitting requests in order: a generation request costs one token, a context request its remaining context.
A token or a request over `max_num_tokens` / `max_batch_size` ends the scan. Without chunking a context request
goes whole; with it every context request is collected first, and when they do not all fit beside the
generation tokens their chunk sizes are set by the chunking policy (`setCtxRequestsChunkSize`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servesim.engine.records import Reason
from servesim.engine.request import RequestState
from servesim.engines.trtllm.capacity_scheduler import is_generation
from servesim.errors import ConfigError


@dataclass(slots=True)
class MicroBatch:
    context: dict[RequestState, int] = field(default_factory=dict)  # request -> its chunk this step
    generation: list[RequestState] = field(default_factory=list)
    waiting: dict[RequestState, tuple[Reason, str]] = field(default_factory=dict)  # fitting, left out, and why


def schedule_micro_batch(fitting: list[RequestState], max_batch_size: int, max_num_tokens: int,
                         chunking: str | None, unit: int) -> MicroBatch:
    """MicroBatchScheduler::operator(): `chunking` is the context chunking policy (None: chunked prefill off),
    `unit` the chunk unit size."""
    mb, tokens, count = MicroBatch(), 0, 0
    to_chunk: list[RequestState] = []
    num_chunked, all_fit = 0, True
    stop = None
    for i, s in enumerate(fitting):
        generation = is_generation(s)
        if generation or chunking is None:
            need = 1 if generation else s.num_tokens - s.num_computed_tokens
            if need > max_num_tokens:
                _context_too_long(s, need, max_num_tokens)
            if tokens + need > max_num_tokens:
                stop = (i, Reason.TOKEN_BUDGET, f"{need:,} tokens, {max_num_tokens - tokens:,} of max_num_tokens "
                        f"{max_num_tokens:,} left")
                break
            if generation:
                mb.generation.append(s)
            else:
                mb.context[s] = need
            tokens += need
        else:
            remaining = s.num_tokens - s.num_computed_tokens
            to_chunk.append(s)
            if remaining > max_num_tokens:  # (max_context_length: it must be chunked)
                all_fit = False
            num_chunked += min(remaining, max_num_tokens)
        count += 1
        if count >= max_batch_size:
            stop = (i + 1, Reason.MAX_NUM_SEQS, f"max_batch_size {max_batch_size} reached")
            break
    if to_chunk:
        capacity = max_num_tokens - tokens
        if num_chunked > capacity:
            all_fit = False
        sizes = ([s.num_tokens - s.num_computed_tokens for s in to_chunk] if all_fit else
                 CHUNKING[chunking](to_chunk, capacity, unit, max_num_tokens))
        for s, size in zip(to_chunk, sizes):
            if size > 0:
                mb.context[s] = size
            else:
                mb.waiting[s] = (Reason.TOKEN_BUDGET, f"{chunking}: no chunk left of max_num_tokens "
                                 f"{max_num_tokens:,} ({tokens:,} generation tokens)")
    if stop is not None:
        first, reason, detail = stop
        for s in fitting[first:]:
            mb.waiting[s] = (reason, detail)
    return mb


def first_come_first_served(requests: list[RequestState], capacity: int, unit: int, max_context: int) -> list[int]:
    """setCtxRequestsChunkSize<kFIRST_COME_FIRST_SERVED>: in order, each its whole remaining context, capped by
    what is left of the capacity and by max_context_length; a capped chunk is rounded down to the unit."""
    sizes = []
    for s in requests:
        remaining = s.num_tokens - s.num_computed_tokens
        size = min(remaining, capacity, max_context)
        if size != remaining:
            size = size // unit * unit
        sizes.append(size)
        capacity -= size
    return sizes


def equal_progress(requests: list[RequestState], capacity: int, unit: int, max_context: int) -> list[int]:
    """setCtxRequestsChunkSize<kEQUAL_PROGRESS>: rounds over the requests, each growing its chunk by one unit
    (clamped to its remaining context) while the capacity and max_context_length allow, until a round adds
    nothing."""
    remaining = [s.num_tokens - s.num_computed_tokens for s in requests]
    sizes = [0] * len(requests)
    total, added = 0, 1
    while total < capacity and added:
        added = 0
        for k, left in enumerate(remaining):
            size = min(sizes[k] + unit, left)
            grow = size - sizes[k]
            if total + grow > capacity or size > max_context:
                continue
            sizes[k] = size
            total += grow
            added += grow
    return sizes


CHUNKING = {"FIRST_COME_FIRST_SERVED": first_come_first_served, "EQUAL_PROGRESS": equal_progress}


def _context_too_long(s: RequestState, need: int, max_num_tokens: int) -> None:
    """An unchunked context over max_context_length (max_num_tokens): TensorRT-LLM's check fails ("Context length
    > max context length"). A prompt that long is refused at start-up; a request paused under MAX_UTILIZATION
    comes back as a context of its prompt and outputs, which can grow past it."""
    raise ConfigError(f"request {s.request_id}: paused under MAX_UTILIZATION, it recomputes a {need:,}-token "
                      f"context, over max_num_tokens {max_num_tokens:,} with enable_chunked_prefill off "
                      "(TensorRT-LLM's micro-batch scheduler fails it: context length > max context length); "
                      "raise trtllm.max_num_tokens or set trtllm.enable_chunked_prefill")
