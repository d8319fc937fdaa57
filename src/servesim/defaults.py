"""What a run gets when the user names nothing: one set of defaults for the API (`Run.simulate`) and the CLI.

- **Cost model** `auto`: the lesson's toy cost (1 ms per decoding request, 0.1 ms per prefill token) for the
  lesson's workloads (`seed`, `lesson-slots`) or when a toy option (`decode_ms`, ...) is given; otherwise the
  roofline of `model` (default Llama-3-8B) on `gpu` (default H100-80GB) at tensor parallel `tp` (default 1).
  Naming a model, a GPU or a TP size selects the roofline. An option that the chosen cost model does not have
  is refused, never dropped.
- **Engine profile** (`servesim.cost.host`): the roofline runs under `--engine` (default `vllm-0.33`) with vLLM's
  flags `--enforce-eager`, `--distributed-executor-backend`, `--disable-custom-all-reduce`, `--async-scheduling`
  applied to the preset. They are refused for the toy cost and for profiles (a calibrated profile's step overhead
  is its own measured host time), except `--async-scheduling`, which the engine honours with any cost (a
  finished request frees its seat one step later).
- **Engine**: vLLM 0.33's `vllm serve` defaults for the GPU (`servesim.engines.config`): `max_num_batched_tokens`
  8192 and `max_num_seqs` 1024 on GPUs with >= 70 GiB that are not A100s, else 2048 and 256; `max_model_len`
  the model's `max_position_embeddings`. The toy and unit costs have no GPU: 2048 and 256, and the longest
  request as `max_model_len`.
- **The lesson's workloads** keep the lesson's settings unless told otherwise: `max_num_seqs` 8 and, for a
  policy that chunks, `max_num_batched_tokens` 256 (the 252-token chunks beside four decodes).
"""

from __future__ import annotations

from typing import Any

from servesim.cost import COST_MODELS, PROFILE_SUFFIXES, CostModel, get_cost_model
from servesim.errors import ConfigError

LESSON_WORKLOADS = ("seed", "lesson-slots")
LESSON_MAX_NUM_SEQS = 8
LESSON_BUDGET = 256
DEFAULT_MODEL, DEFAULT_GPU, DEFAULT_TP = "llama-3-8b", "h100-80gb", 1
DTYPES = ("auto", "half", "float16", "bfloat16", "fp16", "bf16")  # vLLM's 16-bit --dtype values: 2 bytes each
TOY_OPTIONS = ("decode_ms", "prefill_token_ms", "overhead_ms")
ROOFLINE_OPTIONS = ("model", "gpu", "tp", "dtype", "quantization", "kv_cache_dtype", "enable_expert_parallel",
                    "layout")
# The engine profile's options; `async_scheduling` is also the engine's (it is never refused).
ENGINE_OPTIONS = ("engine", "enforce_eager", "distributed_executor_backend", "disable_custom_all_reduce",
                  "async_scheduling")
AIC_OPTIONS = ("aic_backend_version",)  # the measured-kernel tier's (`--cost aic`, servesim.cost.aic)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_cost(cost: CostModel | str = "auto", workload: object = None, default_engine: str | None = None,
               **options: Any) -> CostModel:
    """The cost model for `cost` and the options given (None: not given). See the module's docstring.
    `default_engine`: the roofline's engine preset when --engine is not given (the policy's engine: `sglang`
    under --policy sglang)."""
    unknown = set(options) - set(TOY_OPTIONS) - set(ROOFLINE_OPTIONS) - set(ENGINE_OPTIONS) - set(AIC_OPTIONS)
    if unknown:
        raise TypeError(f"build_cost: unknown options {sorted(unknown)}")
    toy = {k: v for k, v in options.items() if k in TOY_OPTIONS and v is not None}
    roof = {k: v for k, v in options.items() if k in ROOFLINE_OPTIONS and v is not None}
    engine = {k: v for k, v in options.items() if k in ENGINE_OPTIONS and v is not None}
    strict = {k: v for k, v in engine.items() if k != "async_scheduling"}  # refused where no host is modelled
    aic = {k: v for k, v in options.items() if k in AIC_OPTIONS and v is not None}
    if aic and cost != "aic":
        raise ConfigError(f"{_flag(next(iter(aic)))}: an option of the measured-kernel tier; add --cost aic")
    if not isinstance(cost, str):
        _refuse(toy | roof | strict, f"the given {getattr(cost, 'name', 'cost')} cost model object")
        return cost
    name = cost
    if name == "auto":
        if toy and roof:
            raise ConfigError(f"{_flag(next(iter(toy)))} is an option of the toy cost and {_flag(next(iter(roof)))} "
                              "of the roofline: give one cost model's options (or --cost NAME)")
        lesson = isinstance(workload, str) and workload in LESSON_WORKLOADS
        name = "roofline" if roof or strict else "toy" if toy or lesson else "roofline"
    if "dtype" in roof and roof["dtype"] not in DTYPES:
        raise ConfigError(f"--dtype {roof['dtype']}: servesim models 16-bit weights and KV (2 bytes); expected one "
                          f"of {', '.join(DTYPES)} (FP8: --quantization fp8, --kv-cache-dtype fp8)")
    if name == "toy":
        _refuse(roof | strict, "the toy cost")
        return get_cost_model("toy", **toy)
    _refuse(toy, f"the {name} cost" if name in COST_MODELS else f"the profile {name}")
    if name in ("roofline", "aic"):
        from servesim.cost.host import get_engine

        preset = get_engine(engine.pop("engine", None) or default_engine, **engine)
        more = {"backend_version": aic.get("aic_backend_version")} if name == "aic" else {}
        shape = {"layout": roof["layout"]} if "layout" in roof else {
            "tp": roof.get("tp", DEFAULT_TP), "enable_expert_parallel": roof.get("enable_expert_parallel", False)}
        return get_cost_model(name, model=roof.get("model", DEFAULT_MODEL), gpu=roof.get("gpu", DEFAULT_GPU),
                              engine=preset, quantization=roof.get("quantization"),
                              kv_cache_dtype=roof.get("kv_cache_dtype", "auto"), **shape, **more)
    _refuse(strict, f"the profile {name} (its step overhead is its own measured host time)"
            if name.endswith(PROFILE_SUFFIXES) else f"the {name} cost")
    if name not in COST_MODELS and name.endswith(PROFILE_SUFFIXES):
        if "gpu" in roof:
            raise ConfigError(f"--gpu {roof['gpu']}: the profile {name} was fitted on its own GPU; drop --gpu "
                              "(or use --cost roofline --gpu NAME)")
        _refuse({k: roof[k] for k in ("quantization", "kv_cache_dtype", "enable_expert_parallel", "layout")
                 if k in roof},
                f"the profile {name} (fitted at its own precision)")
        return get_cost_model(name, tp=roof.get("tp"), model=roof.get("model"))
    _refuse(roof, f"the {name} cost")
    return get_cost_model(name)


def _refuse(given: dict[str, Any], what: str) -> None:
    if given:
        names = ", ".join(f"the parallel layout ({v.describe()})" if k == "layout" else f"{_flag(k)} {v}"
                          for k, v in given.items())
        raise ConfigError(f"{names}: not an option of {what}; drop it or choose the cost model that has it")


def lesson_settings(workload: object, chunked: bool) -> dict[str, int]:
    """The lesson's engine settings for its workloads (empty for any other workload)."""
    if not (isinstance(workload, str) and workload in LESSON_WORKLOADS):
        return {}
    return {"max_num_seqs": LESSON_MAX_NUM_SEQS} | ({"max_num_batched_tokens": LESSON_BUDGET} if chunked else {})
