"""Fit the GPU files' per-operator constants to the fit half of Vidur's profiles: `python -m bench.cost_vs_vidur
--fit` prints the [efficiency], [kernels] and [allreduce] values that src/servesim/data/gpus/*.toml hold.

The formulas are `servesim.cost.kernels`' (vectorised here); `bench.cost_vs_vidur` then scores the files' values
through the roofline on the other, held-out half, which the fit never sees. Least squares on relative errors with
a soft L1 loss (MAPE, the score, is an L1 measure; the all-reduce medians are bimodal below 1 MiB).
"""

from __future__ import annotations

import numpy as np

from bench.vidur_profiles import OpRow, elementwise_bytes
from servesim.cost.roofline import GEMM_TILE_TOKENS
from servesim.cost.specs import GpuSpec

US = 1e-6


def _fit(predict, x0: list[float], lo: list[float], hi: list[float], meas: np.ndarray) -> np.ndarray:
    from scipy.optimize import least_squares  # the `fit` extra

    x0a = np.array(x0)
    sol = least_squares(lambda x: (predict(x) - meas) / meas, x0a, bounds=(lo, hi), loss="soft_l1", f_scale=0.05,
                        x_scale=np.maximum(np.abs(x0a), 1e-7))
    return sol.x


def fit_gemm(rows: list[OpRow], g: GpuSpec) -> tuple[float, float, float]:
    """(compute efficiency, memory efficiency, floor s): tokens padded to the 128-row tile for the FLOPs."""
    c, m, t = [], [], []
    for r in rows:
        mo, tp, d = r.model, r.tp, r.model.dtype_bytes
        heads, kv = mo.num_attention_heads // tp, max(1, mo.num_key_value_heads // tp)
        inter, h, hd = mo.intermediate_size // tp, mo.hidden_size, mo.head_dim
        k, n = {"qkv_proj": (h, (heads + 2 * kv) * hd), "o_proj": (heads * hd, h),
                "gate_up_proj": (h, inter * (2 if mo.gated_mlp else 1)), "down_proj": (inter, h)}[r.op]
        padded = -(-r.tokens // GEMM_TILE_TOKENS) * GEMM_TILE_TOKENS
        c.append(2.0 * padded * k * n / g.peak_flops)
        m.append(d * (k * n + r.tokens * (k + n)) / g.memory_bandwidth)
        t.append(r.time)
    c, m, t = np.array(c), np.array(m), np.array(t)
    x = _fit(lambda x: np.maximum(c / x[0], m / x[1]) + x[2], [0.7, 0.8, 5 * US], [0.02, 0.02, 0], [1, 1, 1e-4], t)
    return float(x[0]), float(x[1]), float(x[2])


def fit_elementwise(rows: list[OpRow], g: GpuSpec) -> tuple[float, float]:
    """(efficiency, floor s): floor + bytes / (bandwidth x efficiency)."""
    b = np.array([elementwise_bytes(r) * r.tokens / g.memory_bandwidth for r in rows])
    t = np.array([r.time for r in rows])
    x = _fit(lambda x: b / x[0] + x[1], [0.5, 3 * US], [0.02, 0], [1, 1e-4], t)
    return float(x[0]), float(x[1])


def _attention_terms(r: OpRow, g: GpuSpec) -> tuple[float, float, float]:
    """(FLOPs / peak, query tokens, bytes / bandwidth) of one attention row, as `Roofline` counts them."""
    m, tp, d = r.model, r.tp, r.model.dtype_bytes
    heads, kv = m.num_attention_heads // tp, max(1, m.num_key_value_heads // tp)
    if r.group == "decode_attention":
        q, kvlen, pairs = r.tokens, r.tokens * (r.context + 1), r.tokens * (r.context + 1)
    else:
        q, kvlen, pairs = r.tokens, r.context + r.tokens, r.tokens * r.context + r.tokens * (r.tokens + 1) // 2
    flops = 4.0 * heads * m.head_dim * pairs
    nbytes = 2 * kv * m.head_dim * d * kvlen + (2 * heads + 2 * kv) * m.head_dim * d * q
    return flops / g.peak_flops, q, nbytes / g.memory_bandwidth


def fit_attention(rows: list[OpRow], g: GpuSpec) -> tuple[tuple[float, float, float], tuple[float, float]]:
    """Decode first (efficiency, floor s), then prefill (efficiency, s per query token, floor s) with the decode
    kernel's bandwidth for the KV it reads."""
    dec = np.array([_attention_terms(r, g) for r in rows if r.group == "decode_attention"])
    td = np.array([r.time for r in rows if r.group == "decode_attention"])
    xd = _fit(lambda x: np.maximum(dec[:, 0] / 0.5, dec[:, 2] / x[0]) + x[1], [0.6, 10 * US], [0.02, 0],
              [1, 1e-4], td)
    pre = np.array([_attention_terms(r, g) for r in rows if r.group == "prefill_attention"])
    tp_ = np.array([r.time for r in rows if r.group == "prefill_attention"])
    xp = _fit(lambda x: np.maximum(pre[:, 0] / x[0] + x[1] * pre[:, 1], pre[:, 2] / xd[0]) + x[2],
              [0.3, 0.1 * US, 5 * US], [0.02, 0, 0], [1, 1e-5, 1e-4], tp_)
    return (float(xp[0]), float(xp[1]), float(xp[2])), (float(xd[0]), float(xd[1]))


def fit_allreduce(rows: list[OpRow], g: GpuSpec, tp: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Two NCCL protocols at this TP size, ((latency s, efficiency), ...), the faster taken per message; they
    start apart (fast start, low bandwidth; slow start, high bandwidth) so the fit can split them."""
    link = g.interconnect_bandwidth / 2
    wire = np.array([2 * (tp - 1) / tp * r.size / link for r in rows])
    t = np.array([r.time for r in rows])
    x = _fit(lambda x: np.minimum(x[0] + wire / x[1], x[2] + wire / x[3]), [15 * US, 0.3, 45 * US, 0.7],
             [0, 0.02, 0, 0.02], [1e-3, 1, 1e-3, 1], t)
    pairs = sorted([(float(x[0]), float(x[1])), (float(x[2]), float(x[3]))])
    return pairs[0], pairs[1]


def fit_gpu(rows: list[OpRow], g: GpuSpec) -> list[str]:
    """TOML lines for one GPU's fitted constants (microseconds, as the files hold them)."""
    mine = [r for r in rows if r.gpu == g.name]
    by = {grp: [r for r in mine if r.group == grp] for grp in {r.group for r in mine}}
    out = [f"# {g.name}: fitted on {len(mine)} rows (the fit half of bench.vidur_profiles)"]
    if "gemm" in by:
        ec, em, kl = fit_gemm(by["gemm"], g)
        out += ["[efficiency]", f"compute = {ec:.3f}", f"memory = {em:.3f}", f"kernel_latency_us = {kl / US:.2f}"]
    out.append("[kernels]")
    for op in ("norm", "rotary", "activation"):
        if op in by:
            eff, floor = fit_elementwise(by[op], g)
            out.append(f"{op} = [{eff:.3f}, {floor / US:.2f}]  # {len(by[op])} rows")
    if "prefill_attention" in by:
        (ep, per_q, fp), (ed, fd) = fit_attention(by["prefill_attention"] + by["decode_attention"], g)
        out.append(f"prefill_attention = [{ep:.3f}, {per_q / US:.4f}, {fp / US:.2f}]  "
                   f"# {len(by['prefill_attention'])} rows")
        out.append(f"decode_attention = [{ed:.3f}, {fd / US:.2f}]  # {len(by['decode_attention'])} rows")
    out.append("[allreduce]")
    for tp in sorted({r.tp for r in by.get("all_reduce", [])}):
        sel = [r for r in by["all_reduce"] if r.tp == tp]
        (l1, e1), (l2, e2) = fit_allreduce(sel, g, tp)
        out.append(f"tp{tp} = [[{l1 / US:.1f}, {e1:.3f}], [{l2 / US:.1f}, {e2:.3f}]]  # {len(sel)} rows")
    return out
