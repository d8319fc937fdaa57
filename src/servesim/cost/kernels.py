"""Per-operator constants of the roofline, fitted to measured kernel times: what a GPU file's [kernels] and
[allreduce] tables hold.

One efficiency for every kernel does not describe a GPU: Vidur's profiles (../shared/peer-data/vidur/profiling)
show RMSNorm at about a third of HBM peak where a residual add runs near peak, and FlashAttention's prefill at a
fifth to a third of the tensor-core peak where a GEMM reaches 0.7. Each operator therefore has its own constants:

- elementwise (`norm`, `rotary`, `activation`): floor + bytes / (bandwidth x efficiency);
- `prefill_attention`: floor + FLOPs / (peak x efficiency) + seconds per query token. The per-token term (the
  kernel loads each query tile, keeps its softmax state and writes its output once, whatever the KV length) makes
  the effective efficiency rise with the length attended to, as measured; against the KV bytes it reads, the
  larger of the two;
- `decode_attention`: floor + KV bytes / (bandwidth x efficiency): a bandwidth term with a floor;
- all-reduce, per TP size: the fastest of NCCL's protocols, each latency + ring wire time / efficiency (the
  low-latency protocol for small messages, "Simple" for large ones; `roofline.allreduce_time`).

A GPU file without these tables (a user's, or a GPU with no measured profile) gets `KernelFit.uniform`: the
file's one memory efficiency and kernel floor for every elementwise and decode kernel, its compute efficiency for
prefill attention: the roofline as it was before the fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servesim.errors import ConfigError

ELEMENTWISE_OPS = ("norm", "rotary", "activation")
# A table's fields, in the order the TOML lists them, and their units there.
KERNEL_FIELDS = {
    "norm": ("efficiency", "floor_us"),
    "rotary": ("efficiency", "floor_us"),
    "activation": ("efficiency", "floor_us"),
    "prefill_attention": ("efficiency", "per_token_us", "floor_us"),
    "decode_attention": ("efficiency", "floor_us"),
}


def _check(name: str, values: tuple[float, ...]) -> None:
    fields = KERNEL_FIELDS[name]
    if not isinstance(values, tuple) or len(values) != len(fields):
        raise ConfigError(f"kernels.{name}: expected [{', '.join(fields)}], got {values!r}")
    for field, v in zip(fields, values):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok or (field == "efficiency" and not 0 < v <= 1) or v < 0:
            want = "a fraction in (0, 1]" if field == "efficiency" else "a finite number >= 0"
            raise ConfigError(f"kernels.{name}: {field}: expected {want}, got {v!r}")


@dataclass(frozen=True, slots=True)
class KernelFit:
    """(efficiency, floor seconds) per elementwise kernel; prefill attention (efficiency, seconds per query
    token, floor seconds); decode attention (efficiency, floor seconds). Seconds here, microseconds in files."""

    norm: tuple[float, float]
    rotary: tuple[float, float]
    activation: tuple[float, float]
    prefill_attention: tuple[float, float, float]
    decode_attention: tuple[float, float]
    source: str = ""  # where the numbers came from, for `servesim gpus` and the docs

    def __post_init__(self) -> None:
        for name in KERNEL_FIELDS:
            _check(name, getattr(self, name))

    @classmethod
    def uniform(cls, compute_efficiency: float, memory_efficiency: float, kernel_latency: float) -> KernelFit:
        """One efficiency and floor for every kernel: a GPU file without a [kernels] table."""
        pair = (memory_efficiency, kernel_latency)
        return cls(pair, pair, pair, (compute_efficiency, 0.0, kernel_latency), pair, "uniform")

    @classmethod
    def from_file(cls, table: dict[str, list[float]], source: str) -> KernelFit:
        """From a GPU file's [kernels] table (floors and per-token costs in microseconds)."""
        values = {}
        for name, fields in KERNEL_FIELDS.items():
            row = table[name]
            values[name] = tuple(v * 1e-6 if f.endswith("_us") else v for f, v in zip(fields, row))
        return cls(**values, source=source)
