"""Roofline vs Vidur's A100 measurements: non-attention GEMMs of Llama-2-7B at tp 1/2/4/8, NCCL all-reduce.

    python -m bench.cost_vs_vidur [--data ../shared/peer-data/vidur] [--csv measured.csv]

Prints the uncalibrated errors (datasheet numbers and the A100's default efficiencies) and the calibrated ones
(fit on a seeded half of the rows, scored on the other half), as markdown for docs/benchmarks.md. `--csv` also
writes the rows in `servesim calibrate`'s format, so `servesim calibrate measured.csv --model llama-2-7b --gpu a100`
reproduces the calibrated figures.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from servesim.cost.calibrate import Measurement, calibrate, evaluate

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "peer-data" / "vidur"
MLP_CSV = "profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
ALL_REDUCE_CSV = "profiling/network/a100_dgx/all_reduce.csv"
# Vidur's operator names -> vLLM's module names.
VIDUR_GEMMS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
               "mlp_down_proj": "down_proj"}
STAT = "median"  # of Vidur's repeated timings; the most robust of min/max/mean/median


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--csv", type=Path, help="also write the rows in `servesim calibrate` format")
    args = ap.parse_args()
    t0 = time.perf_counter()
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
