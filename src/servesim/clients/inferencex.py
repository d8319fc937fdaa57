"""InferenceX's client (formerly InferenceMAX; SemiAnalysisAI/InferenceX), as its single-node runs sent a point.

Pinned, read in the source:
- the call (`benchmarks/benchmark_lib.sh`, `run_benchmark_serving`, at 6c3acebfad91, 2026-04-20; the per-model
  scripts pass `--num-prompts $((CONC * 10)) --max-concurrency $CONC`, the workflows `RANDOM_RANGE_RATIO: 0.8`):
  `benchmark_serving.py --dataset-name random --random-input-len ISL --random-output-len OSL
  --random-range-ratio 0.8 --num-prompts 10C --max-concurrency C --request-rate inf --ignore-eos
  --num-warmups 2C`, seed 0 (its default);
- the client, `utils/bench_serving/benchmark_serving.py` (InferenceX's copy of kimbochen/bench_serving from
  d053ae24ea30, 2026-01-21, which added `--num-warmups 2C`); before that date the scripts cloned
  kimbochen/bench_serving (read at 406abc35ff9a), which sends one test request instead of the warm-up.

How it sends: `np.random.seed(0)`, then `sample_random_requests` draws every input length uniformly from the
integers [int(ISL x 0.8), ISL] and every output length from [int(OSL x 0.8), OSL] (numpy's legacy `randint`,
inputs first, then outputs, then token offsets that do not matter here), so the lengths are exactly these.
Before the benchmark, from 2026-01-21: 2C copies of the first sampled request (its input and output lengths)
behind a semaphore of C, all awaited (`--num-warmups`); before 2026-01-21: that request once, alone, awaited
(the "initial single prompt test run"). Then all 10C requests are created at once (`--request-rate inf`) behind
`asyncio.Semaphore(C)`: a closed loop of C, the first C together, each next one in order the moment one ends.
What it measures: each of the 10C requests (warm-up and test request not), `--ignore-eos` so it generates its
output length; mean TTFT, mean TPOT = (latency - TTFT) / (output tokens - 1) per request, mean E2EL, mean ITL
over every gap (vllm bench serve's `calculate_metrics`, `servesim.clients.vllm_bench.means`).

Differences, on purpose: a prompt's length is its drawn length (the client re-tokenises its random text until
it has that many tokens, and adds a chat template's tokens back where a script passes `--use-chat-template`);
no gap between a completion and the next send.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date
from typing import Any

import numpy as np

from servesim.engine.request import Request
from servesim.errors import ConfigError

NAME = "inferencex"
RANGE_RATIO = 0.8  # the workflows' RANDOM_RANGE_RATIO
PROMPTS_PER_USER = 10  # the scripts' --num-prompts $((CONC * 10))
WARMUPS_PER_USER = 2  # benchmark_lib.sh's --num-warmups $((2 * max_concurrency))
WARMUPS_FROM = date(2026, 1, 21)  # d053ae24ea30: the in-repo client and its warm-up
SEED = 0  # benchmark_serving.py's --seed default


@dataclass(frozen=True, slots=True)
class Load:
    """What the client sends: `before` (the warm-up or the test request, awaited first, not measured) and
    `benchmark` (measured), every request at 0 (the benchmark's own clock), at most `concurrency` in flight."""

    concurrency: int
    before: tuple[Request, ...]
    benchmark: tuple[Request, ...]


def lengths(isl: int, osl: int, n: int, ratio: float = RANGE_RATIO, seed: int = SEED) -> tuple[list, list]:
    """(input lengths, output lengths) of the `n` requests, as `sample_random_requests` draws them."""
    rng = np.random.RandomState(seed)  # (np.random.seed(seed)'s stream)

    def uniform(length: int) -> list[int]:
        return rng.randint(int(length * ratio), length + 1, size=n).tolist()

    return uniform(isl), uniform(osl)


def plan(isl: int, osl: int, concurrency: int, measured: date, ratio: float = RANGE_RATIO,
         seed: int = SEED) -> Load:
    """The load of one point: C = `concurrency`, run on `measured` (which client version sent it)."""
    if concurrency < 1 or isl < 1 or osl < 1:
        raise ConfigError(f"inferencex: concurrency, isl and osl must be >= 1, got {concurrency}, {isl}, {osl}")
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"inferencex: --random-range-ratio {ratio}: expected a number in [0, 1]")
    ins, outs = lengths(isl, osl, PROMPTS_PER_USER * concurrency, ratio, seed)
    bench = tuple(Request(f"r{i}", 0.0, a, b, ignore_eos=True) for i, (a, b) in enumerate(zip(ins, outs, strict=True)))
    n_before = WARMUPS_PER_USER * concurrency if measured >= WARMUPS_FROM else 1
    before = tuple(Request(f"w{i}", 0.0, ins[0], outs[0], ignore_eos=True) for i in range(n_before))
    return Load(concurrency, before, bench)


def run(load: Load, config: Any, policy: str, cost: Any, server: Any = None) -> tuple[Any, np.ndarray]:
    """The warm-up (or test request) alone for its end; then both in one run, the benchmark sent when the
    warm-up's last response is back (nothing else arrives before it ends, so its steps are the same)."""
    from servesim.clients import engine_server

    simulate = engine_server(policy, cost, server)
    cfg = replace(config, max_concurrency=load.concurrency)
    t = simulate(list(load.before), cfg).timelines
    start = float(np.nanmax(np.where(np.isnan(t.finish_time), t.arrival_time, t.finish_time)))
    requests = [*load.before, *(replace(r, arrival_time=start) for r in load.benchmark)]
    result = simulate(requests, cfg)
    return result, np.array([r.request_id.startswith("r") for r in requests])


def means(result: Any, measured: np.ndarray) -> dict[str, float]:
    """Its means (vllm bench serve's `calculate_metrics`) under validate's metric names."""
    from servesim.clients import vllm_bench

    return vllm_bench.means(result, measured)
