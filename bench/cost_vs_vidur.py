"""Roofline vs Vidur's measured A100 and H100 operator profiles, scored on held-out rows per operator group.

    python -m bench.cost_vs_vidur [--data ../shared/peer-data/vidur] [--csv measured.csv] [--fit]

First table: every operator group of `bench.vidur_profiles` (GEMMs, norms, rotary, activation, FlashAttention
prefill and decode, NCCL all-reduce), scored on the held-out half of its rows, under the GPU files as they were
before the per-operator fit (`BEFORE`) and as they are now (their [efficiency], [kernels] and [allreduce] values
were fitted on the other half: `--fit` prints that fit). Second table: `servesim calibrate` on Llama-2-7B's A100
GEMMs and all-reduces. `--csv` writes those rows in `servesim calibrate`'s format, so
`servesim calibrate measured.csv --model llama-2-7b --gpu a100` reproduces the calibrated figures.
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import replace
from pathlib import Path

from bench.vidur_profiles import GPUS, GROUPS, operator_rows, score, split
from servesim.cost.calibrate import Measurement, calibrate, evaluate
from servesim.cost.specs import load_gpu

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "peer-data" / "vidur"
MLP_CSV = "profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
ALL_REDUCE_CSV = "profiling/network/a100_dgx/all_reduce.csv"
# Vidur's operator names -> vLLM's module names.
VIDUR_GEMMS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
               "mlp_down_proj": "down_proj"}
STAT = "median"  # of Vidur's repeated timings; the most robust of min/max/mean/median
# The GPU files' [efficiency] values before the per-operator fit (commit ccb472a): one compute and one memory
# efficiency, one kernel floor for every kernel, one NCCL protocol for every TP size.
BEFORE = {"a100-80gb": dict(compute_efficiency=0.70, memory_efficiency=0.80, kernel_latency=5e-6),
          "h100-80gb": dict(compute_efficiency=0.65, memory_efficiency=0.80, kernel_latency=4e-6)}
BEFORE_ALLREDUCE = dict(allreduce_latency=30e-6, interconnect_efficiency=0.55, kernels=None, allreduce_by_tp=())


def vidur_rows(data: Path = DEFAULT_DATA) -> list[Measurement]:
    """Every GEMM timing, and the all-reduces inside one node (tensor parallelism stays inside a node, and the
    roofline models NVLink only: the 2-node rows, devices_per_node < num_workers, are left out)."""
    rows = []
    with (data / MLP_CSV).open(newline="") as f:
        for r in csv.DictReader(f):
            for vidur, op in VIDUR_GEMMS.items():
                rows.append(Measurement(op, int(r["num_tensor_parallel_workers"]),
                                        float(r[f"time_stats.{vidur}.{STAT}"]) / 1e3, num_tokens=int(r["num_tokens"])))
    with (data / ALL_REDUCE_CSV).open(newline="") as f:
        for r in csv.DictReader(f):
            if r["num_workers"] == r["devices_per_node"]:
                rows.append(Measurement("all_reduce", int(r["num_workers"]),
                                        float(r[f"time_stats.all_reduce.{STAT}"]) / 1e3, size_bytes=float(r["size"])))
    return rows


def write_csv(rows: list[Measurement], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["operator", "tp", "num_tokens", "size_bytes", "time_ms"])
        for r in rows:
            w.writerow([r.operator, r.tp, r.num_tokens or "", int(r.size_bytes) or "", f"{r.time * 1e3:.6g}"])


def operator_table(data: Path) -> None:
    """Held-out MAPE per GPU and operator group, before and after the fit."""
    fit_half, held = split(operator_rows(data))
    now = {g: load_gpu(g) for g in GPUS.values()}
    before = {g: replace(spec, **BEFORE[g], **BEFORE_ALLREDUCE) for g, spec in now.items()}
    old, new = score(held, before), score(held, now)
    print("| GPU | operators | held-out rows | MAPE before | worst before | MAPE after | worst after |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for gpu in GPUS.values():
        for group in GROUPS:
            if (gpu, group) in new:
                o, n = old[(gpu, group)], new[(gpu, group)]
                print(f"| {gpu} | {group} | {n['rows']} | {o['mape']:.1f} % | {o['worst']:.0f} % | "
                      f"{n['mape']:.1f} % | {n['worst']:.0f} % |")
    print(f"({len(fit_half)} rows fitted, {len(held)} held out)\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--csv", type=Path, help="also write the rows in `servesim calibrate` format")
    ap.add_argument("--fit", action="store_true", help="print the GPU files' constants fitted on the fit half")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.fit:
        from bench.fit_vidur import fit_gpu

        fit_half, _ = split(operator_rows(args.data))
        for gpu in GPUS.values():
            print("\n".join(fit_gpu(fit_half, load_gpu(gpu))) + "\n")
        return
    operator_table(args.data)
    rows = vidur_rows(args.data)
    if args.csv:
        write_csv(rows, args.csv)
    uncal = evaluate(rows, "llama-2-7b", "a100-80gb")
    fit = calibrate(rows, "llama-2-7b", "a100-80gb")
    print("| operators | rows | uncalibrated MAPE | worst | calibrated MAPE (held out) | worst |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for group, label in (("gemm", "GEMMs (qkv, o, gate_up, down; tp 1/2/4/8)"),
                         ("all_reduce", "NCCL all-reduce (2/4/8 GPUs, one node)")):
        u, c = uncal[group], fit.held_out[group]
        print(f"| {label} | {u['rows']} | {u['mape']:.1f} % | {u['worst']:.0f} % | {c['mape']:.1f} % "
              f"({c['rows']} rows) | {c['worst']:.0f} % |")
    p = fit.params
    print(f"\nfitted: compute_efficiency {p.compute_efficiency:.3f}, memory_efficiency {p.memory_efficiency:.3f}, "
          f"kernel_latency {p.kernel_latency * 1e6:.1f} us")
    for tp, protos in fit.allreduce_by_tp.items():
        lines = ", ".join(f"{lat * 1e6:.0f} us + wire/{eff:.2f}" for lat, eff in protos)
        print(f"        all-reduce tp={tp}: min({lines})")
    print(f"({len(rows)} rows, {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
