"""TensorRT-LLM's LLM API arguments that its scheduler and KV cache read, under TensorRT-LLM's own names
(`EngineConfig.trtllm`), and the YAML file `trtllm-serve --extra_llm_api_options FILE` takes.

Pinned: TensorRT-LLM 1.2 (v1.2.1 is 376f7e1b; read in `tensorrt_llm/llmapi/llm_args.py`, `commands/serve.py` and
`builder.py`). The defaults are `trtllm-serve`'s (PyTorch backend): `--max_batch_size` 2048 and `--max_num_tokens`
8192 (`BuildConfig`'s), `--kv_cache_free_gpu_memory_fraction` 0.9, `--enable_chunked_prefill` off;
`SchedulerConfig.capacity_scheduler_policy` GUARANTEED_NO_EVICT, `context_chunking_policy` None (the executor then
uses FIRST_COME_FIRST_SERVED, `_torch/pyexecutor/_util.py`); `KvCacheConfig.enable_block_reuse` True,
`tokens_per_block` 32, `max_tokens` None; `disable_overlap_scheduler` False (`TorchLlmArgs`: the overlap scheduler
on). The YAML's nested keys (`scheduler_config.capacity_scheduler_policy`)
are the section's flat fields here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from servesim.errors import ConfigError

CAPACITY_SCHEDULER_POLICIES = ("GUARANTEED_NO_EVICT", "MAX_UTILIZATION", "STATIC_BATCH")
CONTEXT_CHUNKING_POLICIES = ("FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS")


@dataclass(frozen=True, slots=True)
class TrtllmConfig:
    max_batch_size: int = 2048  # requests active at once (the executor fetches no more), and per batch
    max_num_tokens: int = 8192  # tokens per batch (context chunks + one per generation request)
    # the longest request (prompt + outputs); None = the model's max_position_embeddings, capped at the KV pool
    max_seq_len: int | None = None
    enable_chunked_prefill: bool = False
    capacity_scheduler_policy: str = "GUARANTEED_NO_EVICT"  # scheduler_config.capacity_scheduler_policy
    context_chunking_policy: str | None = None  # scheduler_config.context_chunking_policy; None: FCFS
    # kv_cache_config: the pool is free_gpu_memory_fraction of the memory left after weights and activations, when
    # the cost model knows model and GPU; max_tokens caps it (and alone sizes it under a cost with no GPU)
    free_gpu_memory_fraction: float | None = None  # None = 0.9 (a cost with no GPU: unlimited, or max_tokens)
    max_tokens: int | None = None
    enable_block_reuse: bool = True
    tokens_per_block: int = 32
    # the PyTorch executor's loop: False (the default) runs `_executor_loop_overlap`, which schedules step k + 1
    # before step k's outputs are processed; True runs `_executor_loop` (`engines.trtllm.overlap`)
    disable_overlap_scheduler: bool = False

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_num_tokens", "tokens_per_block"):
            _int(name, getattr(self, name))
        for name in ("max_seq_len", "max_tokens"):
            if getattr(self, name) is not None:
                _int(name, getattr(self, name))
        for name in ("enable_chunked_prefill", "enable_block_reuse", "disable_overlap_scheduler"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"trtllm.{name} must be true or false, got {getattr(self, name)!r}")
        if self.capacity_scheduler_policy not in CAPACITY_SCHEDULER_POLICIES:
            raise ConfigError(f"trtllm.capacity_scheduler_policy {self.capacity_scheduler_policy!r}: expected one of "
                              f"{', '.join(CAPACITY_SCHEDULER_POLICIES)}")
        if self.context_chunking_policy not in (None, *CONTEXT_CHUNKING_POLICIES):
            raise ConfigError(f"trtllm.context_chunking_policy {self.context_chunking_policy!r}: expected one of "
                              f"{', '.join(CONTEXT_CHUNKING_POLICIES)}")
        f = self.free_gpu_memory_fraction
        if f is not None and (isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f <= 1):
            raise ConfigError(f"trtllm.free_gpu_memory_fraction must be a number in (0, 1], got {f!r}")

    @property
    def chunking_policy(self) -> str:
        """The context chunking policy the executor runs (`_util.py`: FIRST_COME_FIRST_SERVED when none is set)."""
        return self.context_chunking_policy or "FIRST_COME_FIRST_SERVED"


def _int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise ConfigError(f"trtllm.{name} must be a positive integer, got {value!r}")


# the extra_llm_api_options YAML keys servesim models, as the section's fields
YAML_KEYS = {
    "max_batch_size": "max_batch_size", "max_num_tokens": "max_num_tokens", "max_seq_len": "max_seq_len",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "scheduler_config.capacity_scheduler_policy": "capacity_scheduler_policy",
    "scheduler_config.context_chunking_policy": "context_chunking_policy",
    "kv_cache_config.free_gpu_memory_fraction": "free_gpu_memory_fraction",
    "kv_cache_config.enable_block_reuse": "enable_block_reuse",
    "kv_cache_config.max_tokens": "max_tokens",
    "kv_cache_config.tokens_per_block": "tokens_per_block",
    "disable_overlap_scheduler": "disable_overlap_scheduler",
}
assert set(YAML_KEYS.values()) == {f.name for f in fields(TrtllmConfig)}


def read_extra_llm_api_options(path: str | Path) -> dict[str, object]:
    """The section's fields a `--extra_llm_api_options` YAML file sets. A key servesim does not model, a value
    of the wrong shape or a file that is not YAML is refused in one line naming the file and the key."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not YAML{where}; expected TensorRT-LLM's LLM API options, e.g. "
                          "max_batch_size: 64") from None
    if not data:
        raise ConfigError(f"{path}: no LLM API options in it; expected e.g. max_batch_size: 64")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of LLM API options (key: value), got {type(data).__name__}")
    out: dict[str, object] = {}
    for key, value in _flatten(data, path):
        if key not in YAML_KEYS:
            raise ConfigError(f"{path}: key {key!r} is not modelled by servesim's trtllm engine; modelled: "
                              f"{', '.join(YAML_KEYS)}")
        out[YAML_KEYS[key]] = value
    return out


def _flatten(data: dict, path: str | Path, prefix: str = ""):
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if name not in ("scheduler_config", "kv_cache_config"):
                raise ConfigError(f"{path}: key {name!r} is not modelled by servesim's trtllm engine; modelled: "
                                  f"{', '.join(YAML_KEYS)}")
            yield from _flatten(value, path, name + ".")
        else:
            yield name, value
