"""SGLang's server arguments that its scheduler reads (pinned: SGLang 0.5.23, `srt/server_args.py`), under SGLang's
own names (`EngineConfig.sglang`).

vLLM's knobs in `EngineConfig` keep their vLLM meaning; under the `sglang` policy those with no SGLang meaning
are refused (`servesim.engines.sglang.config.resolve_sglang`), never ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.engines.sglang.speculative import check_speculative
from servesim.errors import ConfigError

SCHEDULE_POLICIES = ("fcfs", "lpm", "lof", "random", "dfs-weight")
IGNORE_EOS_RESERVE_TOKENS = 1  # SGLang's: the tokens an ignore_eos admission keeps free per request still running
CLIP_MAX_NEW_TOKENS = 4096  # SGLang's SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION default: caps each reservation


@dataclass(frozen=True, slots=True)
class SGLangConfig:
    # the token-level KV pool (SGLang's token_to_kv_pool); None = derived from GPU memory by a cost model that knows
    # the model and GPU (`mem_fraction_static`, as SGLang sizes it at start-up), else unlimited (the toy cost)
    max_total_num_tokens: int | None = None
    # (weights + KV pool) / GPU memory; None = SGLang's default for the GPU (`default_mem_fraction_static`)
    mem_fraction_static: float | None = None
    page_size: int = 1
    chunked_prefill_size: int | None = 8192  # None (SGLang: -1) = chunking off
    max_prefill_tokens: int = 16384
    # None = servesim's default, 1024 (SGLang derives it from the pool at start-up), or SGLang's 48 when speculating
    # (`_handle_eagle_family`); `config.resolve` fills it
    max_running_requests: int | None = None
    schedule_policy: str = "fcfs"  # fcfs | lpm | lof | random | dfs-weight
    random_seed: int = 0  # SGLang's --random-seed: the random policy's shuffles (SGLang: random when not given)
    schedule_conservativeness: float = 1.0
    enable_mixed_chunk: bool = False
    disable_radix_cache: bool = False
    # new_token_ratio: None = SGLang's defaults from schedule_conservativeness (init min(0.7 x c, 1), min init x
    # 0.14, decay (init - min) / 600 per decode step)
    init_new_token_ratio: float | None = None
    min_new_token_ratio: float | None = None
    new_token_ratio_decay: float | None = None
    retract_decode_steps: int = 20  # SGLANG_RETRACT_DECODE_STEPS: the ratio's allowance per request on retraction
    # priority scheduling (round 2's P1-P3): each prefill attempt orders the queue by priority (a larger value first
    # unless schedule_low_priority_values_first), and a candidate refused for a free row preempts running requests
    # more than the threshold below it
    enable_priority_scheduling: bool = False
    priority_scheduling_preemption_threshold: int = 10
    schedule_low_priority_values_first: bool = False
    retraction_policy: str = "length"  # which running requests a decode retraction takes first (only length here)
    # SGLang's --disable-overlap-schedule: True runs event_loop_normal; False event_loop_overlap (round 2's O1-O5:
    # the next batch is scheduled before the last one's result is processed)
    disable_overlap_schedule: bool = False
    # speculative decoding under SGLang's names (`servesim.engines.sglang.speculative`): EAGLE, EAGLE3, NEXTN,
    # STANDALONE (NGRAM is refused: its tree is not modelled); None = off
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None  # the draft chain's length: the drafts each verify step checks
    speculative_eagle_topk: int | None = None  # 1: a chain (the only shape modelled)
    speculative_num_draft_tokens: int | None = None  # the verify width; with topk 1 SGLang sets it to num_steps + 1
    speculative_draft_model_path: str | None = None  # the draft model (STANDALONE: a servesim model, priced)

    def __post_init__(self) -> None:
        for name in ("page_size", "max_prefill_tokens", "retract_decode_steps"):
            _int(name, getattr(self, name), 1)
        if self.max_running_requests is not None:
            _int("max_running_requests", self.max_running_requests, 1)
        check_speculative(self)
        _int("random_seed", self.random_seed, 0)
        for name in ("max_total_num_tokens", "chunked_prefill_size"):
            if getattr(self, name) is not None:
                _int(name, getattr(self, name), 1)
        if self.chunked_prefill_size is not None and self.chunked_prefill_size < self.page_size:
            raise ConfigError(f"sglang.chunked_prefill_size {self.chunked_prefill_size} is smaller than "
                              f"sglang.page_size {self.page_size}: a chunk must hold a whole page (SGLang refuses it "
                              "at start-up)")
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ConfigError(f"sglang.schedule_policy {self.schedule_policy!r}: expected one of "
                              f"{', '.join(SCHEDULE_POLICIES)}")
        if self.retraction_policy != "length":
            raise ConfigError(f"sglang.retraction_policy {self.retraction_policy!r}: only \"length\" "
                              "(SGLang's default: fewest outputs, then longest prompt, retracted first) is modelled; "
                              "\"priority\" is not")
        if isinstance(self.priority_scheduling_preemption_threshold, bool) or not isinstance(
                self.priority_scheduling_preemption_threshold, int):
            raise ConfigError("sglang.priority_scheduling_preemption_threshold must be an integer, got "
                              f"{self.priority_scheduling_preemption_threshold!r}")
        for name in ("enable_mixed_chunk", "disable_radix_cache", "enable_priority_scheduling",
                     "schedule_low_priority_values_first", "disable_overlap_schedule"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"sglang.{name} must be true or false, got {getattr(self, name)!r}")
        if self.mem_fraction_static is not None and (
                isinstance(self.mem_fraction_static, bool) or not isinstance(self.mem_fraction_static, int | float)
                or not 0 < self.mem_fraction_static <= 1):
            raise ConfigError(f"sglang.mem_fraction_static must be a number in (0, 1], got "
                              f"{self.mem_fraction_static!r}")
        for name in ("schedule_conservativeness", "init_new_token_ratio", "min_new_token_ratio",
                     "new_token_ratio_decay"):
            v = getattr(self, name)
            if v is None and name != "schedule_conservativeness":
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < float("inf"):
                raise ConfigError(f"sglang.{name} must be a finite number >= 0, got {v!r}")

    @property
    def priority_sign(self) -> int:
        """SGLang's priority_sign: a queue sorted by priority x sign serves a larger value first (-1) unless
        schedule_low_priority_values_first (1)."""
        return 1 if self.schedule_low_priority_values_first else -1

    @property
    def ratio_init(self) -> float:
        if self.init_new_token_ratio is not None:
            return self.init_new_token_ratio
        return min(0.7 * self.schedule_conservativeness, 1.0)

    @property
    def ratio_min(self) -> float:
        return self.ratio_init * 0.14 if self.min_new_token_ratio is None else self.min_new_token_ratio

    @property
    def ratio_decay(self) -> float:
        if self.new_token_ratio_decay is not None:
            return self.new_token_ratio_decay
        return (self.ratio_init - self.ratio_min) / 600


def cuda_graph_max_bs(gpu_memory_mib: float, tp: int) -> int:
    """SGLang's default `cuda_graph_max_bs` for a GPU's memory (`ServerArgs._handle_gpu_memory_settings`)."""
    if gpu_memory_mib < 20 * 1024:  # T4, 4080
        return 8
    if gpu_memory_mib < 35 * 1024:  # A10, 4090
        return 24 if tp < 4 else 80
    if gpu_memory_mib < 60 * 1024:  # A100 40GB, L40
        return 32 if tp < 4 else 160
    if gpu_memory_mib < 160 * 1024:  # H100, A100 80GB, H200
        return 256 if tp < 4 else 512
    return 512  # B200, MI300X


def default_mem_fraction_static(sg: SGLangConfig, gpu_memory_bytes: int, tp: int) -> float:
    """SGLang's `mem_fraction_static` when none is given (`ServerArgs._handle_gpu_memory_settings`): the GPU's
    memory less a reserve, in MiB, of 512 (attention metadata) + 1.5 per prefill token of the largest chunk (at
    least 2048; activations) + 2 per CUDA-graph batch slot + 128 per GPU of TP, at least 10 GiB on GPUs over
    60 GiB; as a fraction rounded to 3 places. An H100 80GB at TP 1 with 8192-token chunks: 512 + 12288 + 512 +
    128 = 13440 MiB, so round(68480 / 81920, 3) = 0.836."""
    mib = gpu_memory_bytes / 2**20
    chunk = sg.chunked_prefill_size if sg.chunked_prefill_size is not None else sg.max_prefill_tokens
    reserved = 512 + max(chunk, 2048) * 1.5 + cuda_graph_max_bs(mib, tp) * 2 + tp / 8 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


def _int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"sglang.{name} must be an integer >= {low}, got {value!r}")
