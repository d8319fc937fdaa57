"""Is the queue stable? When arrivals outpace service the waiting queue grows without bound, and tail latencies
measure only how long the run lasted. This says so, with the evidence, instead of reporting them quietly.

The test looks at the arrival window (first to last arrival), where load is offered:
- arrival rate: arrivals / window length; completion rate: completions inside the window / window length;
- the waiting queue (`num_waiting_after`, vLLM's `num_requests_waiting`): a least-squares line over the steps in
  the window, in requests per second.
OVERLOADED when arrivals outpace completions by more than 10 % AND the queue grew, over the window, by at least
max(2, half the requests that arrived and did not complete in it): by its trend, or from the window's first step
to its last. Both are needed: a short stable run also completes fewer than it admits while it fills its running
set, but its queue holds none of the difference.
With fewer than MIN_ARRIVALS arrivals in the window there is no rate to speak of, and the result says so instead
of calling the run stable.

Warm-up and cool-down (`--warmup-s`, `--cooldown-s`) shrink the window to the arrivals the metrics keep: an
overloaded burst at the end, or a cold start, is then left out of the verdict as it is of the latencies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servesim.analysis.breakdown import step_log
from servesim.analysis.words import number
from servesim.engine.result import SimResult

RATE_MARGIN = 1.10
EXCESS_QUEUED = 0.5
MIN_ARRIVALS = 10


@dataclass(frozen=True, slots=True)
class Overload:
    overloaded: bool
    arrival_rate: float  # req/s over the arrival window
    completion_rate: float  # req/s, completions inside the arrival window
    queue_slope: float  # waiting requests per second, least squares over the window's steps
    queue_start: int  # waiting after the window's first step
    queue_end: int  # waiting after its last step
    window: tuple[float, float]  # seconds
    arrivals: int = 0  # in the window

    def sentence(self) -> str:
        t0, t1 = (t * 1000 for t in self.window)
        if t1 <= t0:
            return f"All requests arrived at once ({number(t0)} ms): a closed batch, with no arrival rate to outpace."
        if self.arrivals < MIN_ARRIVALS:
            return (f"Too few arrivals to judge the queue's stability ({self.arrivals} over "
                    f"{number(t0)}-{number(t1)} ms; it takes {MIN_ARRIVALS}).")
        evidence = (f"requests arrived at {number(self.arrival_rate)} req/s and completed at "
                    f"{number(self.completion_rate)} req/s while they arrived ({number(t0)}-{number(t1)} ms); "
                    f"the waiting queue went from {self.queue_start} to {self.queue_end} "
                    f"(trend {number(self.queue_slope, sign=True)} req/s)")
        if self.overloaded:
            return (f"OVERLOADED: {evidence}. The queue grows without bound, so tail latencies grow with the run's "
                    "length: they describe this run, not a steady state.")
        return f"Stable: {evidence}."


def detect_overload(result: SimResult, warmup: float = 0.0, cooldown: float = 0.0) -> Overload:
    t = result.timelines
    arrival, finish = t.arrival_time, t.finish_time[t.finished]
    if warmup or cooldown:
        from servesim.analysis.benchmark import window

        arrival = arrival[window(result, warmup, cooldown)]
    arrival = np.sort(arrival)
    t0, t1 = (float(arrival[0]), float(arrival[-1])) if arrival.size else (0.0, 0.0)
    span = t1 - t0
    log = step_log(result)
    start = log.start_time
    keep = (start >= t0) & (start <= t1)
    t, q = (start + log.duration)[keep], log.num_waiting_after[keep].astype(float)
    if span <= 0 or len(t) < 2 or arrival.size < MIN_ARRIVALS:
        q0, q1 = (int(q[0]), int(q[-1])) if len(q) else (0, 0)
        return Overload(False, 0.0, 0.0, 0.0, q0, q1, (t0, t1), int(arrival.size))
    arrival_rate = (arrival.size - 1) / span  # n arrivals make n - 1 intervals
    completion_rate = float(((finish >= t0) & (finish <= t1)).sum()) / span
    slope = trend(t, q) if np.ptp(t) > 0 else 0.0
    # NOTE: the trend, or what the queue actually gained: a late burst barely tilts a step-weighted line
    growth = max(slope * span, float(q[-1] - q[0]))
    # the queue must hold at least half the requests that arrived and did not complete in the window (a run that
    # only fills its running set completes fewer than arrive, but its queue holds none of the difference)
    excess = (arrival_rate - completion_rate) * span
    overloaded = (arrival_rate > RATE_MARGIN * completion_rate
                  and growth >= max(2.0, EXCESS_QUEUED * excess))
    return Overload(overloaded, arrival_rate, completion_rate, slope, int(q[0]), int(q[-1]), (t0, t1),
                    int(arrival.size))


def trend(t: np.ndarray, q: np.ndarray) -> float:
    """The least-squares slope of q over t (`np.polyfit(t, q, 1)[0]` up to rounding) in closed form, on centred
    times: polyfit's SVD takes ~0.02 s over a run's 350,000 steps, this ~1 ms."""
    dt = t - t.mean()
    return float(np.dot(dt, q - q.mean()) / np.dot(dt, dt))
