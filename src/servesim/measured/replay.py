"""A measured run's requests through servesim: the same lengths in the same order, sent as the client sent them,
and per request the predicted TTFT (queue + prefill), decode time and end-to-end latency beside the measured.

Two ways to send (`sends`):
- "measured" (`servesim diff`): at the run's own send times where the file has them (vLLM's `start_times`,
  taken after `--max-concurrency`'s wait, from which vLLM's TTFT counts; AIPerf's `request_start_ns`), open
  loop: the engine sees what the real one saw, so the per-request differences are the server's alone;
- "client" (`servesim validate`, a prediction): the client's load as it was configured: a capped vllm bench
  serve run or AIPerf `--concurrency` is the closed loop again (its sends follow the predicted completions),
  an open-loop one keeps its sends (its schedule does not depend on the server), and a file without them has
  them drawn again with vllm bench serve's process, seed 0 (`servesim.workloads.synthetic`).
A run recorded without send times is replayed the client's way in both, and says so (`Replay.sends`).

The predicted aggregates are the client's own (`means`): vllm bench serve's (`servesim.analysis.benchmark`:
TTFT, TPOT, token-weighted ITL and E2EL means, output tokens/s) or AIPerf's (per-request means, ITL = (latency -
TTFT) / (OSL - 1), OSLs over first send to last response).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from servesim.measured.run import MeasuredRun


@dataclass(frozen=True, slots=True)
class Replay:
    result: Any  # SimResult
    sends: str  # how the requests were sent: "measured" | "client"
    ttft: np.ndarray  # seconds, per run request (NaN: did not finish)
    e2el: np.ndarray
    queue: np.ndarray  # first scheduled - send
    prefill: np.ndarray  # first token - first scheduled
    means: dict  # the client's aggregates, predicted

    @property
    def decode(self) -> np.ndarray:
        return self.e2el - self.ttft


def replay(run: MeasuredRun, cfg: Any, policy: str, cost: Any, sends: str = "measured") -> Replay:
    from servesim.analysis.breakdown import request_breakdown
    from servesim.clients import aiperf, vllm_bench
    from servesim.engine import simulate
    from servesim.engine.request import Request

    times, cap, how = _sends(run, sends)
    reqs = [Request(f"r{i}", float(t), int(p), int(o))
            for i, (t, p, o) in enumerate(zip(times, run.input_lens, run.output_lens))]
    result = simulate(reqs, replace(cfg, max_concurrency=cap), policy, cost, record="summary")
    tl = result.timelines
    first = tl.first_token_time()
    bd = request_breakdown(result)
    ttft = first - tl.arrival_time
    e2el = np.where(tl.finished, tl.finish_time - tl.arrival_time, np.nan)
    if run.client == "vllm-bench":
        means = vllm_bench.means(result)
    else:
        means = aiperf.means(aiperf.metrics(result, np.ones(len(reqs), bool), streaming=True))
    return Replay(result, how, ttft, e2el, bd.queue, bd.prefill, means)


def _sends(run: MeasuredRun, sends: str) -> tuple[np.ndarray, int | None, str]:
    """(send times, the client's cap, "measured" or "client")."""
    from servesim.workloads.synthetic import RampUp, arrival_times, ramp_up_arrival_times

    n, load = len(run), run.load
    if run.client == "aiperf":
        closed = load.get("concurrency") is not None and load.get("request_rate") is None
        if sends == "client" and closed:
            return np.zeros(n), int(load["concurrency"]), "client"
        return run.send, None, "measured"
    cap = load.get("max_concurrency")
    if run.send is not None and (sends == "measured" or cap is None):
        return run.send, None, "measured"
    rng = np.random.default_rng(0)
    if "ramp_up_strategy" in load:
        ramp = RampUp(load["ramp_up_strategy"], load["ramp_up_start_rps"], load["ramp_up_end_rps"])
        times = ramp_up_arrival_times(n, ramp, load["burstiness"], rng)
    else:
        times = arrival_times(n, load["request_rate"], load["burstiness"], rng)
    return times, cap, "client"
