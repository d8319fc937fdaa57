"""Prefix caching's cost: `python -m bench.prefix_speed [--base DIR] [--pairs P] [--limit N] [--sessions C]`.

The Mooncake conversation trace (../shared/traces/mooncake_conversation_trace.jsonl, 12,031 requests, or its first
N), or with `--sessions C` C generated multi-turn conversations (`workloads.sessions.conversations`: 8 turns of
2,000 prompt and 300 answer tokens after a 1,000-token common prefix, 2 s think time, 4 conversations/s),
Qwen2.5-7B on one H100-80GB (roofline), vLLM's defaults, `record="summary"`, with prefix caching on and off.
Each run is a fresh interpreter with PYTHONPATH set to this tree's `src` or DIR (another checkout's `src`) and
times `simulate()` only (imports and the trace's loading excluded); the runs alternate (base on, this on, base off,
this off, ...) so that a shared machine's drift falls on all of them. Printed: each tree's median seconds on and
off, on / off, and this / base for each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "src"
MOONCAKE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
CHILD = """
import json, sys, time
from servesim.cost import get_cost_model
from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.workloads import load_workload
reqs = {workload}
cost = get_cost_model("roofline", model="qwen2.5-7b", gpu="h100-80gb")
t = time.perf_counter()
r = simulate(reqs, EngineConfig(enable_prefix_caching={on}), "vllm", cost, record="summary")
print(json.dumps([time.perf_counter() - t, r.prefix_cache.hit_rate if r.prefix_cache else None]))
"""


def workload(limit: int | None, sessions: int | None) -> str:
    """The child's line that makes the requests."""
    if sessions is None:
        return f"load_workload({str(MOONCAKE)!r})[:{limit}]"
    return ("__import__('servesim.workloads.sessions', fromlist=['x']).conversations("
            f"{sessions}, 8, 2000, 300, common_prefix=1000, think_time=2.0, request_rate=4.0, seed=0)")


def run(src: str, on: bool, requests: str) -> tuple[float, float | None]:
    code = CHILD.format(workload=requests, on=on)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=os.environ | {"PYTHONPATH": src}).stdout
    seconds, hit_rate = json.loads(out.splitlines()[-1])
    return seconds, hit_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=None, help="another checkout's src folder")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="the trace's first N requests")
    parser.add_argument("--sessions", type=int, default=None, help="C generated conversations instead")
    a = parser.parse_args()
    requests = workload(a.limit, a.sessions)
    trees = {"this": str(HERE)} if a.base is None else {"base": a.base, "this": str(HERE)}
    times: dict[tuple[str, bool], list[float]] = {(t, on): [] for t in trees for on in (True, False)}
    hits = {}
    for _ in range(a.pairs):
        for on in (True, False):
            for tree, src in trees.items():
                seconds, hit_rate = run(src, on, requests)
                times[tree, on].append(seconds)
                if on:
                    hits[tree] = hit_rate
    med = {k: statistics.median(v) for k, v in times.items()}
    for tree in trees:
        ratio = med[tree, True] / med[tree, False]
        runs = {on: ", ".join(f"{t:.2f}" for t in times[tree, on]) for on in (True, False)}
        print(f"{tree}: on {med[tree, True]:.2f} s, off {med[tree, False]:.2f} s, on/off {ratio:.1f}x "
              f"(on: {runs[True]}; off: {runs[False]}; hit rate {hits[tree]:.4f})")
    if a.base is not None:
        for on in (True, False):
            print(f"this / base, caching {'on' if on else 'off'}: {med['this', on] / med['base', on]:.3f}")


if __name__ == "__main__":
    main()
