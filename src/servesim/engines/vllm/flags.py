"""vLLM's engine flags (pinned: vLLM 0.33.0, `vllm serve`'s names), as `cli.options.SimOptions` takes them: the
knobs every engine shares (`EngineConfig`), each None when not given so that the engine's defaults apply.

Annotations stay objects (no `from __future__ import annotations`): typer reads them on every start.
"""

from dataclasses import dataclass
from typing import Annotated

from servesim.engines.vllm.config import BLOCK_SIZES
from servesim.errors import ConfigError
from servesim.flags import opt as _opt


@dataclass
class VLLMFlags:
    """`vllm serve`'s scheduler and KV cache options: the shared knobs, under vLLM's names."""

    max_num_batched_tokens: Annotated[int | None, _opt("--max-num-batched-tokens", help="Token budget per step. "
                                                       "Default: vLLM's for the GPU (8192 on >= 70 GiB non-A100, "
                                                       "else 2048; the lesson's workloads: 256).")] = None
    max_num_seqs: Annotated[int | None, _opt("--max-num-seqs", help="Most requests running at once. Default: vLLM's "
                                             "for the GPU (1024 or 256; the lesson's workloads: 8).")] = None
    max_model_len: Annotated[int | None, _opt("--max-model-len", help="Longest request (prompt + output tokens); "
                                              "longer ones fail, as in vLLM. Default: the model's "
                                              "max_position_embeddings, else the longest request.")] = None
    long_prefill_token_threshold: Annotated[int, _opt("--long-prefill-token-threshold", help="Cap on one request's "
                                                      "tokens per step when others wait (0 = off).")] = 0
    long_prefill_token_threshold_adaptive: Annotated[bool, _opt("--long-prefill-token-threshold-adaptive",
                                                                help="vLLM 0.33: raise the threshold to the "
                                                                "budget over running + waiting requests.")] = False
    max_num_active_seqs: Annotated[int | None, _opt("--max-num-active-seqs", help="vLLM 0.33: most requests "
                                                    "admitted into RUNNING (default max_num_seqs).")] = None
    prefill_schedule_interval: Annotated[int, _opt("--prefill-schedule-interval", help="vLLM 0.33: admit "
                                                   "prompts every N-th step while others decode (1 = every "
                                                   "step; off while admission is bound by capacity).")] = 1
    no_chunked_prefill: Annotated[bool, _opt("--no-enable-chunked-prefill", "--no-chunked-prefill", help="Prompts "
                                             "run whole (vllm policy).")] = False
    no_prefix_caching: Annotated[bool, _opt("--no-enable-prefix-caching", help="Turn vLLM's prefix cache off "
                                            "(it acts on requests with hash_ids, e.g. Mooncake's).")] = False
    block_size: Annotated[int, _opt("--block-size", help=f"KV block size in tokens: "
                                                         f"{', '.join(map(str, BLOCK_SIZES))}.")] = 16
    num_gpu_blocks: Annotated[int | None, _opt("--num-gpu-blocks", "--num-gpu-blocks-override", help="KV blocks "
                                               "(one is vLLM's null block). Default: from GPU memory with the "
                                               "roofline, else unlimited.")] = None
    gpu_memory_utilization: Annotated[float, _opt("--gpu-memory-utilization", help="Share of GPU memory for "
                                                  "weights, activations and KV.")] = 0.9
    watermark: Annotated[float, _opt("--watermark", help="Fraction of num_gpu_blocks kept free on admission.")] = 0.0
    scheduling_policy: Annotated[str, _opt("--scheduling-policy", help="Queue order: fcfs | priority.")] = "fcfs"
    preemption_mode: Annotated[str, _opt("--preemption-mode", help="recompute (vLLM v1) | swap (vLLM "
                                                                   "v0).")] = "recompute"
    swap_space: Annotated[float, _opt("--swap-space", help="CPU swap space per GPU in GiB (--preemption-mode "
                                                            "swap): blocks of block_size x KV bytes per token.")] = 4.0
    kv_bytes_per_token: Annotated[int | None, _opt("--kv-bytes-per-token", help="KV bytes per token (swap "
                                                   "traffic). Default: the model's; 131072 (Llama-3-8B) with the "
                                                   "toy cost.")] = None
    pcie_bandwidth: Annotated[float, _opt("--pcie-bandwidth", help="Host<->GPU bytes/s for swapping.")] = 32e9
    async_scheduling: Annotated[bool | None, _opt("--async-scheduling/--no-async-scheduling", help="vLLM's async "
                                                  "scheduling: finished requests free their seat one step later, "
                                                  "and (roofline) host work overlaps the GPU's. Default: off for "
                                                  "the engine; the --engine preset's for the cost.")] = None
    speculative_config: Annotated[str | None, _opt("--speculative-config", help="vLLM's speculative decoding, as "
                                                   "JSON: '{\"method\": \"eagle3\", \"num_speculative_tokens\": "
                                                   "3}' (methods ngram, eagle, eagle3, mtp, draft_model; "
                                                   "docs/speculative.md). Needs --acceptance-rate.")] = None
    acceptance_rate: Annotated[str | None, _opt("--acceptance-rate", help="With --speculative-config: the chance "
                                                "each draft is accepted given those before it were, one rate or "
                                                "one per position (0.9,0.8,0.7), drawn per request from "
                                                "--seed.")] = None



FLAGS = VLLMFlags


def shared_knobs(opts: VLLMFlags) -> dict[str, object]:
    """The `EngineConfig` knobs given (None: not given), `--block-size` checked against vLLM's choices."""
    if opts.block_size not in BLOCK_SIZES:
        raise ConfigError(f"--block-size {opts.block_size}: vLLM allows {', '.join(map(str, BLOCK_SIZES))}")
    return {
        "max_num_batched_tokens": opts.max_num_batched_tokens, "max_num_seqs": opts.max_num_seqs,
        "enable_chunked_prefill": not opts.no_chunked_prefill,
        "enable_prefix_caching": not opts.no_prefix_caching,
        "long_prefill_token_threshold": opts.long_prefill_token_threshold, "max_model_len": opts.max_model_len,
        "long_prefill_token_threshold_adaptive": opts.long_prefill_token_threshold_adaptive,
        "max_num_active_seqs": opts.max_num_active_seqs, "prefill_schedule_interval": opts.prefill_schedule_interval,
        "block_size": opts.block_size, "num_gpu_blocks": opts.num_gpu_blocks,
        "gpu_memory_utilization": opts.gpu_memory_utilization, "watermark": opts.watermark,
        "policy": opts.scheduling_policy, "async_scheduling": opts.async_scheduling or False,
        "preemption_mode": opts.preemption_mode, "swap_space": opts.swap_space,
        "kv_bytes_per_token": opts.kv_bytes_per_token, "pcie_bandwidth": opts.pcie_bandwidth,
        **_speculation(opts),
    }


def _speculation(opts: VLLMFlags) -> dict[str, object]:
    """--speculative-config's JSON (checked when the config is made), --acceptance-rate's rates, drawn from --seed."""
    from servesim.engine.acceptance import parse_rates
    from servesim.engines.vllm.speculative import speculative_config

    if opts.acceptance_rate is None:
        rates = seed = None
    else:
        rates, seed = parse_rates(opts.acceptance_rate), getattr(opts, "seed", 0)
    spec = None if opts.speculative_config is None else speculative_config(opts.speculative_config,
                                                                            "--speculative-config")
    return {"speculative_config": spec, "acceptance_rate": rates, "acceptance_seed": seed}
