"""Engine profiles: the host's share of a step, beside the GPU's.

A serving engine spends time on the CPU every step: it schedules, prepares the inputs, samples and processes the
outputs, and (with tensor parallelism) sends the step to its workers. How much of that the GPU waits for depends on
the engine and its flags, named as vLLM names them:

- `enforce_eager`: no CUDA graphs, so every kernel is launched from Python; a layer lasts max(host issue time,
  device time). The layers are alike, so summed over the forward pass that is max(kernels x launch, device).
- `distributed_executor_backend`: `ray` pays a per-step RPC to its TP workers; `mp` a shared-memory broadcast.
- `disable_custom_all_reduce`: off, vLLM's one-shot custom all-reduce takes the small messages NCCL is slow at.
- `async_scheduling`: the host work of step k overlaps the device work of step k-1, so a step costs
  max(host, device) rather than host + device.

Presets pin those to an engine version. Every constant below is a public measurement or derived from one, with
its source beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servesim.cost.specs import is_finite, show
from servesim.errors import ConfigError

MS, US = 1e-3, 1e-6
EXECUTOR_BACKENDS = ("mp", "ray")

# Host costs of a vLLM-style Python engine, from Vidur's measurements (../shared/peer-data/vidur/profiling/
# cpu_overheads/a100_cpu_overheads.csv, 78 rows: Llama-2-7B, phi-2 at TP 1; CodeLlama-34B, InternLM-20B at TP 2;
# Llama-2-70B, Qwen-72B at TP 4; batch 8..128): schedule + sampler_e2e + prepare_inputs_e2e + process_model_outputs
# (medians, ms) fitted by least squares as fixed + per-sequence x batch + (TP > 1) x extra, residual MAPE 5.9 %.
# tests/test_host_profile.py refits them from the file.
VIDUR_STEP_MS = 0.851  # per step: scheduling, input preparation, sampler launch, output processing at batch 0
VIDUR_SEQ_MS = 0.0417  # per scheduled sequence
VIDUR_TP_MS = 0.866  # per step when TP > 1: the driver broadcasts the prepared inputs to its workers
# The same file's `ray_comm_time_mean` over its 52 TP > 1 rows: 6.24 ms per step (5.34..6.94), Ray's RPC to the
# TP workers (ray.get of each worker's execute_model), whatever the batch.
VIDUR_RAY_RPC_MS = 6.24
# Eager launch cost per kernel, from vLLM pull request 1440 (description): Llama-2-7B, batch 1, 5 input and 100
# output tokens, 1.2 s without CUDA graphs (vLLM 0.2, eager). A step is then host-bound: 12.0 ms, less the
# per-step host work above at batch 1 (0.851 + 0.042 ms), over the forward pass's 32 x 9 + 4 = 292 launches
# (see `Roofline.num_kernels`): 38 us a kernel, PyTorch's per-op dispatch from Python with vLLM's module calls.
EAGER_LAUNCH_US = round((1.2 / 100 - (VIDUR_STEP_MS + VIDUR_SEQ_MS) * MS) / 292 / US, 1)
# vLLM's custom all-reduce, from SGLang pull request 2904 (../shared/peer-data/public-perf/anchors.csv, H100, "vLLM
# custom all-reduce" rows): about 9 us flat up to 32 KiB, then 26.6 / 40.2 / 45.0 us at 1 MiB on 2 / 4 / 8 GPUs.
# As latency + ring wire time / efficiency over H100's 450 GB/s per direction: 9 us and 0.12 (the three
# 1 MiB points give 0.131, 0.112, 0.117). vLLM uses it for messages up to 8 MiB (`custom_all_reduce.py`,
# max_size=8192 * 1024) on 2, 4, 6 or 8 fully connected GPUs, else NCCL.
CUSTOM_AR_LATENCY_US, CUSTOM_AR_EFFICIENCY, CUSTOM_AR_MAX_BYTES = 9.0, 0.12, 8 << 20
CUSTOM_AR_WORLD_SIZES = (2, 4, 6, 8)
# TensorRT-LLM's own all-reduce kernel, the same pull request's "SGLang/TRT-LLM custom all-reduce" rows: about
# 4.5 us flat up to 32 KiB; 19.9 / 31.1 / 33.8 us at 1 MiB: 4.5 us and 0.16 (0.156, 0.129, 0.155).
TRTLLM_AR_LATENCY_US, TRTLLM_AR_EFFICIENCY = 4.5, 0.16


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """How one engine version runs a step on the host: what it costs there and what overlaps with the GPU."""

    name: str
    version: str  # the engine version the preset is pinned to
    enforce_eager: bool = False  # vLLM's --enforce-eager: no CUDA graphs
    distributed_executor_backend: str = "mp"  # vLLM's --distributed-executor-backend: mp | ray
    disable_custom_all_reduce: bool = False  # vLLM's --disable-custom-all-reduce
    async_scheduling: bool = True  # vLLM's --async-scheduling: host work overlaps the previous step's GPU work
    step_host: float = VIDUR_STEP_MS * MS  # seconds per step
    seq_host: float = VIDUR_SEQ_MS * MS  # seconds per scheduled sequence
    tp_host: float = VIDUR_TP_MS * MS  # seconds per step with TP > 1
    ray_rpc: float = VIDUR_RAY_RPC_MS * MS  # seconds per step with TP > 1 and the ray backend
    mp_rpc: float = 0.0  # seconds per step with TP > 1 and the mp backend
    launch: float = EAGER_LAUNCH_US * US  # seconds of host time per kernel launched in eager mode
    # The engine's own all-reduce for small messages: (latency seconds, efficiency, largest message in bytes).
    custom_all_reduce: tuple[float, float, int] = (CUSTOM_AR_LATENCY_US * US, CUSTOM_AR_EFFICIENCY,
                                                   CUSTOM_AR_MAX_BYTES)

    def __post_init__(self) -> None:
        if self.distributed_executor_backend not in EXECUTOR_BACKENDS:
            raise ConfigError(f"--distributed-executor-backend {self.distributed_executor_backend}: expected one of "
                              f"{', '.join(EXECUTOR_BACKENDS)}")
        for field in ("step_host", "seq_host", "tp_host", "ray_rpc", "mp_rpc", "launch"):
            value = getattr(self, field)
            if not (is_finite(value) and value >= 0):
                raise ConfigError(f"engine {self.name}: {field}: expected a finite number of seconds >= 0, "
                                  f"got {show(value)}")

    def host_time(self, num_seqs: int, tp: int) -> float:
        """Seconds of host work in a step of `num_seqs` scheduled sequences on `tp` GPUs."""
        return self.fixed_host(tp) + self.seq_host * num_seqs

    def fixed_host(self, tp: int) -> float:
        """The per-step part of `host_time`, whatever the batch (the roofline precomputes it)."""
        t = self.step_host
        if tp > 1:
            t += self.tp_host + (self.ray_rpc if self.distributed_executor_backend == "ray" else self.mp_rpc)
        return t

    def behaviour(self, tp: int) -> tuple:
        """What the cost model reads of this profile at tensor parallel `tp`: two profiles with the same behaviour
        give every step the same time (the name and version aside)."""
        return (self.fixed_host(tp), self.seq_host, self.launch if self.enforce_eager else 0.0,
                self.enforce_eager, self.async_scheduling, self.custom_all_reduce_for(tp) if tp > 1 else None)

    def custom_all_reduce_for(self, tp: int) -> tuple[float, float, int] | None:
        """The custom all-reduce protocol at this TP size, or None where the engine uses NCCL alone."""
        if self.disable_custom_all_reduce or tp not in CUSTOM_AR_WORLD_SIZES:
            return None
        return self.custom_all_reduce

    def wall(self, device: float, host: float, issue: float) -> float:
        """A step's wall time from its device time, host work and (eager) kernel issue time. `Roofline` inlines
        the same operations in its hot paths (the same floats)."""
        if self.enforce_eager and issue > device:
            device = issue
        if self.async_scheduling:
            return host if host > device else device
        return host + device

    def with_flags(self, enforce_eager: bool | None = None, distributed_executor_backend: str | None = None,
                   disable_custom_all_reduce: bool | None = None, async_scheduling: bool | None = None
                   ) -> EngineProfile:
        """This preset with vLLM's flags applied where given (None: the preset's own)."""
        given = {"enforce_eager": enforce_eager, "distributed_executor_backend": distributed_executor_backend,
                 "disable_custom_all_reduce": disable_custom_all_reduce, "async_scheduling": async_scheduling}
        given = {k: v for k, v in given.items() if v is not None}
        return replace(self, **given) if given else self


PRESETS: dict[str, EngineProfile] = {
    # vLLM v1 as `vllm serve` runs it today: CUDA graphs, the mp executor, custom all-reduce, async scheduling on
    # GPUs. Its own per-step host cost is not in the public files; Vidur's measured Python-engine costs are an
    # upper bound, and with async scheduling they matter only where they exceed the GPU's time.
    "vllm-0.33": EngineProfile("vllm-0.33", "0.33"),
    # vLLM 0.10.0-0.13.0: as vllm-0.33 (V1, CUDA graphs, the mp executor, 8192 tokens and 1024 sequences by default
    # on an H100/H200) but async scheduling off by default: `async_scheduling: bool = False` (0.13.0's wheel,
    # vllm/config/scheduler.py:133; 0.10.0 vllm/config.py:2358); 0.14.0 made it `Field(default=None)`, turned on
    # in vllm/config/vllm.py:588-628, unchanged to 0.33.0 (read in each release's PyPI wheel)
    "vllm-0.13": EngineProfile("vllm-0.13", "0.10.0-0.13.0", async_scheduling=False),
    # vLLM 0.2.0-0.2.4 (2023): eager PyTorch, Ray workers, NCCL all-reduce, host and device in series. The costs
    # Vidur measured are of exactly this engine design. (0.2.5 added CUDA graphs, 0.2.7 the custom all-reduce.)
    "vllm-0.2": EngineProfile("vllm-0.2", "0.2.4", enforce_eager=True, distributed_executor_backend="ray",
                              disable_custom_all_reduce=True, async_scheduling=False),
    # TensorRT-LLM 0.6 (the anchors' version): a compiled engine with CUDA graphs and in-flight batching, its C++
    # batch manager preparing step k+1 while step k runs (overlapped), its own all-reduce kernel. No per-step host
    # measurement is public; the same upper bound as vllm-0.33, overlapped.
    "trtllm": EngineProfile("trtllm", "0.6.1", custom_all_reduce=(TRTLLM_AR_LATENCY_US * US, TRTLLM_AR_EFFICIENCY,
                                                                  CUSTOM_AR_MAX_BYTES)),
    # SGLang (0.4, Jan 2025): CUDA graphs, overlapped scheduling, one process per TP rank (like mp), vLLM's custom
    # all-reduce kernel (the one SGLang's pull request 2904 measures against its own).
    "sglang": EngineProfile("sglang", "0.4"),
}
DEFAULT_ENGINE = "vllm-0.33"
ASYNC_BY_DEFAULT = (0, 14)  # the first vLLM release with async scheduling on by default


def preset_for(engine: str, version: str | None) -> str | None:
    """The host preset of `engine` (a servesim policy's engine: vllm, sglang) at a release (`0.12.0`), where the
    release's defaults differ from the newest preset's; None: the engine's own preset."""
    import re

    m = re.match(r"(\d+)\.(\d+)", version or "")
    if engine == "vllm" and m and (int(m[1]), int(m[2])) >= (0, 10) and (int(m[1]), int(m[2])) < ASYNC_BY_DEFAULT:
        return "vllm-0.13"
    return None


def get_engine(name: str | EngineProfile | None = None, **flags) -> EngineProfile:
    """A preset by name (None: the default) with vLLM's flags applied; an unknown name lists the presets."""
    if isinstance(name, EngineProfile):
        return name.with_flags(**flags)
    key = DEFAULT_ENGINE if name is None else name
    if key not in PRESETS:
        raise ConfigError(f"--engine {name}: unknown engine preset; expected one of {', '.join(PRESETS)}")
    return PRESETS[key].with_flags(**flags)
