"""Vidur's measured operator profiles as rows, and the roofline's prediction of each (`bench.cost_vs_vidur`).

Groups, per GPU (../shared/peer-data/vidur/profiling, median of Vidur's repeats, per layer):

- `gemm`: qkv_proj, o_proj, gate_up_proj, down_proj of every model in compute/{a100,h100} (Vidur's attn_pre_proj,
  attn_post_proj, mlp_up_proj, mlp_down_proj), TP 1/2/4/8, 1..4096 tokens;
- `norm`, `rotary`, `activation`: Vidur's input/post-attention RMSNorm, rotary embedding and SiLU-and-mul (GELU for
  non-gated MLPs) of the same rows; phi-2 is left out (LayerNorm, partial rotary, a parallel block: other
  kernels). Vidur's norms are unfused (read x, write y); vLLM fuses the residual add into them, so the roofline
  applies the fitted efficiency to the fused kernel's bytes. Vidur's separate residual `add` has no vLLM kernel;
- `prefill_attention`, `decode_attention`: FlashAttention at Llama-2-70B TP 2 shapes on A100 (batch-1 prefill
  chunks of 64..4096 tokens after 0..4032 cached; decode batches of 1..128 at 32..4096 cached tokens);
- `all_reduce`: NCCL on 2/4/8 GPUs of one DGX node (a100_dgx, h100_dgx), 2 KiB to 64 MiB.

The model is scored through the roofline itself (a one-layer `Roofline` of the row's shapes) where the row is a
roofline operator, and through `servesim.cost.kernels`' formula with Vidur's bytes for the unfused norms.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from servesim.cost.base import StepShape
from servesim.cost.roofline import Roofline, allreduce_time
from servesim.cost.specs import GpuSpec, ModelSpec, load_model

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "peer-data" / "vidur"
GPUS = {"a100": "a100-80gb", "h100": "h100-80gb"}
STAT = "median"
VIDUR_GEMMS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
               "mlp_down_proj": "down_proj"}
VIDUR_ELEMENTWISE = {"input_layernorm": "norm", "post_attention_layernorm": "norm", "attn_rope": "rotary",
                     "mlp_act": "activation"}
ATTENTION_CSV = ("a100", "profiling/attention/a100_llama-2-70b_tp2_attention.csv")
GROUPS = ("gemm", "norm", "rotary", "activation", "prefill_attention", "decode_attention", "all_reduce")


@dataclass(frozen=True, slots=True)
class OpRow:
    gpu: str  # a built-in GPU name
    group: str  # one of GROUPS
    op: str  # vLLM's name (qkv_proj, norm, ...) or the group's
    time: float  # seconds, per layer
    model: ModelSpec | None = None  # one layer of the row's model
    tp: int = 1
    tokens: int = 0  # GEMM / elementwise tokens; prefill chunk; decode batch size
    context: int = 0  # tokens already in the KV cache (per sequence)
    size: float = 0.0  # all-reduce bytes


def _layer(r: dict, name: str) -> ModelSpec:
    h, heads = int(r["n_embd"]), int(r["n_head"])
    return ModelSpec(name, h, 1, heads, int(r["n_kv_head"]), h // heads, int(r["n_expanded_embd"]),
                     int(r["vocab_size"]), gated_mlp=r["use_gated_mlp"] == "True")


def _ms(r: dict, op: str) -> float | None:
    v = r.get(f"time_stats.{op}.{STAT}")
    return float(v) / 1e3 if v else None


def operator_rows(data: Path = DEFAULT_DATA) -> list[OpRow]:
    rows: list[OpRow] = []
    for short, gpu in GPUS.items():
        for path in sorted((data / "profiling" / "compute" / short).glob("*/*/mlp.csv")):
            name = path.parent.name
            with path.open(newline="") as f:
                for r in csv.DictReader(f):
                    m, tp, n = _layer(r, name), int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])
                    for vidur, op in VIDUR_GEMMS.items():
                        rows.append(OpRow(gpu, "gemm", op, _ms(r, vidur), m, tp, n))
                    if name == "phi-2":
                        continue
                    for vidur, op in VIDUR_ELEMENTWISE.items():
                        t = _ms(r, vidur)
                        if t:
                            rows.append(OpRow(gpu, op, op, t, m, tp, n))
        with (data / "profiling" / "network" / f"{short}_dgx" / "all_reduce.csv").open(newline="") as f:
            for r in csv.DictReader(f):
                if r["num_workers"] == r["devices_per_node"]:
                    rows.append(OpRow(gpu, "all_reduce", "all_reduce", _ms(r, "all_reduce"),
                                      tp=int(r["num_workers"]), size=float(r["size"])))
    short, rel = ATTENTION_CSV
    layer = replace(load_model("llama-2-70b"), num_hidden_layers=1)
    with (data / rel).open(newline="") as f:
        for r in csv.DictReader(f):
            tp, ctx = int(r["num_tensor_parallel_workers"]), int(r["kv_cache_size"])
            if r["is_prefill"] == "True":
                rows.append(OpRow(GPUS[short], "prefill_attention", "prefill_attention", _ms(r, "attn_prefill"),
                                  layer, tp, int(r["prefill_chunk_size"]), ctx))
            else:
                rows.append(OpRow(GPUS[short], "decode_attention", "decode_attention", _ms(r, "attn_decode"),
                                  layer, tp, int(r["batch_size"]), ctx))
    return rows


def split(rows: list[OpRow], seed: int = 0) -> tuple[list[OpRow], list[OpRow]]:
    """(fit half, held-out half): a seeded permutation, alternate rows, as `servesim calibrate` splits."""
    order = np.random.default_rng(seed).permutation(len(rows))
    return [rows[i] for i in np.sort(order[::2])], [rows[i] for i in np.sort(order[1::2])]


def elementwise_bytes(row: OpRow) -> float:
    """Bytes per token of Vidur's kernel: unfused RMSNorm reads x and writes y; rotary reads and writes q and k;
    the activation reads gate and up (or up alone) and writes one."""
    m, tp, d = row.model, row.tp, row.model.dtype_bytes
    if row.op == "norm":
        return 2 * m.hidden_size * d
    if row.op == "rotary":
        return 2 * (m.num_attention_heads // tp + max(1, m.num_key_value_heads // tp)) * m.head_dim * d
    inter = m.intermediate_size // tp
    return (3 if m.gated_mlp else 2) * inter * d


class Predictor:
    """The roofline's time for each row under a set of GPU specs (one-layer rooflines cached per shape)."""

    def __init__(self, gpus: dict[str, GpuSpec]) -> None:
        self.gpus, self._roof = gpus, {}

    def _roofline(self, row: OpRow) -> Roofline:
        key = (row.gpu, row.model, row.tp)
        if key not in self._roof:
            self._roof[key] = Roofline(row.model, self.gpus[row.gpu], row.tp)
        return self._roof[key]

    def __call__(self, row: OpRow) -> float:
        g = self.gpus[row.gpu]
        if row.group == "all_reduce":
            return allreduce_time(row.size, row.tp, g.interconnect_bandwidth / 2, g.allreduce_protocols(row.tp))
        if row.group in ("norm", "rotary", "activation"):
            eff, floor = getattr(g.kernel_fit, row.op)
            return floor + elementwise_bytes(row) * row.tokens / (g.memory_bandwidth * eff)
        if row.group == "prefill_attention":
            shape, line = StepShape.of(prefills=[(row.tokens, row.context)], num_sampled=0), "attention (prefill)"
        elif row.group == "decode_attention":
            shape, line = StepShape.of(decodes=[row.context] * row.tokens, num_sampled=0), "attention (decode)"
        else:
            shape, line = StepShape.of(prefills=[(row.tokens, 0)], num_sampled=0), row.op
        return next(o.seconds for o in self._roofline(row).breakdown(shape) if o.name == line)


def score(rows: list[OpRow], gpus: dict[str, GpuSpec]) -> dict[tuple[str, str], dict[str, float]]:
    """(gpu, group) -> rows, MAPE and worst error (percent) of the predictions under `gpus`."""
    predict = Predictor(gpus)
    errs: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        errs.setdefault((r.gpu, r.group), []).append(abs(predict(r) - r.time) / r.time * 100)
    return {k: {"rows": len(v), "mape": float(np.mean(v)), "worst": float(np.max(v))} for k, v in errs.items()}
