"""Speculative decoding on the one-hour Azure conversation trace (issue 29): `python -m bench.speculative`.

Llama-3.1-8B on one H100-80GB (roofline with vLLM's host profile), vLLM 0.33's defaults for the GPU, the trace as
recorded (19,366 requests); without speculation, then EAGLE-3 with K = 3 drafts at constant per-position
acceptance rates (each draft accepted with that chance given the ones before it were). servesim has no default
acceptance: the rates are the benchmark's inputs, a range, not a claim about a model pair. Prints, per run, the
client's means (vllm bench serve's TTFT, TPOT, ITL, output throughput), the acceptance length, the KV pool, and the
simulation's wall seconds (one process, the trace loaded once; the machine's speed swings, so compare within one
run). `--requests N` runs the first N requests only.
"""

from __future__ import annotations

import argparse
import time

from bench.sglang_speed import AZURE_CONV
from servesim.analysis.benchmark import benchmark_metrics
from servesim.cost import get_cost_model
from servesim.cost.host import PRESETS
from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.workloads import load_workload

EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3}
RATES = (0.6, 0.8)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=None, help="the trace's first N requests (default: all)")
    args = ap.parse_args(argv)
    requests = load_workload(str(AZURE_CONV))
    if args.requests:
        requests = requests[:args.requests]
    cost = get_cost_model("roofline", model="llama-3.1-8b", gpu="h100-80gb", engine=PRESETS["vllm-0.33"])
    runs = [("no speculation", EngineConfig())]
    runs += [(f"eagle3 K=3, rate {p}", EngineConfig(speculative_config=EAGLE3, acceptance_rate=(p,))) for p in RATES]
    print(f"{'run':24} {'TTFT ms':>9} {'TPOT ms':>9} {'ITL ms':>9} {'out tok/s':>10} {'acc len':>8} "
          f"{'blocks':>7} {'wall s':>7}")
    for name, cfg in runs:
        start = time.perf_counter()
        r = simulate(requests, cfg, "vllm", cost, record="summary")
        wall = time.perf_counter() - start
        m = benchmark_metrics(r)
        acc = f"{r.spec_decoding.acceptance_length:.2f}" if r.spec_decoding is not None else "-"
        print(f"{name:24} {m['ttft'].mean:9.2f} {m['tpot'].mean:9.2f} {m['itl'].mean:9.2f} "
              f"{m.output_throughput:10.1f} {acc:>8} {r.config.num_gpu_blocks:7d} {wall:7.2f}")


if __name__ == "__main__":
    main()
