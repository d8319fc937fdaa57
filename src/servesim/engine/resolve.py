"""Before a run: fill the workload-dependent defaults and refuse what cannot work, as vLLM validates at start-up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from servesim.cost import CostModel
from servesim.engine.config import EngineConfig
from servesim.engine.kv import blocks_for
from servesim.engine.request import Request
from servesim.errors import ConfigError
from servesim.policies import policy_class


def resolve_config(
    config: EngineConfig, policy: str, requests: Sequence[Request], cost: CostModel | None = None
) -> EngineConfig:
    """Fill workload-dependent defaults and reject what cannot work, before simulating (as vLLM validates).

    A cost model that knows the model and GPU (the roofline) also sets the KV bytes per token and, when
    `num_gpu_blocks` is not given, derives it from GPU memory as vLLM does.
    """
    if not policy_class(policy).chunked:
        config = replace(config, enable_chunked_prefill=False)
    longest = max((r.prompt_len + r.output_len for r in requests), default=1)
    cfg = config.resolved(longest)
    kv_bytes = getattr(cost, "kv_bytes_per_token", None)
    if kv_bytes:
        cfg = replace(cfg, kv_bytes_per_token=kv_bytes)
    derive = getattr(cost, "num_gpu_blocks", None)
    if cfg.num_gpu_blocks is None and callable(derive):
        cfg = replace(cfg, num_gpu_blocks=derive(cfg.block_size, cfg.gpu_memory_utilization,
                                                 cfg.max_num_batched_tokens, cfg.max_num_seqs))
    if longest <= cfg.max_model_len and (
            cfg.usable_blocks is None or blocks_for(longest - 1, cfg.block_size) <= cfg.usable_blocks):
        return cfg  # the longest request fits, so every one does
    for r in requests:
        if r.prompt_len + r.output_len > cfg.max_model_len:
            raise ConfigError(
                f"request {r.request_id}: prompt {r.prompt_len} + output {r.output_len} tokens exceeds "
                f"max_model_len {cfg.max_model_len}"
            )
        if cfg.usable_blocks is not None:
            # the last output token is never fed back, so the cache holds at most prompt + output - 1 tokens
            need = blocks_for(r.prompt_len + r.output_len - 1, cfg.block_size)
            if need > cfg.usable_blocks:
                raise ConfigError(
                    f"request {r.request_id} needs {need} KV blocks of {cfg.block_size} tokens but the whole pool "
                    f"has {cfg.usable_blocks} usable (num_gpu_blocks {cfg.num_gpu_blocks} minus vLLM's null block)"
                )
    return cfg
