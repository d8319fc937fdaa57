"""`explain`, `compare` and `trace` against `run` on the one-hour Azure trace (issue 12): `python -m bench.readers`.

Each command runs in a fresh process, as a user types it (Llama-3-8B on one H100-80GB, the roofline, vLLM's
defaults for that GPU); the figures are the median wall time of R runs taken in turn (run, trace, explain, compare,
run, ...) and the largest peak resident memory, with each command's ratio to `run` beside it. Needs ../shared.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from bench.speed import AZURE_CONV, reference_loop

COMMANDS = {
    "run": ["run"],
    "trace (first 200 rows)": ["trace"],
    "explain": ["explain", "--no-counterfactual"],
    "compare (2 budgets)": ["compare", "--set", "max_num_batched_tokens=2048,8192"],
}


def timed(args: list[str]) -> float:
    """Wall seconds of one command in a fresh process."""
    cmd = [sys.executable, "-m", "servesim.cli", *args, "--workload", str(AZURE_CONV)]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if not AZURE_CONV.exists():
        sys.exit(f"{AZURE_CONV} not found: needs ../shared/traces beside the repository")
    walls: dict[str, list[float]] = {k: [] for k in COMMANDS}
    peaks: dict[str, int] = {}
    pace = []
    for _ in range(args.repeat):
        pace.append(reference_loop())
        for name, cmd in COMMANDS.items():
            walls[name].append(timed(cmd))
    for name, cmd in COMMANDS.items():  # peak memory, one process each (RUSAGE_CHILDREN keeps the maximum)
        peaks[name] = _peak(cmd)
    base = statistics.median(walls["run"])
    print(f"reference loop {statistics.median(pace):.3f} s (the machine's pace)")
    for name in COMMANDS:
        wall = statistics.median(walls[name])
        print(f"{name:<24} {wall:6.2f} s  {wall / base:4.1f}x run  peak {peaks[name] / 2**20:6.0f} MiB", flush=True)


def _peak(cmd: list[str]) -> int:
    """Peak RSS (bytes) of one command, measured in a child that runs only it (ru_maxrss is in KiB on Linux)."""
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "servesim.cli", *cmd, "--workload",
                          str(AZURE_CONV)], check=True, capture_output=True, text=True)
    return int(out.stdout.strip()) * 1024


if __name__ == "__main__":
    main()
