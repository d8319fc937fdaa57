"""TensorRT-LLM's configuration resolved once (pinned: TensorRT-LLM 1.2, `tensorrt_llm/llmapi/llm_args.py` and the
PyTorch executor's KV cache sizing, `_torch/pyexecutor/_util.py`'s `KvCacheCreator`): the section
(`llm_args.TrtllmConfig`) checked against the knobs every engine shares, the KV pool sized from GPU memory, and
vLLM's sizes carried over under TensorRT-LLM's names for a side-by-side run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace

from servesim.engine.request import Request
from servesim.engine.scheduler import Scheduler
from servesim.engines.config import EngineConfig
from servesim.engines.trtllm.llm_args import TrtllmConfig
from servesim.errors import ConfigError

DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.9  # trtllm-serve's --kv_cache_free_gpu_memory_fraction

VLLM_ONLY = {  # vLLM knobs with no meaning under TensorRT-LLM's scheduler, and what to use instead
    "max_num_batched_tokens": "trtllm.max_num_tokens (--max_num_tokens)",
    "max_num_seqs": "trtllm.max_batch_size (--max_batch_size)",
    "max_model_len": "trtllm.max_seq_len (--max_seq_len)",
    "num_gpu_blocks": "trtllm.max_tokens (kv_cache_config.max_tokens)",
    "block_size": "trtllm.tokens_per_block (kv_cache_config.tokens_per_block)",
    "gpu_memory_utilization": "trtllm.free_gpu_memory_fraction (--kv_cache_free_gpu_memory_fraction)",
    "enable_prefix_caching": "trtllm.enable_block_reuse (kv_cache_config.enable_block_reuse)",
    "enable_chunked_prefill": "trtllm.enable_chunked_prefill (--enable_chunked_prefill)",
    "long_prefill_token_threshold": None, "long_prefill_token_threshold_adaptive": None,
    "max_num_active_seqs": "trtllm.max_batch_size", "prefill_schedule_interval": None, "watermark": None,
    "scheduler_reserve_full_isl": "trtllm.capacity_scheduler_policy", "async_scheduling": None,
    "preemption_mode": "trtllm.capacity_scheduler_policy MAX_UTILIZATION (pauses recompute)",
    "policy": None, "swap_space": None, "num_cpu_blocks": None, "pcie_bandwidth": None,
    "kv_bytes_per_token": "a roofline cost (--model), whose model sizes the KV pool",
    "speculative_config": None, "use_v2_model_runner": None, "acceptance_rate": None, "acceptance_seed": None,
}


def resolve(config: EngineConfig, scheduler: type[Scheduler], requests: Sequence[Request],
            cost: object) -> EngineConfig:
    """The section's defaults; the pool in blocks (`kv_pool_blocks`); max_seq_len from the model, capped at what
    the pool holds (a longer request fails on arrival); the shared knobs readers show filled from the section."""
    refuse_vllm_knobs(config)
    trt = config.trtllm or TrtllmConfig()
    longest = max((r.prompt_len + r.output_len for r in requests), default=1)
    model_len = getattr(getattr(cost, "model", None), "max_position_embeddings", None)
    max_seq_len = trt.max_seq_len or model_len or longest
    blocks = kv_pool_blocks(trt, cost)
    if blocks is not None:
        max_seq_len = min(max_seq_len, blocks * trt.tokens_per_block)
    if not trt.enable_chunked_prefill:
        _check_contexts_fit(trt, requests, max_seq_len)
    kv_bytes = getattr(cost, "kv_bytes_per_token", None)
    per_request = getattr(cost, "kv_blocks_per_request", None)  # (a sliding-window model's window blocks)
    window = per_request(trt.tokens_per_block) if callable(per_request) else 0
    return replace(config, trtllm=trt, kv_blocks_per_request=window, max_num_batched_tokens=trt.max_num_tokens,
                   max_num_seqs=trt.max_batch_size,
                   max_model_len=max_seq_len, block_size=trt.tokens_per_block,
                   num_gpu_blocks=None if blocks is None else blocks + 1,  # (servesim's pool counts a null block)
                   enable_chunked_prefill=trt.enable_chunked_prefill, enable_prefix_caching=trt.enable_block_reuse,
                   **({"kv_bytes_per_token": kv_bytes} if kv_bytes else {}))


def refuse_vllm_knobs(cfg: EngineConfig) -> None:
    base = EngineConfig()
    for name, instead in VLLM_ONLY.items():
        if getattr(cfg, name) != getattr(base, name):
            use = f"; use {instead}" if instead else ""
            raise ConfigError(f"{name} is a vLLM knob with no meaning under policy trtllm{use}")


def kv_pool_blocks(trt: TrtllmConfig, cost: object) -> int | None:
    """The KV pool in blocks, as the PyTorch executor sizes it: free_gpu_memory_fraction of the GPU memory left
    after the weights and the activations of a max_num_tokens batch (its profiling run), over the bytes of a
    block; capped by kv_cache_config.max_tokens. A cost with no GPU: max_tokens alone, or unlimited (None)."""
    tpb, cap = trt.tokens_per_block, trt.max_tokens
    knows_gpu = all(hasattr(cost, a) for a in ("gpu", "weight_bytes", "activation_peak_bytes", "kv_bytes_per_token"))
    if not knows_gpu:
        if trt.free_gpu_memory_fraction is not None:
            raise ConfigError(f"trtllm.free_gpu_memory_fraction {trt.free_gpu_memory_fraction}: the "
                              f"{getattr(cost, 'name', cost)} cost knows no GPU memory to take a fraction of; use a "
                              "roofline (--model/--gpu) or give trtllm.max_tokens")
        return None if cap is None else _at_least_one(cap // tpb, cap, tpb)
    fraction = trt.free_gpu_memory_fraction or DEFAULT_FREE_GPU_MEMORY_FRACTION
    left = cost.gpu.memory_bytes - cost.weight_bytes - cost.activation_peak_bytes(trt.max_num_tokens,
                                                                                    trt.max_batch_size)
    blocks = int(left * fraction // (tpb * cost.kv_bytes_per_token))
    if blocks < 1:
        raise ConfigError(f"{cost.model.name} leaves no KV cache on {cost.gpu.name} at tp={cost.tp}: weights "
                          f"{cost.weight_bytes / 2**30:.1f} GiB per GPU; raise tp or lower trtllm.max_num_tokens")
    return blocks if cap is None else min(blocks, _at_least_one(cap // tpb, cap, tpb))


def _at_least_one(blocks: int, cap: int, tpb: int) -> int:
    if blocks < 1:
        raise ConfigError(f"trtllm.max_tokens {cap} holds no block of tokens_per_block {tpb}")
    return blocks


def _check_contexts_fit(trt: TrtllmConfig, requests: Sequence[Request], max_seq_len: int) -> None:
    """Chunked prefill off: a context runs whole in one batch, so a prompt over max_num_tokens could never run."""
    for r in requests:
        if max_num := trt.max_num_tokens:
            if r.prompt_len > max_num and r.prompt_len + r.output_len <= max_seq_len:
                raise ConfigError(f"request {r.request_id}: its {r.prompt_len:,}-token prompt exceeds max_num_tokens "
                                  f"{max_num:,} with enable_chunked_prefill off (a context runs whole in one "
                                  "batch); raise trtllm.max_num_tokens or set trtllm.enable_chunked_prefill")


def from_vllm_sizes(cfg: EngineConfig, trt: TrtllmConfig | None = None) -> tuple[EngineConfig, list[str]]:
    """vLLM's sizes given as TensorRT-LLM's, to run one workload through both (`compare`, the lesson's settings):
    the budget as max_num_tokens, max_num_seqs as max_batch_size, the pool as max_tokens, the block size as
    tokens_per_block, chunked prefill and prefix caching as enable_chunked_prefill and enable_block_reuse (vLLM's
    on by default: carried when given). A size the section sets keeps its value."""
    base, trt = EngineConfig(), trt or cfg.trtllm or TrtllmConfig()
    given = {f.name for f in fields(TrtllmConfig) if getattr(trt, f.name) != getattr(TrtllmConfig(), f.name)}
    carried, moved = {}, []
    pairs = (("max_num_batched_tokens", "max_num_tokens", lambda v: v),
             ("max_num_seqs", "max_batch_size", lambda v: v),
             ("max_model_len", "max_seq_len", lambda v: v),
             ("num_gpu_blocks", "max_tokens", lambda v: (v - 1) * cfg.block_size),
             ("enable_chunked_prefill", "enable_chunked_prefill", lambda v: v),
             ("enable_prefix_caching", "enable_block_reuse", lambda v: v),
             ("block_size", "tokens_per_block", lambda v: v))  # (last: the pool's conversion reads the block size)
    for vllm, own, convert in pairs:
        value = getattr(cfg, vllm)
        if value == getattr(base, vllm):
            continue
        cfg = replace(cfg, **{vllm: getattr(base, vllm)})
        if own not in given:
            carried[own] = convert(value)
            moved.append(f"{vllm} {value} as {own} {carried[own]}")
    if "max_num_tokens" in carried and "enable_chunked_prefill" not in given | set(carried) and \
            cfg.enable_chunked_prefill:  # (vLLM's budget is a chunk budget: its chunking, on by default, comes too)
        carried["enable_chunked_prefill"] = True
        moved.append("vLLM's chunked prefill (on by default) as enable_chunked_prefill True")
    return replace(cfg, trtllm=replace(trt, **carried)), moved


def unchunked_config(cfg: EngineConfig) -> EngineConfig:
    """A resolved `trtllm` run's config with chunked prefill off, to run again: the shared fields the resolution
    filled back at their defaults, max_num_tokens raised to max_seq_len where it was smaller."""
    base, trt = EngineConfig(), cfg.trtllm or TrtllmConfig()
    # (a whole context must fit one batch: max_num_tokens at least the longest request allowed)
    trt = replace(trt, enable_chunked_prefill=False, max_num_tokens=max(trt.max_num_tokens, cfg.max_model_len))
    return replace(cfg, **{name: getattr(base, name) for name in VLLM_ONLY}, trtllm=trt)


def bound_text(cfg: EngineConfig) -> dict[str, str]:
    """What bound a step, under TensorRT-LLM's names (explain's run summary)."""
    trt = cfg.trtllm
    return {
        "token_budget": f"max_num_tokens ({trt.max_num_tokens})",
        "max_num_seqs": "max_batch_size ({seqs} active)",
        "kv_blocks": f"the KV cache under {trt.capacity_scheduler_policy} (lifetime reservations, pauses)",
        "batch_closed": "STATIC_BATCH (new requests wait for the running batch to drain)",
    }
