"""This checkout against another, side by side: `python -m bench.ab --base DIR [--pairs P] [--cases a,b]`.

DIR is another checkout's `src` (e.g. `git worktree add /tmp/base HEAD~5`, then `--base /tmp/base/src`). Each case
runs as a fresh interpreter (imports and trace loading included) with PYTHONPATH set to one tree or the other, the
two in turn (base, this, base, ...) so that a shared machine's drift falls on both; printed: each tree's median wall
time and the median (and range) of the pair-by-pair ratios this / base. The cases are `bench.speed`'s target 1 (the
`servesim run` of the Azure conversation hour, vllm policy, roofline) and target 2 (10,000 arXiv-summarization
requests on an A100; `arxiv-10k-capped` the same under `--max-concurrency 64`, the client's cap in the engine
loop), and `bench.sglang_speed`'s runs (the Azure hour under the vllm and sglang policies, toy and
roofline costs). Needs ../shared (the traces) beside the repository.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.sglang_speed import AZURE_CONV, CHILD
from bench.speed import ARXIV

HERE = Path(__file__).resolve().parents[1] / "src"
ARXIV_10K = f"""
from servesim import EngineConfig
from servesim.analysis.benchmark import benchmark_metrics
from servesim.analysis.breakdown import server_metrics
from servesim.cost import get_cost_model
from servesim.engine import simulate
from servesim.workloads import make_table
reqs = make_table({str(ARXIV)!r}, request_rate=2.0, num_requests=10_000, seed=0).to_requests()
cost = get_cost_model("roofline", model="llama-2-7b", gpu="a100-80gb", tp=1)
r = simulate(reqs, EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256), "vllm", cost, record="summary")
benchmark_metrics(r), server_metrics(r)
"""


def _cases(out: str) -> dict[str, list[str]]:
    run = ["-m", "servesim.cli", "run", "--workload", str(AZURE_CONV), "--model", "llama-3-8b", "--gpu", "h100-80gb",
           "--policy", "vllm", "--max-num-batched-tokens", "2048", "--max-num-seqs", "256", "--json", out]
    capped = ARXIV_10K.replace("max_num_seqs=256)", "max_num_seqs=256, max_concurrency=64)")
    cases = {"run-azure-hour": run, "arxiv-10k": ["-c", ARXIV_10K], "arxiv-10k-capped": ["-c", capped]}
    for policy in ("vllm", "sglang"):
        for cost in ("toy", "roofline"):
            cases[f"{policy}-{cost}"] = ["-c", CHILD.format(trace=str(AZURE_CONV), cost=cost, policy=policy)]
    return cases


def _time(args: list[str], src: str) -> float:
    env = os.environ | {"PYTHONPATH": src}
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the other checkout's src folder")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = _cases(str(Path(tmp) / "out.json"))
        names = a.cases.split(",") if a.cases else list(cases)
        print(f"{'case':<18} {'base s':>8} {'this s':>8} {'this/base':>10} {'range':>13}")
        for name in names:
            base, this = [], []
            _time(cases[name], str(HERE))  # warm-up (bytecode, page cache)
            for _ in range(a.pairs):
                base.append(_time(cases[name], a.base))
                this.append(_time(cases[name], str(HERE)))
            ratios = [t / b for t, b in zip(this, base)]
            print(f"{name:<18} {statistics.median(base):8.2f} {statistics.median(this):8.2f} "
                  f"{statistics.median(ratios):10.3f} {min(ratios):6.3f}-{max(ratios):.3f}", flush=True)


if __name__ == "__main__":
    main()
