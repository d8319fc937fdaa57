"""SGLang's configuration resolved once (pinned: SGLang 0.5.23, `srt/server_args.py`): the server arguments of
`server_args.SGLangConfig` checked against the knobs every engine shares, the token pool sized from GPU memory as
SGLang sizes it at start-up, and vLLM's sizes carried over under SGLang's names for a side-by-side run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace

from servesim.engine.request import Request
from servesim.engine.scheduler import Scheduler
from servesim.engines.config import EngineConfig, resolve_shared
from servesim.engines.sglang import speculative
from servesim.engines.sglang.server_args import SGLangConfig, default_mem_fraction_static
from servesim.errors import ConfigError

MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3  # SGLang's state slots a running request counts for (radix cache on)


def resolve(config: EngineConfig, scheduler: type[Scheduler], requests: Sequence[Request],
            cost: object) -> EngineConfig:
    """SGLang sizes its token pool first (`mem_fraction_static`), before its other limits; the shared knobs with
    no SGLang meaning are refused, those readers show filled from SGLang's (`resolve_sglang`); a request that
    could never fit the whole pool fails on arrival."""
    config = replace(config, sglang=with_token_pool(config.sglang or SGLangConfig(), cost))
    cfg = resolve_shared(resolve_sglang(config), scheduler.chunked, requests, cost)
    if cfg.sglang.max_total_num_tokens is not None:
        # SGLang admits a request only if prompt + max_new + page_size < the whole pool: longer ones would wait
        # forever, so they fail on arrival (servesim's guard; SGLang rejects beyond max_req_len)
        fits = cfg.sglang.max_total_num_tokens - 1 - cfg.sglang.page_size
        cfg = replace(cfg, max_model_len=min(cfg.max_model_len, fits, speculative.longest(cfg.sglang)))
    if cfg.sglang.speculative_algorithm is not None:
        speculative.check_acceptance(cfg, requests)
    return cfg


VLLM_ONLY = {  # vLLM knobs with no meaning under SGLang's scheduler, and what to use instead
    "max_num_batched_tokens": "sglang.chunked_prefill_size / max_prefill_tokens",
    "max_num_seqs": "sglang.max_running_requests", "num_gpu_blocks": "sglang.max_total_num_tokens",
    "long_prefill_token_threshold": "sglang.chunked_prefill_size", "watermark": None,
    "long_prefill_token_threshold_adaptive": "sglang.chunked_prefill_size",
    "max_num_active_seqs": "sglang.max_running_requests", "prefill_schedule_interval": None,
    "async_scheduling": None, "swap_space": None, "num_cpu_blocks": None, "pcie_bandwidth": None,
    "kv_bytes_per_token": "a roofline cost (--model), whose model sizes the token pool",
    "gpu_memory_utilization": "sglang.mem_fraction_static (--mem-fraction-static: (weights + KV pool) / GPU memory)",
    "block_size": "sglang.page_size (--page-size)",
    "enable_prefix_caching": "sglang.disable_radix_cache (--disable-radix-cache)",
    "speculative_config": "sglang.speculative_algorithm (--speculative-algorithm EAGLE --speculative-num-steps 3 "
                          "--speculative-eagle-topk 1)",
    "use_v2_model_runner": None,
}


def unchunked_config(cfg: EngineConfig) -> EngineConfig:
    """A resolved `sglang` run's config with chunking off (SGLang's chunked_prefill_size -1), to run again: the
    vLLM-named fields the resolution filled back at their defaults."""
    base = EngineConfig()
    sg = replace(cfg.sglang or SGLangConfig(), chunked_prefill_size=None, enable_mixed_chunk=False)
    return replace(cfg, **{name: getattr(base, name) for name in VLLM_ONLY}, enable_chunked_prefill=True,
                   sglang=sg)


def unspeculative_config(cfg: EngineConfig) -> EngineConfig | None:
    """A resolved speculative `sglang` run's config without speculation, to run again on the same token pool (and
    the same max_running_requests): the vLLM-named fields the resolution filled back at their defaults; None when
    it did not speculate."""
    sg = cfg.sglang
    if sg is None or sg.speculative_algorithm is None:
        return None
    base = EngineConfig()
    plain = replace(sg, mem_fraction_static=None, **{f: None for f in ("speculative_algorithm", *speculative.FIELDS)})
    return replace(cfg, **{name: getattr(base, name) for name in VLLM_ONLY}, acceptance_rate=None,
                   acceptance_seed=0, sglang=plain)


def resolve_sglang(cfg: EngineConfig) -> EngineConfig:
    """Refuse vLLM-only knobs; fill `EngineConfig.sglang` and the vLLM-named fields readers show (the budget as
    the chunk size, max_num_seqs as max_running_requests)."""
    base = EngineConfig()
    for name, instead in VLLM_ONLY.items():
        if getattr(cfg, name) != getattr(base, name):
            use = f"; use {instead}" if instead else ""
            raise ConfigError(f"{name} is a vLLM knob with no meaning under policy sglang{use}")
    if cfg.policy != "fcfs":
        raise ConfigError(f"policy {cfg.policy!r} is a vLLM knob (--scheduling-policy) under policy sglang: use "
                          "sglang.enable_priority_scheduling (--enable-priority-scheduling) or sglang.schedule_policy")
    if cfg.preemption_mode != "recompute" or not cfg.enable_chunked_prefill:
        raise ConfigError("preemption_mode, policy and enable_chunked_prefill are vLLM knobs: under policy sglang "
                          "use sglang.schedule_policy and sglang.chunked_prefill_size (None = chunking off)")
    sg = cfg.sglang or SGLangConfig()
    if sg.speculative_algorithm is not None:
        sg = replace(sg, **speculative.resolved(sg))
    if sg.max_running_requests is None:
        sg = replace(sg, max_running_requests=speculative.DEFAULT_MAX_RUNNING_REQUESTS)
    if sg.chunked_prefill_size is None:
        # chunking off: the first prompt may exceed max_prefill_tokens, so the budget readers see is vLLM's
        # unchunked one (max_model_len)
        if sg.enable_mixed_chunk:
            raise ConfigError("sglang.enable_mixed_chunk needs sglang.chunked_prefill_size (chunking is off)")
        return replace(cfg, sglang=sg, max_num_seqs=sg.max_running_requests, enable_chunked_prefill=False)
    # (a decode batch verifies num_draft_tokens per request under speculation)
    budget = max(sg.chunked_prefill_size, sg.max_running_requests * (sg.speculative_num_draft_tokens or 1))
    return replace(cfg, sglang=sg, max_num_seqs=sg.max_running_requests, max_num_batched_tokens=budget)


def with_token_pool(sg: SGLangConfig, cost: object) -> SGLangConfig:
    """`max_total_num_tokens` from the cost model's GPU and model when it is not given, at the given or default
    `mem_fraction_static` (a cost model that cannot size a pool, the toy cost, leaves it unlimited)."""
    derive = getattr(cost, "max_total_num_tokens", None)
    given = sg.mem_fraction_static
    if given is not None and not callable(derive):
        raise ConfigError(f"sglang.mem_fraction_static {given}: the {getattr(cost, 'name', cost)} cost knows no GPU "
                          "memory to take a fraction of; use a roofline (--model/--gpu) or give "
                          "sglang.max_total_num_tokens")
    if sg.max_total_num_tokens is not None:
        if given is not None and derive(given) != sg.max_total_num_tokens:  # (a resolved pair passes again)
            raise ConfigError("give one of sglang.max_total_num_tokens and sglang.mem_fraction_static: the pool's "
                              "size, or the share of GPU memory it comes from")
        return sg
    if not callable(derive):
        return sg
    mfs = sg.mem_fraction_static
    if mfs is None:
        mfs = default_mem_fraction_static(sg, cost.gpu.memory_bytes, cost.tp)
    return _state_cap(replace(sg, mem_fraction_static=mfs, max_total_num_tokens=derive(mfs)), cost)


def _state_cap(sg: SGLangConfig, cost: object) -> SGLangConfig:
    """A linear-attention model's running requests, capped as SGLang caps them (`_resolve_max_num_reqs`): its state
    slots (`Roofline.state_slots`) over MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO, 3 with the radix cache (its
    tree keeps states of cached prefixes too), 1 without."""
    slots = getattr(cost, "state_slots", None)
    slots = slots(sg.mem_fraction_static) if callable(slots) else 0
    if not slots and getattr(cost, "state_bytes_per_request", 0):
        raise ConfigError(f"{cost.model.name}: no memory left for one request's linear-attention state on "
                          f"{cost.gpu.name} at tp={cost.tp}; raise tp or sglang.mem_fraction_static")
    if not slots:
        return sg
    cap = slots // (1 if sg.disable_radix_cache else MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO)
    wanted = sg.max_running_requests or speculative.DEFAULT_MAX_RUNNING_REQUESTS
    return replace(sg, max_running_requests=min(wanted, cap))


def from_vllm_sizes(cfg, sg: SGLangConfig | None = None) -> tuple[object, list[str]]:
    """vLLM's sizes given as SGLang's, to run one workload through both at the same sizes (`compare --policies
    vllm,sglang`, the lesson's settings): the token budget as `chunked_prefill_size`, `max_num_seqs` as
    `max_running_requests`, the KV pool as `max_total_num_tokens` ((num_gpu_blocks - 1 null block) x
    block_size), the block size as `page_size`, prefix caching off as `disable_radix_cache`;
    `gpu_memory_utilization` has no SGLang counterpart and is dropped, with a note. A size the `sglang` section
    sets keeps its value. Returns the config with the vLLM knobs at their
    defaults and the section filled, and what was carried over (for a note). The budget is not the same thing (vLLM
    counts decodes in it, SGLang's chunk is prompt tokens only): the note says so."""
    base, sg = EngineConfig(), sg or cfg.sglang or SGLangConfig()
    given = {f.name for f in fields(SGLangConfig) if getattr(sg, f.name) != getattr(SGLangConfig(), f.name)}
    carried, moved = {}, []
    pairs = (("max_num_batched_tokens", "chunked_prefill_size", lambda v: v),
             ("max_num_seqs", "max_running_requests", lambda v: v),
             ("num_gpu_blocks", "max_total_num_tokens", lambda v: (v - 1) * cfg.block_size),
             ("enable_prefix_caching", "disable_radix_cache", lambda v: not v),
             ("block_size", "page_size", lambda v: v))  # (last: the pool's conversion reads the block size)
    if cfg.gpu_memory_utilization != base.gpu_memory_utilization:
        moved.append(f"gpu_memory_utilization {cfg.gpu_memory_utilization} not carried (SGLang takes "
                     "mem_fraction_static: (weights + KV pool) / GPU memory)")
        cfg = replace(cfg, gpu_memory_utilization=base.gpu_memory_utilization)
    for vllm, sgl, convert in pairs:
        value = getattr(cfg, vllm)
        if value == getattr(base, vllm):
            continue
        cfg = replace(cfg, **{vllm: getattr(base, vllm)})
        if sgl not in given:
            carried[sgl] = convert(value)
            moved.append(f"{vllm} {value} as {sgl} {carried[sgl]}")
    return replace(cfg, sglang=replace(sg, **carried)), moved


def bound_text(cfg: EngineConfig) -> dict[str, str]:
    """What bound a step, under SGLang's names (explain's run summary)."""
    return {
        "token_budget": f"the chunk budget (chunked_prefill_size {cfg.sglang.chunked_prefill_size})",
        "max_num_seqs": "max_running_requests ({seqs} running)",
        "kv_blocks": "the token pool (no memory left after the running requests' reserve, retractions)",
        "batch_closed": "the running batch marked full (batch_is_full: no prefill is tried until it shrinks)",
    }
