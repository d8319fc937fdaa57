"""What a run gets when the user names nothing: one set of defaults for the API (`Run.simulate`) and the CLI.

- **Cost model** `auto`: the lesson's toy cost (1 ms per decoding request, 0.1 ms per prefill token) for the
  lesson's workloads (`seed`, `lesson-slots`) or when a toy option (`decode_ms`, ...) is given; otherwise the
  roofline of `model` (default Llama-3-8B) on `gpu` (default H100-80GB) at tensor parallel `tp` (default 1).
  Naming a model, a GPU or a TP size selects the roofline. An option that the chosen cost model does not have
  is refused, never dropped.
- **Engine**: vLLM 0.33's `vllm serve` defaults for the GPU (`servesim.engine.resolve`): `max_num_batched_tokens`
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
ROOFLINE_OPTIONS = ("model", "gpu", "tp", "dtype")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_cost(cost: CostModel | str = "auto", workload: object = None, **options: Any) -> CostModel:
    """The cost model for `cost` and the options given (None: not given). See the module's docstring."""
    unknown = set(options) - set(TOY_OPTIONS) - set(ROOFLINE_OPTIONS)
    if unknown:
        raise TypeError(f"build_cost: unknown options {sorted(unknown)}")
    toy = {k: v for k, v in options.items() if k in TOY_OPTIONS and v is not None}
    roof = {k: v for k, v in options.items() if k in ROOFLINE_OPTIONS and v is not None}
    if not isinstance(cost, str):
        _refuse(toy | roof, f"the given {getattr(cost, 'name', 'cost')} cost model object")
        return cost
    name = cost
    if name == "auto":
        if toy and roof:
            raise ConfigError(f"{_flag(next(iter(toy)))} is an option of the toy cost and {_flag(next(iter(roof)))} "
                              "of the roofline: give one cost model's options (or --cost NAME)")
        lesson = isinstance(workload, str) and workload in LESSON_WORKLOADS
        name = "roofline" if roof else "toy" if toy or lesson else "roofline"
    if "dtype" in roof and roof["dtype"] not in DTYPES:
        raise ConfigError(f"--dtype {roof['dtype']}: servesim models 16-bit weights and KV (2 bytes); "
                          f"expected one of {', '.join(DTYPES)}")
    if name == "toy":
        _refuse(roof, "the toy cost")
        return get_cost_model("toy", **toy)
    _refuse(toy, f"the {name} cost" if name in COST_MODELS else f"the profile {name}")
    if name == "roofline":
        return get_cost_model("roofline", model=roof.get("model", DEFAULT_MODEL), gpu=roof.get("gpu", DEFAULT_GPU),
                              tp=roof.get("tp", DEFAULT_TP))
    if name not in COST_MODELS and name.endswith(PROFILE_SUFFIXES):
        if "gpu" in roof:
            raise ConfigError(f"--gpu {roof['gpu']}: the profile {name} was fitted on its own GPU; drop --gpu "
                              "(or use --cost roofline --gpu NAME)")
        return get_cost_model(name, tp=roof.get("tp"), model=roof.get("model"))
    _refuse(roof, f"the {name} cost")
    return get_cost_model(name)


def _refuse(given: dict[str, Any], what: str) -> None:
    if given:
        names = ", ".join(f"{_flag(k)} {v}" for k, v in given.items())
        raise ConfigError(f"{names}: not an option of {what}; drop it or choose the cost model that has it")


def lesson_settings(workload: object, chunked: bool) -> dict[str, int]:
    """The lesson's engine settings for its workloads (empty for any other workload)."""
    if not (isinstance(workload, str) and workload in LESSON_WORKLOADS):
        return {}
    return {"max_num_seqs": LESSON_MAX_NUM_SEQS} | ({"max_num_batched_tokens": LESSON_BUDGET} if chunked else {})
