"""Options shared by every command that runs a simulation, and the config they build."""

from __future__ import annotations

from typing import Annotated

import typer

from servesim.cost import DEFAULT_REAL_COST, CostModel, get_cost_model
from servesim.engine.config import EngineConfig

Policy = Annotated[str, typer.Option("--policy", "-p", help="Scheduling policy: static | continuous | vllm.")]
# --workload and the options that shape it (format, columns, request rate, ...) are `servesim.cli.workload`'s.
Budget = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", help="Token budget per step. Default: 2048 with chunked prefill, else max_model_len.")]
MaxSeqs = Annotated[int, typer.Option("--max-num-seqs", help="Most requests running at once.")]
Cost = Annotated[str, typer.Option("--cost", help="Cost model: auto (toy for the lesson workloads seed and "
                                              "lesson-slots, else roofline Llama-3-8B on one H100-80GB) | toy (the "
                                              "lesson's ms costs) | unit (1 s per step) | roofline | a profile .json.")]
DecodeMs = Annotated[float, typer.Option("--decode-ms", help="toy cost: ms per decoding request per step.")]
PrefillMs = Annotated[float, typer.Option("--prefill-token-ms", help="toy cost: ms per prefill token.")]
OverheadMs = Annotated[float, typer.Option("--overhead-ms", help="toy cost: fixed ms per step.")]
Threshold = Annotated[int, typer.Option(
    "--long-prefill-token-threshold", help="Cap on one request's tokens per step when others wait (0 = off).")]
NoChunk = Annotated[bool, typer.Option(
    "--no-chunked-prefill", help="Disable chunked prefill (vllm policy): prompts run whole.")]
BlockSize = Annotated[int, typer.Option("--block-size", help="KV block size in tokens.")]
GpuBlocks = Annotated[int | None, typer.Option(
    "--num-gpu-blocks", help="KV blocks on the GPU (one is reserved as vLLM's null block). Default: unlimited.")]
Watermark = Annotated[float, typer.Option("--watermark", help="Fraction of num_gpu_blocks kept free on admission.")]
QueuePolicy = Annotated[str, typer.Option("--scheduling-policy", help="Queue order: fcfs | priority.")]
Preemption = Annotated[str, typer.Option("--preemption-mode", help="recompute (vLLM v1) | swap (vLLM v0).")]
SwapSpace = Annotated[int | None, typer.Option(
    "--swap-space", help="Host pool for swapping, in blocks. Default: unlimited.")]
KvBytes = Annotated[int, typer.Option("--kv-bytes-per-token", help="KV bytes per token (swap traffic), toy cost.")]
Pcie = Annotated[float, typer.Option("--pcie-bandwidth", help="Host<->GPU bandwidth for swapping, bytes/s.")]
Async = Annotated[bool, typer.Option("--async-scheduling", help="Finished requests free their seat one step later.")]
Record = Annotated[str, typer.Option(
    "--record", help="Step records kept: full (with why each waiting request got nothing) | steps | summary "
                     "(compact per-step arrays only: fastest, enough for every metric but the binding constraint).")]
MaxModelLen = Annotated[int | None, typer.Option(
    "--max-model-len", help="Longest request allowed (prompt + output tokens); longer ones are capped to fit (count "
                            "reported). Default: the longest in the workload.")]


def engine_config(
    max_num_batched_tokens: int | None = None, max_num_seqs: int = 256, long_prefill_token_threshold: int = 0,
    no_chunked_prefill: bool = False, block_size: int = 16, num_gpu_blocks: int | None = None,
    watermark: float = 0.0, scheduling_policy: str = "fcfs", preemption_mode: str = "recompute",
    swap_space: int | None = None, kv_bytes_per_token: int = 131072, pcie_bandwidth: float = 32e9,
    async_scheduling: bool = False, max_model_len: int | None = None,
) -> EngineConfig:
    return EngineConfig(
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        enable_chunked_prefill=not no_chunked_prefill, long_prefill_token_threshold=long_prefill_token_threshold,
        max_model_len=max_model_len, block_size=block_size, num_gpu_blocks=num_gpu_blocks, watermark=watermark,
        policy=scheduling_policy, async_scheduling=async_scheduling, preemption_mode=preemption_mode,
        swap_space=swap_space, kv_bytes_per_token=kv_bytes_per_token, pcie_bandwidth=pcie_bandwidth,
    )


LESSON_WORKLOADS = ("seed", "lesson-slots")


ENGINE_OPTIONS = ("max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold", "no_chunked_prefill",
                  "block_size", "num_gpu_blocks", "watermark", "scheduling_policy", "preemption_mode", "swap_space",
                  "kv_bytes_per_token", "pcie_bandwidth", "async_scheduling", "max_model_len")


def engine_options(values: dict) -> EngineConfig:
    """The engine config from a command's parameters (`engine_options(locals())`); absent ones keep defaults."""
    return engine_config(**{k: values[k] for k in ENGINE_OPTIONS if k in values})


def cost_model(name: str, decode_ms: float = 1.0, prefill_token_ms: float = 0.1, overhead_ms: float = 0.0,
               workload: str | None = None) -> CostModel:
    """`auto`: the lesson's toy cost for the lesson's workloads, the roofline (Llama-3-8B, H100) for real ones."""
    if name == "auto":
        if workload in LESSON_WORKLOADS:
            name = "toy"
        else:
            params = dict(DEFAULT_REAL_COST)
            return get_cost_model(params.pop("name"), **params)
    if name == "toy":
        return get_cost_model("toy", decode_ms=decode_ms, prefill_token_ms=prefill_token_ms, overhead_ms=overhead_ms)
    return get_cost_model(name)
