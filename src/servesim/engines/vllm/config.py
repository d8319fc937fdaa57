"""vLLM's configuration resolved once (pinned: vLLM 0.33.0, `vllm/engine/arg_utils.py` and the worker's memory
profiling): the shared knobs' `vllm serve` defaults for the GPU and model (`servesim.engines.config`), then the KV
pool from GPU memory when `num_gpu_blocks` is not given. The lesson's static and continuous policies resolve the
same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from servesim.engine.kv import blocks_for
from servesim.engine.request import Request
from servesim.engine.scheduler import Scheduler
from servesim.engines.config import GIB, EngineConfig, resolve_shared
from servesim.errors import ConfigError

BLOCK_SIZES = (1, 8, 16, 32, 64, 128)  # vLLM 0.33's --block-size choices (CUDA)


def resolve(config: EngineConfig, scheduler: type[Scheduler], requests: Sequence[Request], cost: Any) -> EngineConfig:
    """The shared defaults, then `num_gpu_blocks` derived by a cost model that knows the model and GPU, as vLLM
    sizes its pool: (GPU memory x gpu_memory_utilization - weights - activations at the budget) / block bytes."""
    cfg = resolve_shared(config, scheduler.chunked, requests, cost)
    cfg = _swap(cfg)
    derive = getattr(cost, "num_gpu_blocks", None)
    if cfg.gpu_memory_utilization != EngineConfig().gpu_memory_utilization:
        if not callable(derive):
            raise ConfigError(f"gpu_memory_utilization {cfg.gpu_memory_utilization}: it sizes the KV pool from GPU "
                              f"memory, and the {getattr(cost, 'name', cost)} cost knows no GPU; use a roofline "
                              "(--model/--gpu) or give num_gpu_blocks")
        if cfg.num_gpu_blocks is not None:
            raise ConfigError("give one of num_gpu_blocks and gpu_memory_utilization: the pool's size, or the share "
                              "of GPU memory it comes from")
    size = getattr(cost, "kv_block_size", None)
    if callable(size) and size(cfg.block_size) != cfg.block_size:  # (a linear-attention model's state page)
        cfg = replace(cfg, block_size=size(cfg.block_size))
    if cfg.num_gpu_blocks is None and callable(derive):
        cfg = replace(cfg, num_gpu_blocks=derive(cfg.block_size, cfg.gpu_memory_utilization,
                                                 cfg.max_num_batched_tokens, cfg.max_num_seqs))
    per_request = getattr(cost, "kv_blocks_per_request", None)
    if callable(per_request) and not cfg.kv_blocks_per_request:  # (a hybrid model's sliding-window blocks)
        cfg = replace(cfg, kv_blocks_per_request=per_request(cfg.block_size))
    if cfg.speculative_config is not None:
        _check_speculation(cfg, requests)
    if cfg.watermark and cfg.num_gpu_blocks is None:
        raise ConfigError(f"watermark {cfg.watermark}: it keeps a share of num_gpu_blocks free, and the KV pool is "
                          "unlimited (this cost knows no GPU); give num_gpu_blocks or use a roofline (--model/--gpu)")
    return cfg



def _check_speculation(cfg: EngineConfig, requests: Sequence[Request]) -> None:
    """What vLLM 0.33 refuses with a speculative config (`config/vllm.py` 1650-1680: async scheduling on the V1
    runner with n-gram drafts), what it does not have (swap), and an acceptance for every request."""
    spec = cfg.speculative_config
    if cfg.async_scheduling and not cfg.use_v2_model_runner and spec.method == "ngram":
        raise ConfigError("async_scheduling with speculative_config.method ngram: vLLM 0.33's V1 model runner refuses "
                          "it (\"Async scheduling is not supported by the V1 model runner with ngram-based "
                          "speculative decoding\"); use the V2 runner (use_v2_model_runner) or synchronous scheduling")
    if cfg.max_num_batched_tokens <= spec.max_num_new_slots_for_drafting:
        raise ConfigError(f"max_num_batched_tokens {cfg.max_num_batched_tokens}: with {spec.method}'s "
                          f"{spec.max_num_new_slots_for_drafting} input slots per request for drafting nothing could "
                          "ever be scheduled; raise it")
    room = cfg.max_num_batched_tokens - spec.max_num_new_slots_for_drafting
    if not cfg.enable_chunked_prefill and room < cfg.max_model_len:
        raise ConfigError(f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) less {spec.method}'s "
                          f"{spec.max_num_new_slots_for_drafting} input slots for drafting is smaller than "
                          f"max_model_len ({cfg.max_model_len}) with chunked prefill off: the longest prompt could "
                          "never be scheduled; raise max_num_batched_tokens or enable chunked prefill")
    if cfg.preemption_mode == "swap":
        raise ConfigError("speculative_config with preemption_mode swap: vLLM v1, which speculates, has no swap; "
                          "use preemption_mode recompute")
    usable = cfg.usable_blocks
    for r in requests if usable is not None else ():
        # its last step: all but its last token computed, 1 + K scheduled and the lookahead past them (S3, S6)
        tokens = min(r.prompt_len + r.output_len - 1 + spec.num_speculative_tokens + spec.num_lookahead_tokens,
                     cfg.max_model_len)
        if blocks_for(tokens, cfg.block_size) > usable:
            raise ConfigError(f"request {r.request_id} needs {blocks_for(tokens, cfg.block_size)} KV blocks of "
                              f"{cfg.block_size} tokens with its drafts and the drafter's lookahead, and the pool has "
                              f"{usable} usable (num_gpu_blocks {cfg.num_gpu_blocks} minus vLLM's null block)")
    if cfg.acceptance_rate is None:
        missing = next((r.request_id for r in requests if r.accept is None), None)
        if missing is not None:
            raise ConfigError(f"speculative_config: request {missing!r} has no acceptance; give acceptance_rate "
                              "(--acceptance-rate: one rate, or one per draft position) or each request's accept list")


def _swap(cfg: EngineConfig) -> EngineConfig:
    """The host pool for swap preemption, in blocks: vLLM's --swap-space GiB over the bytes of one block of KV
    (`CacheConfig.num_cpu_blocks`), unless given."""
    if cfg.num_cpu_blocks is not None:
        return cfg
    return replace(cfg, num_cpu_blocks=int(cfg.swap_space * GIB // (cfg.block_size * cfg.kv_bytes_per_token)))
