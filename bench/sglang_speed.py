"""The sglang policy against the vllm policy on the same workload and cost (issue 18: within 2x):
`python -m bench.sglang_speed [--pairs P]`.

The Azure LLM inference 2023 conversation trace (19,366 requests, ~1 h), `simulate(..., record="summary")` in a
fresh interpreter per run (imports and loading the trace included, as a user's process has them), the two policies
in turn (vllm, sglang, vllm, ...) so that a shared machine's drift falls on both, under two costs: the toy cost
(unlimited KV) and the roofline of Llama-3-8B on one H100-80GB (vLLM's KV blocks and SGLang's token pool derived
from GPU memory, each as its engine sizes it). Prints each policy's median wall time and the median of the
pair-by-pair ratios sglang / vllm. Needs ../shared (the trace) beside the repository.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

AZURE_CONV = Path(__file__).resolve().parents[2] / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"

CHILD = """
import sys
from servesim.cost import get_cost_model
from servesim.engine import simulate
from servesim.workloads import load_workload
requests = load_workload({trace!r})
cost = "toy" if {cost!r} == "toy" else get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb")
simulate(requests, None, {policy!r}, cost, record="summary")
"""


def _run(policy: str, cost: str) -> float:
    code = CHILD.format(trace=str(AZURE_CONV), cost=cost, policy=policy)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5, help="alternating runs of each policy per cost (default 5)")
    args = ap.parse_args(argv)
    for cost in ("toy", "roofline"):
        _run("vllm", cost)  # a warm-up (file cache, bytecode)
        times: dict[str, list[float]] = {"vllm": [], "sglang": []}
        for _ in range(args.pairs):
            for policy in ("vllm", "sglang"):
                times[policy].append(_run(policy, cost))
        ratios = [s / v for s, v in zip(times["sglang"], times["vllm"])]
        print(f"{cost:9s} vllm {statistics.median(times['vllm']):.2f} s  sglang "
              f"{statistics.median(times['sglang']):.2f} s  sglang/vllm {statistics.median(ratios):.2f} "
              f"(pairs {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
