"""A run's engine configuration: the knobs every engine shares, under vLLM's names verbatim (vLLM v1's token
budget is servesim's common model of a step), and one section per engine with server arguments of its own
(`sglang`: SGLang's, `servesim.engines.sglang.server_args`; `trtllm`: TensorRT-LLM's,
`servesim.engines.trtllm.llm_args`). Each engine resolves it once, in its package
(`EngineSpec.resolve`); the shared knobs' defaults per GPU and model are filled here (`resolve_shared`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from servesim.engine.request import Request
from servesim.engines.sglang.server_args import SGLangConfig
from servesim.engines.trtllm.llm_args import TrtllmConfig
from servesim.engines.vllm.speculative import SpeculativeConfig, speculative_config
from servesim.errors import ConfigError

PREEMPTION_MODES = ("recompute", "swap")
QUEUE_POLICIES = ("fcfs", "priority")
DEFAULT_BUDGET = 2048  # vLLM's default token budget on small GPUs (and with no GPU: the toy and unit costs)
DEFAULT_MAX_NUM_SEQS = 256
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class EngineConfig:
    # None = vLLM 0.33's `vllm serve` default for the GPU (`vllm_serve_defaults`): with chunked prefill 8192
    # on GPUs with >= 70 GiB that are not A100s, else 2048; without chunked prefill never less than max_model_len
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None  # None = vLLM's default for the GPU: 1024 where the budget is 8192, else 256
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0  # 0 = off
    # vLLM 0.33: the threshold rises to max_num_batched_tokens // (running + waiting) when that is larger
    long_prefill_token_threshold_adaptive: bool = False
    # vLLM 0.33: the most requests admitted into RUNNING (None = max_num_seqs, the model runner's slot count)
    max_num_active_seqs: int | None = None
    # vLLM 0.33: admit new prompts only every N-th step while decodes run (1 = every step; its escape: a step
    # whose admission was bound by capacity turns the cadence off until the queue drains)
    prefill_schedule_interval: int = 1
    # None = the model's max_position_embeddings (a roofline cost), else the longest request in the workload;
    # longer requests fail, as vLLM rejects them (`vllm bench serve` counts them as failed)
    max_model_len: int | None = None
    block_size: int = 16
    num_gpu_blocks: int | None = None  # None = unlimited KV (or derived from GPU memory by a cost model)
    watermark: float = 0.0  # fraction of num_gpu_blocks kept free when admitting
    scheduler_reserve_full_isl: bool = True
    policy: str = "fcfs"  # queue order: fcfs | priority (vLLM's --scheduling-policy)
    async_scheduling: bool = False
    preemption_mode: str = "recompute"  # recompute | swap
    # vLLM's --swap-space: GiB of CPU memory per GPU for swapped-out KV (vLLM's default 4); the host pool holds
    # swap_space x 2^30 // (block_size x kv_bytes_per_token) blocks (`num_cpu_blocks`, filled when resolved)
    swap_space: float = 4.0
    num_cpu_blocks: int | None = None  # the host pool in blocks; None = from swap_space
    kv_bytes_per_token: int = 131072  # 2 x 32 layers x 8 kv heads x 128 head_dim x 2 bytes (Llama-3-8B)
    # blocks a running request holds whatever its length: a hybrid model's sliding-window groups under vLLM's
    # hybrid KV cache manager (from a roofline cost, `servesim.cost.kv_groups`); 0 for a model without them
    kv_blocks_per_request: int = 0
    pcie_bandwidth: float = 32e9  # bytes/s, host <-> GPU for swapping (PCIe 4.0 x16)
    gpu_memory_utilization: float = 0.9  # share of GPU memory vLLM may use, when KV is derived from a cost model
    # vLLM v1's default: on. It acts on requests that carry `hash_ids` with a bounded KV pool (they run step by
    # step for now); without block identities nothing can hit, and it changes nothing
    enable_prefix_caching: bool = True
    # the benchmark client's cap on requests in flight (`vllm bench serve --max-concurrency`; not an engine knob,
    # kept here so every command and --set take it): a request is sent at its arrival time or, with C in flight,
    # when one finishes (first come, first served); None = open loop
    max_concurrency: int | None = None
    # how the client paces sends under that cap: False, vllm bench serve's (each request has its own send time and
    # waits for a slot after it); True, AIPerf's --request-rate with --concurrency (the gap to the next send starts
    # at a send, so a request held for a slot holds back every later one)
    client_sends_in_order: bool = False
    # the path outside the engine core (`servesim.engine.frontend`): seconds from a send to the waiting queue,
    # per request (HTTP, the API server, the hops, streaming and the client's loop) and per prompt token (the
    # tokenizer); 0 = the engine core alone
    frontend_latency: float = 0.0
    frontend_latency_per_token: float = 0.0
    # policy sglang: SGLang's own server arguments (`servesim.engines.sglang.server_args`); None = its defaults
    sglang: SGLangConfig | None = None
    # policy trtllm: TensorRT-LLM's own LLM API arguments (`servesim.engines.trtllm.llm_args`); None = its defaults
    trtllm: TrtllmConfig | None = None
    # vLLM's --speculative-config (`servesim.engines.vllm.speculative`; a dict or its JSON text is taken too);
    # None = no speculative decoding
    speculative_config: SpeculativeConfig | None = None
    # vLLM 0.33's default model runner (V2); False: the V1 runner (variable n-gram proposals, `Request.draft_lens`;
    # no async scheduling with n-gram drafts). Read only with speculative decoding
    use_v2_model_runner: bool = True
    # how many drafts a verification accepts (`servesim.engine.acceptance`), not an engine knob: per draft
    # position, the probability it is accepted given those before were (one rate: every position); drawn per
    # request from `acceptance_seed`. A request's own `accept` list overrides it. None: every request gives its own
    acceptance_rate: tuple[float, ...] | None = None
    acceptance_seed: int = 0

    def __post_init__(self) -> None:
        _speculation(self)
        _positive("block_size", self.block_size)
        for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "num_gpu_blocks", "max_concurrency",
                     "max_num_active_seqs"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < 2:
            raise ConfigError(f"num_gpu_blocks must be >= 2 (one block is reserved), got {self.num_gpu_blocks}")
        _non_negative("long_prefill_token_threshold", self.long_prefill_token_threshold)
        _positive("prefill_schedule_interval", self.prefill_schedule_interval)
        if self.num_cpu_blocks is not None:
            _non_negative("num_cpu_blocks", self.num_cpu_blocks)
        for name in ("enable_chunked_prefill", "scheduler_reserve_full_isl", "async_scheduling",
                     "enable_prefix_caching", "client_sends_in_order", "long_prefill_token_threshold_adaptive"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("frontend_latency", "frontend_latency_per_token"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ConfigError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        for name in ("watermark", "pcie_bandwidth", "gpu_memory_utilization", "swap_space"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value!r}")
        if not 0.0 <= self.watermark < 1.0:
            raise ConfigError(f"watermark must be a fraction in [0, 1), got {self.watermark}")
        if self.policy not in QUEUE_POLICIES:
            raise ConfigError(f"unknown queue policy {self.policy!r}; valid: {', '.join(QUEUE_POLICIES)}")
        if self.preemption_mode not in PREEMPTION_MODES:
            raise ConfigError(
                f"unknown preemption_mode {self.preemption_mode!r}; valid: {', '.join(PREEMPTION_MODES)}"
            )
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if not 0 <= self.swap_space <= 2**20:
            raise ConfigError(f"swap_space must be GiB of CPU memory from 0 to 1048576, got {self.swap_space}")
        if self.pcie_bandwidth <= 0:
            raise ConfigError(f"pcie_bandwidth must be > 0 bytes/s, got {self.pcie_bandwidth}")
        _positive("kv_bytes_per_token", self.kv_bytes_per_token)
        for name, cls in SECTIONS.items():
            if getattr(self, name) is not None and not isinstance(getattr(self, name), cls):
                raise ConfigError(f"{name} must be an {cls.__name__}, got {getattr(self, name)!r}")

    def resolved(self, longest_request: int, default_budget: int = DEFAULT_BUDGET,
                 default_max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
                 default_max_model_len: int | None = None) -> EngineConfig:
        """Fill the defaults (the GPU's, from `resolve_shared`; the workload's longest request as
        max_model_len when no model says otherwise), then validate the whole as vLLM does."""
        cfg = self
        if cfg.max_model_len is None:
            cfg = replace(cfg, max_model_len=default_max_model_len or longest_request)
        if cfg.max_num_seqs is None:
            cfg = replace(cfg, max_num_seqs=default_max_num_seqs)
        if cfg.max_num_batched_tokens is None:
            # vLLM's defaults: the GPU's budget with chunked prefill; without, enough for the longest request allowed,
            # and never less than the GPU's budget
            budget = default_budget if cfg.enable_chunked_prefill else max(cfg.max_model_len, default_budget)
            cfg = replace(cfg, max_num_batched_tokens=budget)
        if not cfg.enable_chunked_prefill and cfg.max_num_batched_tokens < cfg.max_model_len:
            raise ConfigError(
                f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) is smaller than max_model_len "
                f"({cfg.max_model_len}) with chunked prefill off: the longest prompt could never be scheduled. "
                "Raise max_num_batched_tokens or enable chunked prefill."
            )
        # (vLLM's SchedulerConfig refuses it the same way)
        if cfg.max_num_active_seqs is not None and cfg.max_num_active_seqs > cfg.max_num_seqs:
            raise ConfigError(f"max_num_active_seqs ({cfg.max_num_active_seqs}) must not exceed max_num_seqs "
                              f"({cfg.max_num_seqs}): it limits the running requests among max_num_seqs slots")
        if cfg.max_num_batched_tokens < cfg.max_num_seqs:
            default = ", vLLM's default for the GPU" if self.max_num_seqs is None else ""
            raise ConfigError(
                f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({cfg.max_num_seqs}{default}), as vLLM requires: raise the budget or lower max_num_seqs"
            )
        return cfg

    @staticmethod
    def section_class(name: str) -> type:
        """The class of the engine section `name` (`EngineSpec.section`)."""
        return SECTIONS[name]

    def sections_given(self) -> tuple[str, ...]:
        """The engine sections this config carries (each meaningful under its own engine only)."""
        return tuple(name for name in SECTIONS if getattr(self, name) is not None)

    @property
    def max_num_active_reqs(self) -> int:
        """The limit on admission into RUNNING (vLLM 0.33's `max_num_active_reqs`): max_num_active_seqs, else
        max_num_seqs."""
        return self.max_num_active_seqs or self.max_num_seqs

    @property
    def usable_blocks(self) -> int | None:
        return None if self.num_gpu_blocks is None else self.num_gpu_blocks - 1

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def knob_names(cls) -> tuple[str, ...]:
        """What a sweep or compare can set: every field, and SGLang's server arguments as `sglang.NAME`."""
        own = [f"{s}.{f.name}" for s, section in SECTIONS.items() for f in fields(section)]
        return (*(n for n in cls.field_names() if n not in SECTIONS), *own)

    def with_knobs(self, knobs: dict[str, object]) -> EngineConfig:
        """This config with `knobs` set (`knob_names`: a field, or `SECTION.NAME` in an engine's section)."""
        plain = {k: v for k, v in knobs.items() if "." not in k}
        cfg = replace(self, **plain) if plain else self
        for section, cls in SECTIONS.items():
            own = {k.removeprefix(f"{section}."): v for k, v in knobs.items() if k.startswith(f"{section}.")}
            if own:
                cfg = replace(cfg, **{section: replace(getattr(cfg, section) or cls(), **own)})
        return cfg


# the engine sections: field name -> its class (`EngineSpec.section`)
SECTIONS = {"sglang": SGLangConfig, "trtllm": TrtllmConfig}
MAX_COUNT = 2**31 - 1  # tokens, blocks, sequences: the step log keeps them as 32-bit integers


def _speculation(cfg: EngineConfig) -> None:
    """The speculative-decoding fields normalized (a dict or JSON text as a `SpeculativeConfig`, one rate as a
    tuple) and checked; those that mean nothing without speculative decoding refused."""
    spec = cfg.speculative_config
    if spec is not None and not isinstance(spec, SpeculativeConfig):
        object.__setattr__(cfg, "speculative_config", speculative_config(spec))
    rate = cfg.acceptance_rate
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        object.__setattr__(cfg, "acceptance_rate", (float(rate),))
    elif isinstance(rate, list):
        object.__setattr__(cfg, "acceptance_rate", tuple(rate))
    if cfg.acceptance_rate is not None:
        from servesim.engine.acceptance import Acceptance

        Acceptance(cfg.acceptance_rate, cfg.acceptance_seed)  # (checks both)
    if not isinstance(cfg.use_v2_model_runner, bool):
        raise ConfigError(f"use_v2_model_runner must be true or false, got {cfg.use_v2_model_runner!r}")
    sglang = getattr(cfg.sglang, "speculative_algorithm", None) is not None  # (SGLang's own flags)
    if cfg.speculative_config is None:
        for name in ("acceptance_rate", "use_v2_model_runner", "acceptance_seed"):
            if getattr(cfg, name) != _SPEC_DEFAULTS[name] and not (sglang and name != "use_v2_model_runner"):
                raise ConfigError(f"{name} {getattr(cfg, name)!r} has no effect without speculative_config "
                                  "(--speculative-config) or sglang.speculative_algorithm "
                                  "(--speculative-algorithm); drop it")


def speculating(cfg: EngineConfig) -> bool:
    """Speculative decoding is on: vLLM's --speculative-config or SGLang's --speculative-algorithm."""
    return cfg.speculative_config is not None or getattr(cfg.sglang, "speculative_algorithm", None) is not None


_SPEC_DEFAULTS = {"acceptance_rate": None, "use_v2_model_runner": True, "acceptance_seed": 0}


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise ConfigError(f"{name} must be a positive integer up to {MAX_COUNT}, got {value!r}")


def _non_negative(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ConfigError(f"{name} must be an integer from 0 to {MAX_COUNT}, got {value!r}")


def vllm_serve_defaults(gpu: object | None) -> tuple[int, int]:
    """vLLM 0.33's defaults for `vllm serve` (`EngineArgs._set_default_args`, usage context OpenAI API server):
    (max_num_batched_tokens, max_num_seqs) = (8192, 1024) on a GPU with >= 70 GiB that is not an A100, else
    (2048, 256). With no GPU (the toy and unit costs) the small-GPU defaults."""
    memory, name = getattr(gpu, "memory_bytes", 0), getattr(gpu, "name", "")
    if memory >= 70 * GIB and "a100" not in name.lower():
        return 8192, 1024
    return DEFAULT_BUDGET, DEFAULT_MAX_NUM_SEQS


def resolve_shared(config: EngineConfig, chunked: bool, requests: Sequence[Request], cost: Any) -> EngineConfig:
    """The shared knobs' defaults, as `vllm serve` sets them: the token budget and `max_num_seqs` for the cost
    model's GPU (`vllm_serve_defaults`); `max_model_len` from the model's `max_position_embeddings` (a roofline
    cost), else the longest request; the KV bytes per token from the model. `chunked` False: the policy never
    splits a prompt, so chunked prefill is off and the budget covers the longest request."""
    if not chunked:
        config = replace(config, enable_chunked_prefill=False)
    budget, max_num_seqs = vllm_serve_defaults(getattr(cost, "gpu", None))
    model_len = getattr(getattr(cost, "model", None), "max_position_embeddings", None)
    longest = max((r.prompt_len + r.output_len for r in requests), default=1)
    cfg = config.resolved(longest, budget, max_num_seqs, model_len)
    kv_bytes = getattr(cost, "kv_bytes_per_token", None)
    if kv_bytes and config.kv_bytes_per_token not in (EngineConfig().kv_bytes_per_token, kv_bytes):
        raise ConfigError(f"kv_bytes_per_token {config.kv_bytes_per_token}: the {getattr(cost, 'name', 'cost')} "
                          f"cost's model has {kv_bytes} KV bytes per token, which the run uses; drop it")
    return replace(cfg, kv_bytes_per_token=kv_bytes) if kv_bytes else cfg
