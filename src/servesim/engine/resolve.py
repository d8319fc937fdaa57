"""Before a run: fill the workload-dependent defaults and refuse what cannot work, as vLLM validates at start-up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from servesim.cost import CostModel
from servesim.engine.config import DEFAULT_BUDGET, DEFAULT_MAX_NUM_SEQS, EngineConfig
from servesim.engine.kv import blocks_for
from servesim.engine.request import Request
from servesim.engine.sglang_config import SGLangConfig, with_token_pool
from servesim.errors import ConfigError
from servesim.policies import policy_class

GIB = 1 << 30


def vllm_serve_defaults(gpu: object | None) -> tuple[int, int]:
    """vLLM 0.33's defaults for `vllm serve` (`EngineArgs._set_default_args`, usage context OpenAI API server):
    (max_num_batched_tokens, max_num_seqs) = (8192, 1024) on a GPU with >= 70 GiB that is not an A100, else
    (2048, 256). With no GPU (the toy and unit costs) the small-GPU defaults."""
    memory, name = getattr(gpu, "memory_bytes", 0), getattr(gpu, "name", "")
    if memory >= 70 * GIB and "a100" not in name.lower():
        return 8192, 1024
    return DEFAULT_BUDGET, DEFAULT_MAX_NUM_SEQS


def resolve_config(
    config: EngineConfig, policy: str, requests: Sequence[Request], cost: CostModel | None = None
) -> EngineConfig:
    """Fill the defaults and reject what cannot work, before simulating (as vLLM validates at start-up).

    Defaults, as `vllm serve` sets them: the token budget and `max_num_seqs` for the cost model's GPU
    (`vllm_serve_defaults`); `max_model_len` from the model's `max_position_embeddings` (a roofline cost), else the
    longest request. A cost model that knows the model and GPU also sets the KV bytes per token and, when
    `num_gpu_blocks` is not given, derives it from GPU memory as vLLM does. Requests longer than `max_model_len`
    are not refused here: they fail when they arrive (`too_long`), as vLLM rejects them.
    """
    if len({r.request_id for r in requests}) != len(requests):
        seen: dict[str, int] = {}
        for i, r in enumerate(requests):
            if r.request_id in seen:
                raise ConfigError(f"request_id {r.request_id!r}: used by requests {seen[r.request_id]} and {i} "
                                  "(counting from 0); expected every request id once")
            seen[r.request_id] = i
    _check_after(requests)
    if policy == "sglang":  # SGLang sizes its token pool itself (mem_fraction_static), before its other limits
        config = replace(config, sglang=with_token_pool(config.sglang or SGLangConfig(), cost))
    config = policy_class(policy).configure(config)
    if not policy_class(policy).chunked:
        config = replace(config, enable_chunked_prefill=False)
    budget, max_num_seqs = vllm_serve_defaults(getattr(cost, "gpu", None))
    model_len = getattr(getattr(cost, "model", None), "max_position_embeddings", None)
    longest = max((r.prompt_len + r.output_len for r in requests), default=1)
    cfg = config.resolved(longest, budget, max_num_seqs, model_len)
    if cfg.sglang is not None and cfg.sglang.max_total_num_tokens is not None:
        # SGLang admits a request only if prompt + max_new + page_size < the whole pool: longer ones would wait
        # forever, so they fail on arrival (servesim's guard; SGLang rejects beyond max_req_len)
        fits = cfg.sglang.max_total_num_tokens - 1 - cfg.sglang.page_size
        cfg = replace(cfg, max_model_len=min(cfg.max_model_len, fits))
    kv_bytes = getattr(cost, "kv_bytes_per_token", None)
    if kv_bytes:
        cfg = replace(cfg, kv_bytes_per_token=kv_bytes)
    derive = getattr(cost, "num_gpu_blocks", None)
    if cfg.num_gpu_blocks is None and callable(derive) and policy != "sglang":
        cfg = replace(cfg, num_gpu_blocks=derive(cfg.block_size, cfg.gpu_memory_utilization,
                                                 cfg.max_num_batched_tokens, cfg.max_num_seqs))
    if cfg.enable_prefix_caching:
        for r in requests:
            if r.hash_ids is None:
                continue
            hbs = r.hash_block_size or cfg.block_size
            if hbs % cfg.block_size and cfg.block_size % hbs:
                raise ConfigError(f"request {r.request_id}: hash_ids of {hbs}-token blocks cannot be split into "
                                  f"or grouped as block_size {cfg.block_size}; expected a multiple or a divisor")
            if len(r.hash_ids) != blocks_for(r.hashed_len, hbs):
                what = "prompt" if r.hash_scope == "prompt" else "prompt and output"
                raise ConfigError(f"request {r.request_id}: {len(r.hash_ids)} hash_ids for a {r.hashed_len}-token "
                                  f"{what}; expected one per {hbs}-token block ({blocks_for(r.hashed_len, hbs)})")
    allowed = min(longest, cfg.max_model_len)
    if cfg.usable_blocks is None or blocks_for(allowed - 1, cfg.block_size) <= cfg.usable_blocks:
        return cfg  # the longest request allowed fits in the pool, so every one does
    for r in requests:
        if r.prompt_len + r.output_len > cfg.max_model_len:
            continue  # fails on arrival
        # the last output token is never fed back, so the cache holds at most prompt + output - 1 tokens
        need = blocks_for(r.prompt_len + r.output_len - 1, cfg.block_size)
        if need > cfg.usable_blocks:
            raise ConfigError(
                f"request {r.request_id} needs {need} KV blocks of {cfg.block_size} tokens but the whole pool "
                f"has {cfg.usable_blocks} usable (num_gpu_blocks {cfg.num_gpu_blocks} minus vLLM's null block)"
            )
    return cfg


def too_long(requests: Sequence[Request], max_model_len: int) -> list[int]:
    """Indices of the requests vLLM rejects: prompt + output tokens beyond `max_model_len` ("This model's maximum
    context length is N tokens"); `vllm bench serve` counts them as failed."""
    return [i for i, r in enumerate(requests) if r.prompt_len + r.output_len > max_model_len]


def _check_after(requests: Sequence[Request]) -> None:
    """A closed-loop request is sent after an earlier request of the workload (a conversation's previous turn)."""
    if not any(r.after is not None for r in requests):
        return
    seen: set[str] = set()
    for i, r in enumerate(requests):
        if r.after is not None and r.after not in seen:
            raise ConfigError(f"request {r.request_id!r} (request {i}, counting from 0): after={r.after!r} names no "
                              "earlier request; expected the id of a request before it in the workload")
        seen.add(r.request_id)
