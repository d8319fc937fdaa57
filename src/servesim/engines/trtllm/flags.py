"""TensorRT-LLM's server flags (pinned: TensorRT-LLM 1.2, `trtllm-serve`'s names, `tensorrt_llm/commands/serve.py`;
each also spelled with dashes but the memory fraction, whose two names are trtllm-serve's), as
`cli.options.SimOptions` takes them: `EngineConfig.trtllm`'s fields, each None when not given. The rest of the
section comes from the YAML file `--extra_llm_api_options` names, whose values override the flags' as in
trtllm-serve (a flag and a key of the file that disagree are refused, never dropped).

Annotations stay objects (no `from __future__ import annotations`): typer reads them on every start.
"""

from dataclasses import dataclass
from typing import Annotated

from servesim.errors import ConfigError
from servesim.flags import opt as _opt


@dataclass
class TrtllmFlags:
    """trtllm-serve's scheduler and KV cache options."""

    max_batch_size: Annotated[int | None, _opt("--max_batch_size", "--max-batch-size", help="TensorRT-LLM: requests "
                                               "active at once and per batch. Default 2048.")] = None
    max_num_tokens: Annotated[int | None, _opt("--max_num_tokens", "--max-num-tokens", help="TensorRT-LLM: tokens "
                                               "per batch. Default 8192.")] = None
    max_seq_len: Annotated[int | None, _opt("--max_seq_len", "--max-seq-len", help="TensorRT-LLM: the longest "
                                            "request (prompt + output). Default: the model's, capped at the KV "
                                            "cache.")] = None
    kv_cache_free_gpu_memory_fraction: Annotated[float | None, _opt(
        "--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction",
        help="TensorRT-LLM: share of the GPU memory left after weights and activations for the KV cache. "
        "Default 0.9.")] = None
    enable_chunked_prefill: Annotated[bool, _opt("--enable_chunked_prefill", "--enable-chunked-prefill",
                                                 help="TensorRT-LLM: chunked context (off by default).")] = False
    disable_overlap_scheduler: Annotated[bool, _opt(
        "--disable_overlap_scheduler", "--disable-overlap-scheduler",
        help="TensorRT-LLM: the PyTorch executor's loop without the overlap scheduler (the LLM API option; "
        "trtllm-serve takes it in --extra_llm_api_options). Default: the overlap scheduler on.")] = False
    extra_llm_api_options: Annotated[str | None, _opt("--extra_llm_api_options", "--extra-llm-api-options",
                                                      help="TensorRT-LLM: a YAML file of LLM API options "
                                                      "(max_batch_size, max_num_tokens, scheduler_config.*, "
                                                      "kv_cache_config.*, enable_chunked_prefill, "
                                                      "disable_overlap_scheduler); overrides the flags.")] = None


FLAGS = TrtllmFlags
FLAG_OF = {"free_gpu_memory_fraction": "--kv_cache_free_gpu_memory_fraction",
           "max_batch_size": "--max_batch_size", "max_num_tokens": "--max_num_tokens", "max_seq_len": "--max_seq_len",
           "enable_chunked_prefill": "--enable_chunked_prefill",
           "disable_overlap_scheduler": "--disable_overlap_scheduler"}
FILE_FLAG = "--extra_llm_api_options"


def given(opts: TrtllmFlags) -> dict[str, object]:
    """The flags given, as `TrtllmConfig`'s fields, with the YAML file's keys over them."""
    from servesim.engines.trtllm.llm_args import read_extra_llm_api_options

    flags = {"max_batch_size": opts.max_batch_size, "max_num_tokens": opts.max_num_tokens,
             "max_seq_len": opts.max_seq_len, "free_gpu_memory_fraction": opts.kv_cache_free_gpu_memory_fraction,
             "enable_chunked_prefill": opts.enable_chunked_prefill or None,
             "disable_overlap_scheduler": opts.disable_overlap_scheduler or None}
    out = {k: v for k, v in flags.items() if v is not None}
    if opts.extra_llm_api_options is None:
        return out
    path = opts.extra_llm_api_options
    extra = read_extra_llm_api_options(path)
    for field, value in extra.items():
        if field in out and out[field] != value:
            raise ConfigError(f"{path}: {field} {value!r} overrides {FLAG_OF.get(field, field)} {out[field]!r} "
                              "(trtllm-serve takes the file's); give one")
    return out | extra


def host_in_series(opts: TrtllmFlags) -> bool:
    """Whether the roofline's host work runs in series with the GPU's: the PyTorch executor's `_executor_loop`
    (`disable_overlap_scheduler`, as a flag or in the YAML file), which schedules a step only after the last one's
    outputs are processed."""
    return bool(given(opts).get("disable_overlap_scheduler"))


def named(opts: TrtllmFlags, field: str) -> str:
    """The flag that gave `field` (for the refusal under another engine): the YAML file's when one is given."""
    return FILE_FLAG if opts.extra_llm_api_options is not None else FLAG_OF.get(field, field)
