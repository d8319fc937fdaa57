"""Model specs from a Hugging Face `config.json` and GPU specs from a datasheet TOML, built-in or a user's file."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from servesim.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# vLLM's dtype="auto" serves a float32 checkpoint in 16-bit, so every listed dtype serves at 2 bytes except fp8.
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 2, "float8_e4m3fn": 1, "fp8": 1}
# Architectures whose MLP is up -> activation -> down (two matrices); the rest are gated (gate, up, down).
NON_GATED_MODEL_TYPES = frozenset({"bloom", "gpt2", "gpt_neox", "gptj", "opt", "falcon", "gpt_bigcode", "mpt"})
# `tie_word_embeddings` when config.json omits it: PretrainedConfig's True, except where the architecture's config
# class passes False (transformers' LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig).
UNTIED_MODEL_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe"})


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a decoder-only transformer, with Hugging Face `config.json` names."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int | None = None
    torch_dtype: str = "bfloat16"
    num_local_experts: int = 0  # 0 = dense MLP
    num_experts_per_tok: int = 0
    gated_mlp: bool = True
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for field in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                      "head_dim", "intermediate_size", "vocab_size"):
            if getattr(self, field) <= 0:
                raise ConfigError(f"model {self.name}: {field} must be > 0, got {getattr(self, field)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"model {self.name}: num_attention_heads ({self.num_attention_heads}) is not a "
                              f"multiple of num_key_value_heads ({self.num_key_value_heads})")
        if self.num_local_experts and not 0 < self.num_experts_per_tok <= self.num_local_experts:
            raise ConfigError(f"model {self.name}: num_experts_per_tok must be in 1..num_local_experts")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.torch_dtype]

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def num_parameters(self) -> int:
        """Weights counted from the shapes (norms and biases omitted: < 0.1 % of any listed model)."""
        h, L = self.hidden_size, self.num_hidden_layers
        attn = h * (self.num_attention_heads + 2 * self.num_key_value_heads) * self.head_dim
        attn += self.num_attention_heads * self.head_dim * h
        mlp = self.mlp_matrices * h * self.intermediate_size
        if self.num_local_experts:
            mlp = self.num_local_experts * mlp + h * self.num_local_experts  # experts + router
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return L * (attn + mlp) + embed

    @classmethod
    def from_config(cls, config: dict, name: str, source: str = "config.json") -> ModelSpec:
        """Read a Hugging Face config dict; BLOOM's `n_embed`/`n_layer`/`n_head` are accepted as HF does."""

        def get(*keys: str, default=None):
            for key in keys:
                if config.get(key) is not None:
                    return config[key]
            if default is None:
                raise ConfigError(f"{source}: missing field {keys[0]!r}")
            return default

        def integer(value, key: str) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{source}: field {key!r} must be an integer, got {value!r}")
            return value

        # BloomConfig: `n_embed`, when given, overrides `hidden_size` (it is the older name the checkpoints use).
        hidden = integer(config["n_embed"] if config.get("n_embed") is not None else get("hidden_size"), "hidden_size")
        heads = integer(get("num_attention_heads", "n_head"), "num_attention_heads")
        model_type = str(config.get("model_type", ""))
        gated = model_type not in NON_GATED_MODEL_TYPES
        dtype = str(config.get("torch_dtype") or "bfloat16")
        if dtype not in DTYPE_BYTES:
            raise ConfigError(f"{source}: field 'torch_dtype' is {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        # MLP width when absent: BLOOM/GPT-style 4 x hidden (BLOOM has no intermediate_size field).
        inter = get("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)
        try:
            return cls(
                name=name,
                hidden_size=hidden,
                num_hidden_layers=integer(get("num_hidden_layers", "n_layer"), "num_hidden_layers"),
                num_attention_heads=heads,
                num_key_value_heads=integer(get("num_key_value_heads", default=heads), "num_key_value_heads"),
                head_dim=integer(get("head_dim", default=hidden // heads), "head_dim"),
                intermediate_size=integer(inter, "intermediate_size"),
                vocab_size=integer(get("vocab_size"), "vocab_size"),
                max_position_embeddings=config.get("max_position_embeddings"),
                torch_dtype=dtype,
                num_local_experts=integer(config.get("num_local_experts") or 0, "num_local_experts"),
                num_experts_per_tok=integer(config.get("num_experts_per_tok") or 0, "num_experts_per_tok"),
                gated_mlp=gated,
                tie_word_embeddings=bool(config.get("tie_word_embeddings", model_type not in UNTIED_MODEL_TYPES)),
            )
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator's datasheet numbers (SI units) and the default efficiencies the roofline applies to them."""

    name: str
    description: str
    peak_flops: float  # dense bf16, FLOP/s
    memory_bandwidth: float  # bytes/s
    memory_bytes: int
    interconnect_bandwidth: float  # bytes/s, both directions together, as datasheets state it
    pcie_bandwidth: float  # bytes/s, both directions together
    compute_efficiency: float = 0.7
    memory_efficiency: float = 0.8
    interconnect_efficiency: float = 0.55
    allreduce_latency: float = 30e-6  # seconds
    kernel_latency: float = 5e-6  # seconds
    step_overhead: float = 1e-3  # seconds
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for field in ("peak_flops", "memory_bandwidth", "memory_bytes", "interconnect_bandwidth", "pcie_bandwidth"):
            if getattr(self, field) <= 0:
                raise ConfigError(f"gpu {self.name}: {field} must be > 0")
        for field in ("compute_efficiency", "memory_efficiency", "interconnect_efficiency"):
            if not 0 < getattr(self, field) <= 1:
                raise ConfigError(f"gpu {self.name}: efficiency.{field.split('_')[0]} must be in (0, 1]")
        for field in ("allreduce_latency", "kernel_latency", "step_overhead"):
            if getattr(self, field) < 0:
                raise ConfigError(f"gpu {self.name}: {field} must be >= 0")

    @classmethod
    def from_toml(cls, data: dict, source: str) -> GpuSpec:
        """Datasheet units in the file (TFLOP/s, GB/s, GiB, us, ms); SI units in the spec."""

        def number(table: dict, key: str, default: float | None = None) -> float:
            value = table.get(key, default)
            if value is None:
                raise ConfigError(f"{source}: missing field {key!r}")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{source}: field {key!r} must be a number, got {value!r}")
            return float(value)

        eff = data.get("efficiency", {})
        try:
            return cls(
                name=str(data.get("name") or Path(source).stem),
                description=str(data.get("description", "")),
                peak_flops=number(data, "dense_bf16_tflops") * 1e12,
                memory_bandwidth=number(data, "memory_bandwidth_gb_s") * 1e9,
                memory_bytes=int(number(data, "memory_gib") * 2**30),
                interconnect_bandwidth=number(data, "interconnect_gb_s") * 1e9,
                pcie_bandwidth=number(data, "pcie_gb_s") * 1e9,
                compute_efficiency=number(eff, "compute", 0.7),
                memory_efficiency=number(eff, "memory", 0.8),
                interconnect_efficiency=number(eff, "interconnect", 0.55),
                allreduce_latency=number(eff, "allreduce_latency_us", 30.0) * 1e-6,
                kernel_latency=number(eff, "kernel_latency_us", 5.0) * 1e-6,
                step_overhead=number(eff, "step_overhead_ms", 1.0) * 1e-3,
                aliases=tuple(data.get("aliases", ())),
            )
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def _data_dir(kind: str):
    return resources.files("servesim") / "data" / kind


def builtin_models() -> list[str]:
    return sorted(p.name[: -len(".json")] for p in _data_dir("models").iterdir() if p.name.endswith(".json"))


def builtin_gpus() -> dict[str, GpuSpec]:
    gpus = {}
    for p in sorted(_data_dir("gpus").iterdir(), key=lambda p: p.name):
        if p.name.endswith(".toml"):
            gpus[p.name[: -len(".toml")]] = GpuSpec.from_toml(tomllib.loads(p.read_text()), p.name)
    return gpus


def load_model(spec: str | ModelSpec) -> ModelSpec:
    """A built-in name (`llama-3-8b`) or a path to a Hugging Face `config.json`."""
    if isinstance(spec, ModelSpec):
        return spec
    name = spec.lower()
    if name in builtin_models():
        return ModelSpec.from_config(json.loads((_data_dir("models") / f"{name}.json").read_text()), name,
                                     f"{name}.json")
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"unknown model {spec!r}: not a file; built-in models: {', '.join(builtin_models())}")
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable JSON config.json ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a config.json must hold a JSON object")
    name = path.parent.name if path.name == "config.json" else path.stem
    return ModelSpec.from_config(config, name, str(path))


def load_gpu(spec: str | GpuSpec) -> GpuSpec:
    """A built-in name or alias (`h100` -> `h100-80gb`) or a path to a TOML file shaped like the built-ins."""
    if isinstance(spec, GpuSpec):
        return spec
    gpus = builtin_gpus()
    name = spec.lower()
    for key, gpu in gpus.items():
        if name == key or name in gpu.aliases:
            return gpu
    path = Path(spec)
    if not path.is_file():
        names = ", ".join(f"{k} ({', '.join(g.aliases)})" if g.aliases else k for k, g in gpus.items())
        raise ConfigError(f"unknown GPU {spec!r}: not a file; built-in GPUs: {names}")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable TOML file ({exc})") from None
    return GpuSpec.from_toml(data, str(path))
