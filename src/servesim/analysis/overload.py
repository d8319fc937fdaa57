"""Is the run stable? When arrivals outpace service the backlog grows without bound, and tail latencies measure
only how long the run lasted. This says so, with the evidence that fired, instead of reporting them quietly.

The window is the arrival window (first to last arrival), where load is offered; its second half is the steady
part (the first is left to fill the running set and the pool). Over the steady part (docs/metrics.md, "Overload"):
- arrivals_outpace: arrivals > RATE_MARGIN (1.05) x completions (both counted in the part), and by more than
  chance: arrivals - completions >= CHANCE (2) x sqrt(arrivals), twice a Poisson count's standard deviation (a
  10 % overload then shows once the part holds ~500 arrivals, a 50 % one from ~40);
- in_system_growth: requests in the system (arrived and not finished: running + waiting, with those that arrived
  during the step in progress) grew by at least max(2, half the requests that arrived in the part and did not
  complete in it), read at READINGS (1001) evenly spaced times from its start to its end: by their least-squares
  trend times the part's length (at most the range they covered), or from the first reading to the last (a late
  burst barely tilts a line fitted over a long calm part);
- queue_growth: the waiting queue (the step in progress's `num_waiting_after`, plus the requests that arrived
  since it started) grew by as much, read the same way: seats, KV or the token budget hold the backlog back;
- tpot_inflation: from the part's first half to its second (the steps overlapping each) the batch (requests per
  step) grew by at least 10 % and TPOT (the mean step time: each running request gets a token a step) by at least
  half as much, relatively: the bigger batch costs its time, so the engine is at its compute limit;
- budget_full: at least half the steps overlapping the part spent at least 95 % of the token budget
  (max_num_batched_tokens): the engine is at its prefill limit, whatever the step time does;
- kv_full: the KV pool is bounded and, in at least half the steps overlapping the part, at most 5 % of its usable
  blocks were free after the schedule.
OVERLOADED when arrivals_outpace AND in_system_growth AND the engine is saturated: queue_growth, tpot_inflation,
budget_full or kv_full. A run that is only filling its running set (a short run, or one whose requests each take a
while) also completes fewer than arrive and grows its running set; but its queue holds none of it, its bigger batch
costs no more time a step, and its budget and its pool have room: it reads stable. `Overload.evidence` names every
test that passed, in this order (on a stable run too), and `sentence()` says what each showed, with its numbers.
The window's own rates and waiting queue (`arrival_rate`, `completion_rate`, `queue_*`) are reported as before.
With fewer than MIN_ARRIVALS arrivals in the window there is no rate to speak of, and the result says so instead
of calling the run stable.

Warm-up and cool-down (`--warmup-s`, `--cooldown-s`) shrink the window to the arrivals the metrics keep: an
overloaded burst at the end, or a cold start, is then left out of the verdict as it is of the latencies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from servesim.analysis.breakdown import step_log
from servesim.analysis.words import number
from servesim.engine.result import SimResult

RATE_MARGIN = 1.05  # arrivals over completions in the steady part
CHANCE = 2.0  # ... and their difference at least CHANCE x sqrt(arrivals): twice a Poisson count's deviation
EXCESS_HELD = 0.5  # the share of the part's excess arrivals the system (or its queue) must have gained
MIN_ARRIVALS = 10
READINGS = 1001  # the steady part's counts are read at this many evenly spaced times, its start and end included
BATCH_GROWTH = 1.10  # tpot_inflation: the batch grew by at least 10 %
TPOT_SHARE = 0.5  # ... and TPOT by at least half as much, relatively
BUDGET_SPENT = 0.95  # budget_full: steps that spent at least 95 % of max_num_batched_tokens, half the steps
KV_FREE = 0.05  # kv_full: at most 5 % of usable blocks free in at least half the steps
EVIDENCE = ("arrivals_outpace", "in_system_growth", "queue_growth", "tpot_inflation", "budget_full", "kv_full")
SATURATION = ("queue_growth", "tpot_inflation", "budget_full", "kv_full")  # one: the engine serves no faster


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
    # the steady part: the window's second half
    steady: tuple[float, float] = (0.0, 0.0)  # seconds
    steady_arrivals: int = 0  # arriving after its start, up to its end
    steady_completions: int = 0  # completing after its start, up to its end
    in_system_start: int = 0  # requests arrived and not finished at its start
    in_system_end: int = 0  # ... at its end
    in_system_slope: float = 0.0  # requests per second, least squares over its READINGS
    steady_queue_start: int = 0  # waiting at its start (with the arrivals during the step in progress)
    steady_queue_end: int = 0  # ... at its end
    batch: tuple[float, float] = (0.0, 0.0)  # mean requests per step over the steps overlapping each half
    tpot: tuple[float, float] = (0.0, 0.0)  # mean step time (s) over the steps overlapping each half
    budget_full: float = 0.0  # the share of its steps that spent at least 95 % of the token budget
    kv_full: float | None = None  # the share of its steps with at most 5 % of usable KV blocks free after the
    # schedule; None: an unbounded pool
    evidence: tuple[str, ...] = ()  # the names in EVIDENCE that fired, in that order

    @property
    def steady_arrival_rate(self) -> float:
        span = self.steady[1] - self.steady[0]
        return self.steady_arrivals / span if span > 0 else 0.0

    @property
    def steady_completion_rate(self) -> float:
        span = self.steady[1] - self.steady[0]
        return self.steady_completions / span if span > 0 else 0.0

    def sentence(self) -> str:
        t0, t1 = (t * 1000 for t in self.window)
        if t1 <= t0:
            return f"All requests arrived at once ({number(t0)} ms): a closed batch, with no arrival rate to outpace."
        if self.arrivals < MIN_ARRIVALS:
            return (f"Too few arrivals to judge the queue's stability ({self.arrivals} over "
                    f"{number(t0)}-{number(t1)} ms; it takes {MIN_ARRIVALS}).")
        s0, s1 = (t * 1000 for t in self.steady)
        figures = (f"requests arrived at {number(self.arrival_rate)} req/s and completed at "
                   f"{number(self.completion_rate)} req/s while they arrived ({number(t0)}-{number(t1)} ms); "
                   f"the waiting queue went from {self.queue_start} to {self.queue_end} "
                   f"(trend {number(self.queue_slope, sign=True)} req/s). Over the steady part, the window's second "
                   f"half ({number(s0)}-{number(s1)} ms), {self.steady_arrivals} arrived and "
                   f"{self.steady_completions} completed ({number(self.steady_arrival_rate)} and "
                   f"{number(self.steady_completion_rate)} req/s), and requests in the system (running + waiting) "
                   f"went from {self.in_system_start} to {self.in_system_end} "
                   f"(trend {number(self.in_system_slope, sign=True)} req/s)")
        fired = "; ".join(self._evidence_words())
        if self.overloaded:
            return (f"OVERLOADED: {figures}. Evidence: {fired}. The backlog grows without bound, so tail latencies "
                    "grow with the run's length: they describe this run, not a steady state.")
        if "arrivals_outpace" in self.evidence and "in_system_growth" in self.evidence:
            return (f"Stable: {figures}. Arrivals outpaced completions and requests in the system grew, but the "
                    "engine is not saturated (no queue growth, no TPOT inflation with the batch, neither the token "
                    "budget nor KV pinned full): the running set is filling.")
        a, c = self.steady_arrivals, self.steady_completions
        if a > RATE_MARGIN * c and "arrivals_outpace" not in self.evidence:
            return (f"Stable: {figures}. Arrivals outpaced completions by more than {number(100 * (RATE_MARGIN - 1))} "
                    f"%, but by {a - c}, within chance (under {number(CHANCE)} x sqrt({a}) = "
                    f"{number(CHANCE * np.sqrt(a))}): too few to tell a backlog from noise.")
        return f"Stable: {figures}."

    def _evidence_words(self) -> list[str]:
        """What each fired piece of evidence shows, in plain words with its numbers."""
        words = {
            "arrivals_outpace": f"arrivals outpaced completions by more than {number(100 * (RATE_MARGIN - 1))} % "
                                f"and by more than chance ({self.steady_arrivals - self.steady_completions} >= "
                                f"{number(CHANCE)} x sqrt({self.steady_arrivals}))",
            "in_system_growth": "requests in the system grew by at least half of those that arrived and did not "
                                "complete",
            "queue_growth": f"the waiting queue grew by as much ({self.steady_queue_start} to "
                            f"{self.steady_queue_end})",
            "tpot_inflation": f"TPOT inflated with the batch ({number(self.tpot[0] * 1000)} to "
                              f"{number(self.tpot[1] * 1000)} ms a step as the batch grew from "
                              f"{number(self.batch[0])} to {number(self.batch[1])})",
            "budget_full": f"the token budget was pinned full ({number(100 * self.budget_full)} % of the steps "
                           f"spent at least {number(100 * BUDGET_SPENT)} % of it)",
            "kv_full": f"the KV pool was pinned full ({number(100 * (self.kv_full or 0.0))} % of the steps had at "
                       f"most {number(100 * KV_FREE)} % of its blocks free)",
        }
        return [words[name] for name in self.evidence]


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
    steps = _Steps(log.start_time, log.duration, log.num_waiting_after)
    # the steps that start in the window (steps run in order: a slice, no copies of a long run's columns)
    keep = slice(int(np.searchsorted(steps.start, t0, side="left")), int(np.searchsorted(steps.start, t1, "right")))
    end, q = steps.end[keep], steps.waiting[keep].astype(float)
    q0, q1 = (int(q[0]), int(q[-1])) if len(q) else (0, 0)
    if span <= 0 or arrival.size < MIN_ARRIVALS:
        return Overload(False, 0.0, 0.0, 0.0, q0, q1, (t0, t1), int(arrival.size))
    arrival_rate = (arrival.size - 1) / span  # n arrivals make n - 1 intervals
    completion_rate = float(((finish >= t0) & (finish <= t1)).sum()) / span
    slope = trend(end, q) if len(end) > 1 and np.ptp(end) > 0 else 0.0
    whole = Overload(False, arrival_rate, completion_rate, slope, q0, q1, (t0, t1), int(arrival.size))
    entered = arrival if not (warmup or cooldown or result.rejected) else _entered(result)
    return _steady_part(whole, result, log, steps, entered, finish)


class _Steps:
    """The step log's columns the verdict reads more than once, expanded once."""

    __slots__ = ("start", "end", "waiting")

    def __init__(self, start: np.ndarray, duration: np.ndarray, waiting: np.ndarray) -> None:
        self.start, self.end, self.waiting = start, start + duration, waiting


def _steady_part(whole: Overload, result: SimResult, log, steps: _Steps, entered: np.ndarray,
                 finish: np.ndarray) -> Overload:
    """`whole` with the steady part's figures, its evidence and the verdict (module docstring). `entered`: the
    arrival times of the requests that entered the engine; `finish`: the finish times (both in any order)."""
    t0, t1 = whole.window
    tm = t0 + (t1 - t0) / 2
    arrived = int(np.count_nonzero((entered > tm) & (entered <= t1)))
    completed = int(np.count_nonzero((finish > tm) & (finish <= t1)))
    start, end = steps.start, steps.end
    # the steps the part overlaps (one in progress at either edge included): i0 to i1 - 1
    i0, i1 = int(np.searchsorted(end, tm, side="right")), int(np.searchsorted(start, t1, side="right"))
    at = np.linspace(tm, t1, READINGS)  # when the counts are read
    arrived_by = count_le(entered, at)
    system = (arrived_by - count_le(finish, at)).astype(float)
    # waiting: the queue of the step in progress (after its schedule), and what arrived since it started
    k = np.searchsorted(start, at, side="left") - 1  # the step that started before (-1: none yet)
    waiting = arrived_by.astype(float)
    began = k >= 0
    waiting[began] += steps.waiting[k[began]] - count_le(entered, start[k[began]])
    need = max(2.0, EXCESS_HELD * (arrived - completed))
    fired = {"arrivals_outpace": (arrived > RATE_MARGIN * completed
                                  and arrived - completed >= CHANCE * np.sqrt(arrived)),
             "in_system_growth": growth(at, system, tm, t1) >= need,
             "queue_growth": growth(at, waiting, tm, t1) >= need}
    t3 = tm + (t1 - tm) / 2  # the part's halves: the steps overlapping [tm, t3), and [t3, t1]
    halves = ((i0, max(i0, int(np.searchsorted(start, t3, side="left")))),
              (min(i1, int(np.searchsorted(end, t3, side="right"))), i1))
    batch = tuple(_runs_mean(log, "num_scheduled", *half) for half in halves)
    tpot = tuple(float(log.duration[lo:hi].mean()) if hi > lo else 0.0 for lo, hi in halves)
    fired["tpot_inflation"] = (batch[1] >= BATCH_GROWTH * batch[0] > 0 and tpot[0] > 0
                               and tpot[1] / tpot[0] - 1 >= TPOT_SHARE * (batch[1] / batch[0] - 1))
    budget = result.config.max_num_batched_tokens
    budget_full = _runs_share(log, "num_tokens", i0, i1, BUDGET_SPENT * budget) if budget else 0.0
    fired["budget_full"] = budget_full >= 0.5
    kv_full = None
    if log.usable_blocks:
        free = log.free_blocks_after_schedule[i0:i1]
        kv_full = float(np.count_nonzero(free <= KV_FREE * log.usable_blocks)) / free.size if free.size else 0.0
        fired["kv_full"] = kv_full >= 0.5
    overloaded = (fired["arrivals_outpace"] and fired["in_system_growth"]
                  and any(fired.get(name) for name in SATURATION))
    return replace(whole, overloaded=bool(overloaded), steady=(tm, t1), steady_arrivals=arrived,
                   steady_completions=completed, in_system_start=int(system[0]), in_system_end=int(system[-1]),
                   in_system_slope=trend(at, system), steady_queue_start=int(waiting[0]),
                   steady_queue_end=int(waiting[-1]), batch=batch, tpot=tpot, budget_full=budget_full,
                   kv_full=kv_full, evidence=tuple(name for name in EVIDENCE if fired.get(name)))


def count_le(values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How many of `values` (in any order) are <= each time of the sorted `at`: each value counts from the first
    time it is <= (`np.searchsorted(np.sort(values), at, "right")` without the sort)."""
    first = np.searchsorted(at, values, side="left")
    return np.cumsum(np.bincount(first, minlength=len(at) + 1))[:len(at)]


def _entered(result: SimResult) -> np.ndarray:
    """Every arrival time less the requests rejected on arrival (they never enter the engine)."""
    t = result.timelines
    keep = np.ones(len(t), bool)
    if result.rejected:
        rejected = set(result.rejected)
        unfinished = np.flatnonzero(~t.finished)  # the rejected are among them
        keep[unfinished[[t.ids[i] in rejected for i in unfinished]]] = False
    return t.arrival_time[keep]


def growth(t: np.ndarray, y: np.ndarray, t0: float, t1: float) -> float:
    """What y gained over [t0, t1]: its least-squares trend times the span (at most the range y covered: points
    clustered on either side of a jump can tilt a line far more), or its last value less its first, whichever is
    more (a late burst barely tilts a line fitted over a long calm stretch)."""
    slope = trend(t, y) if np.ptp(t) > 0 else 0.0
    return max(min(slope * (t1 - t0), float(np.ptp(y))), float(y[-1] - y[0]))


def _runs_of(log, name: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """A run column over steps lo to hi - 1 without expanding it: (each run's value, its steps in the range)."""
    values, lengths = log.runs(name)
    ends = np.cumsum(lengths)
    r0, r1 = int(np.searchsorted(ends, lo, side="right")), int(np.searchsorted(ends - lengths, hi, side="left"))
    ends = ends[r0:r1]
    return values[r0:r1], np.minimum(ends, hi) - np.maximum(ends - lengths[r0:r1], lo)


def _runs_mean(log, name: str, lo: int, hi: int) -> float:
    """A run column's mean over steps lo to hi - 1 (0 without steps)."""
    values, counts = _runs_of(log, name, lo, hi)
    total = int(counts.sum())
    return float(np.dot(values.astype(np.float64), counts)) / total if total else 0.0


def _runs_share(log, name: str, lo: int, hi: int, threshold: float) -> float:
    """The share of steps lo to hi - 1 whose value of a run column is at least `threshold` (0 without steps)."""
    values, counts = _runs_of(log, name, lo, hi)
    total = int(counts.sum())
    return float(counts[values >= threshold].sum()) / total if total else 0.0


def trend(t: np.ndarray, q: np.ndarray) -> float:
    """The least-squares slope of q over t (`np.polyfit(t, q, 1)[0]` up to rounding) in closed form, on centred
    times: polyfit's SVD takes ~0.02 s over a run's 350,000 steps, this ~1 ms."""
    dt = t - t.mean()
    return float(np.dot(dt, q - q.mean()) / np.dot(dt, dt))
