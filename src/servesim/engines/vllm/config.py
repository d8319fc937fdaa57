"""vLLM's configuration resolved once (pinned: vLLM 0.33.0, `vllm/engine/arg_utils.py` and the worker's memory
profiling): the shared knobs' `vllm serve` defaults for the GPU and model (`servesim.engines.config`), then the KV
pool from GPU memory when `num_gpu_blocks` is not given. The lesson's static and continuous policies resolve the
same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from servesim.engine.request import Request
from servesim.engine.scheduler import Scheduler
from servesim.engines.config import EngineConfig, resolve_shared

BLOCK_SIZES = (1, 8, 16, 32, 64, 128)  # vLLM 0.33's --block-size choices (CUDA)


def resolve(config: EngineConfig, scheduler: type[Scheduler], requests: Sequence[Request], cost: Any) -> EngineConfig:
    """The shared defaults, then `num_gpu_blocks` derived by a cost model that knows the model and GPU, as vLLM
    sizes its pool: (GPU memory x gpu_memory_utilization - weights - activations at the budget) / block bytes."""
    cfg = resolve_shared(config, scheduler.chunked, requests, cost)
    derive = getattr(cost, "num_gpu_blocks", None)
    if cfg.num_gpu_blocks is None and callable(derive):
        cfg = replace(cfg, num_gpu_blocks=derive(cfg.block_size, cfg.gpu_memory_utilization,
                                                 cfg.max_num_batched_tokens, cfg.max_num_seqs))
    return cfg
