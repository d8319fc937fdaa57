"""Client-side metrics with `vllm bench serve`'s definitions, names and output layout.

Definitions (vllm/benchmarks/serve.py, `calculate_metrics`), over completed requests:
- TTFT: first token time - arrival time.
- TPOT: (E2EL - TTFT) / (output_len - 1), one value per request with output_len > 1.
- ITL: every gap between consecutive tokens of a request, all requests pooled into one list.
- E2EL: finish time - arrival time.
- Throughputs: completed requests, output tokens, and input + output tokens, each divided by the duration.
- Goodput: requests meeting every given SLO (value <= target; TPOT counts as 0 for output_len 1) / duration.
- Statistics: numpy mean, median, std (population) and percentiles (linear interpolation); an empty list counts
  as [0], as vLLM's `np.mean(x or 0)` does.

Duration: vLLM times from sending the first request to the last completion; a simulated client sends each
request at its arrival time, so the duration is the first (kept) arrival to the last (kept) finish, which is
`SimResult.makespan` when nothing is excluded.

Also vLLM's peaks: output tokens in the fullest 1-second bucket, and the most requests in flight at once.

Everything is computed with numpy over flat arrays built once from the timelines (no per-token objects), so it is
the same at every record level.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servesim.analysis.weighted import moments, values_at_ranks
from servesim.engine.result import SimResult
from servesim.engine.speculation import SpecDecodingStats
from servesim.errors import ConfigError

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
METRICS = ("ttft", "tpot", "itl", "e2el")  # vLLM's --percentile-metrics names
HEADERS = {  # vLLM's section headers and short names
    "ttft": ("Time to First Token", "TTFT"),
    "tpot": ("Time per Output Token (excl. 1st token)", "TPOT"),
    "itl": ("Inter-token Latency", "ITL"),
    "e2el": ("End-to-end Latency", "E2EL"),
}


@dataclass(frozen=True, slots=True)
class Summary:
    """One metric's statistics (milliseconds for latencies)."""

    mean: float
    median: float
    std: float
    percentiles: tuple[tuple[float, float], ...]  # (p, value)
    count: int  # values behind the statistics (0: all are vLLM's placeholder 0)

    @classmethod
    def of(cls, seconds: np.ndarray, percentiles: Sequence[float], scale: float = 1000.0,
           weights: np.ndarray | None = None) -> Summary:
        """Statistics of `seconds`, then x `scale` (ms by default; scale 1 for counts), as vLLM does
        (`np.mean(ttfts) * 1000`). One partition serves every percentile: millions of ITLs cost ~0.05 s.
        `weights` (whole counts) stand for repeating each value that many times, with the same results as numpy
        on the repeated data: how a run's pooled ITLs are summarised without materialising them."""
        if weights is not None:
            return cls._weighted(seconds, weights, percentiles, scale)
        x = seconds if seconds.size else np.zeros(1)  # NOTE: vLLM reports 0 for an empty list
        ps = [float(p) for p in percentiles]
        # the median is the linear 50th percentile (np.median's value up to the last bit): one partition for all
        values = (np.percentile(x, [50.0, *ps]) * scale).tolist()
        return cls(float(np.mean(x)) * scale, values[0], float(np.std(x)) * scale,
                   tuple(zip(ps, values[1:])), int(seconds.size))

    @classmethod
    def _weighted(cls, x: np.ndarray, w: np.ndarray, percentiles: Sequence[float], scale: float) -> Summary:
        n = int(w.sum(dtype=np.int64))
        ps = [float(p) for p in percentiles]
        if n == 0:
            return cls.of(np.zeros(0), ps, scale)
        # numpy's linear method: rank p/100 x (n - 1), interpolated between its neighbours
        rank = np.array([50.0, *ps]) / 100 * (n - 1)
        lo, hi = np.floor(rank), np.ceil(rank)
        wanted = sorted({int(r) for r in (*lo.tolist(), *hi.tolist())})
        at = dict(zip(wanted, values_at_ranks(x, w, wanted)))
        vlo = np.array([at[int(r)] for r in lo], dtype=np.float64)
        vhi = np.array([at[int(r)] for r in hi], dtype=np.float64)
        values = ((vlo + (vhi - vlo) * (rank - lo)) * scale).tolist()
        mean, std = moments(x, w, n)
        return cls(mean * scale, values[0], std * scale, tuple(zip(ps, values[1:])), n)

    def percentile(self, p: float) -> float:
        for q, v in self.percentiles:
            if q == p:
                return v
        raise KeyError(f"percentile {p} was not computed (have {[q for q, _ in self.percentiles]})")


@dataclass(frozen=True, slots=True)
class RequestArrays:
    """Per-request values as numpy arrays (seconds), completed requests only, in workload order."""

    ids: tuple[str, ...]
    arrival: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    ttft: np.ndarray
    e2el: np.ndarray
    tpot: np.ndarray  # NaN where output_len == 1
    itl: np.ndarray  # the distinct gaps between consecutive tokens of one request, all requests pooled
    itl_weights: np.ndarray  # how many times each gap occurs (a step's gap is shared by every request decoding)
    finish: np.ndarray
    step_ends: np.ndarray  # end of every step, seconds
    step_tokens: np.ndarray  # output tokens sampled in each step by the kept requests (for the peak throughput)

    def pooled_itl(self) -> np.ndarray:
        """Every gap between consecutive tokens of one request, all requests pooled (vLLM's ITL list), sorted."""
        return np.sort(np.repeat(self.itl, self.itl_weights))


@dataclass(frozen=True, slots=True)
class BenchmarkMetrics:
    completed: int
    failed: int  # requests that never finished (0 in a finished simulation)
    total_input: int
    total_output: int
    duration: float  # seconds
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    request_goodput: float | None  # None without SLOs, as vLLM writes it
    goodput: dict[str, float]  # the SLOs in ms, e.g. {"ttft": 300.0}
    max_output_tokens_per_s: float = 0.0  # most output tokens in one 1-second bucket from the first arrival
    max_concurrent_requests: int = 0  # most requests between arrival and finish at one instant
    summaries: dict[str, Summary] = field(default_factory=dict)  # "ttft", "tpot", "itl", "e2el"
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES

    def __getitem__(self, metric: str) -> Summary:
        return self.summaries[metric]


def _percentile_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def request_arrays(result: SimResult, keep: np.ndarray | None = None) -> RequestArrays:
    """Flat arrays of the completed requests' latencies (optionally only where `keep` is true).

    Tokens come as runs of consecutive steps (`RequestTimeline.token_steps`): inside a run the gaps are the
    differences of consecutive step ends, counted once per request decoding in that step; between runs (a
    preemption, a step the request sat out) the gap is one value. No per-token array is built.
    """
    t = result.timelines
    done = t.finished & (t.run_offsets[1:] > t.run_offsets[:-1])
    if keep is not None:
        done &= keep
    idx = np.flatnonzero(done)
    m = len(idx)
    arrival, finish = t.arrival_time[idx], t.finish_time[idx]
    out, prompt = t.output_len[idx], t.prompt_len[idx]
    ends = t.clock.ends if m else np.zeros(0)
    # the selected requests' runs, in order: (first step, count) pairs
    runs, offsets = t.step_runs()
    lo, hi = offsets[idx] // 2, offsets[idx + 1] // 2
    nruns = hi - lo
    pairs = runs.reshape(-1, 2)
    if m == len(t):
        sel_runs = pairs
    else:
        sel_runs = pairs[np.repeat(lo - np.cumsum(nruns) + nruns, nruns) + np.arange(int(nruns.sum()))]
    start, count = sel_runs[:, 0], sel_runs[:, 1]
    first_run = np.cumsum(nruns) - nruns
    first = ends[start[first_run]] if m else np.zeros(0)
    # inside runs: the gap ending at step i+1 counts once per run holding steps i and i+1 (difference arrays,
    # int32: a count per step is at most max_num_seqs)
    long = count > 1
    inside = max(ends.size - 1, 0)
    weights = _per_step(ends.size, start[long], start[long] + count[long] - 1)
    # between runs of one request: one gap each
    later = np.ones(start.size, bool)
    later[first_run] = False
    prev = np.flatnonzero(later) - 1
    between = ends[start[later]] - ends[start[prev] + count[prev] - 1]
    itl = np.empty(inside + between.size)  # written in place: ~18 M steps leave no temporaries behind
    np.subtract(ends[1:], ends[:-1], out=itl[:inside])
    itl[inside:] = between
    itl_w = np.ones(inside + between.size, np.int32)
    itl_w[:inside] = weights[:inside]
    del weights
    step_tokens = _per_step(ends.size, start, start + count)
    ttft, e2el = first - arrival, finish - arrival
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out > 1, (e2el - ttft) / np.maximum(out - 1, 1), np.nan)
    ids = t.ids if m == len(t) else [t.ids[i] for i in idx.tolist()]
    return RequestArrays(tuple(ids), arrival, prompt, out, ttft, e2el, tpot, itl, itl_w, finish, ends, step_tokens)


def _per_step(num_steps: int, first: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """How many of the runs [first, stop) hold each step: a difference array summed in place, int32 (a count per
    step is at most max_num_seqs), 4 bytes a step and no 8-byte temporaries (a million requests: ~18 M steps)."""
    counts = np.zeros(num_steps + 1, np.int32)
    np.add.at(counts, first, 1)
    np.add.at(counts, stop, -1)
    return np.cumsum(counts, out=counts)[:num_steps]


def peak_output_tokens_per_s(step_ends: np.ndarray, step_tokens: np.ndarray, start: float) -> float:
    """vLLM's "Peak output token throughput": output tokens counted in 1-second buckets from `start` (the first
    request sent; here the first kept arrival), bucket = int(t - start); the fullest bucket."""
    if not step_tokens.any():
        return 0.0
    # step ends increase, so each bucket is a run of steps: sums per run, whatever the span (no array per second)
    buckets = np.floor(step_ends - start)
    starts = np.flatnonzero(np.concatenate(([True], buckets[1:] != buckets[:-1])))
    return float(np.add.reduceat(np.asarray(step_tokens, dtype=np.float64), starts).max())


def peak_concurrency(arrival: np.ndarray, finish: np.ndarray) -> int:
    """vLLM's "Peak concurrent requests": a sweep over half-open [arrival, finish) intervals, so a request that
    finishes when another arrives does not overlap it. Queued requests count: the client has sent them."""
    if not arrival.size:
        return 0
    times = np.concatenate([arrival, finish])
    delta = np.concatenate([np.ones(arrival.size, np.int64), -np.ones(finish.size, np.int64)])
    order = np.lexsort((delta, times))  # by time, departures (-1) before arrivals (+1)
    return int(np.cumsum(delta[order]).max())


def window(result: SimResult, warmup: float = 0.0, cooldown: float = 0.0) -> np.ndarray:
    """Requests kept after excluding those arriving in the first `warmup` or last `cooldown` seconds of arrivals."""
    if warmup < 0 or cooldown < 0:
        raise ConfigError(f"warm-up and cool-down must be >= 0 seconds, got {warmup} and {cooldown}")
    arrival = result.timelines.arrival_time
    if not arrival.size:
        return np.zeros(0, bool)
    keep = (arrival >= arrival.min() + warmup) & (arrival <= arrival.max() - cooldown)
    if not keep.any():
        raise ConfigError(f"warm-up {warmup} s and cool-down {cooldown} s exclude every request "
                          f"(arrivals span {arrival.max() - arrival.min():.6g} s)")
    return keep


def parse_goodput(specs: Iterable[str]) -> dict[str, float]:
    """`ttft:300 tpot:50` (or repeated / comma-separated) -> {"ttft": 300.0, "tpot": 50.0}, targets in ms."""
    slos: dict[str, float] = {}
    for item in (s for spec in specs for s in spec.replace(",", " ").split()):
        name, sep, value = item.partition(":")
        if not sep or name not in ("ttft", "tpot", "e2el"):
            raise ConfigError(f"--goodput {item!r}: expected NAME:MS with NAME one of ttft, tpot, e2el")
        try:
            ms = float(value)
        except ValueError:
            raise ConfigError(f"--goodput {item!r}: {value!r} is not a number of milliseconds") from None
        if ms < 0:
            raise ConfigError(f"--goodput {item!r}: the target must be >= 0 ms")
        slos[name] = ms
    return slos


def parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        ps = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise ConfigError(f"--percentiles {text!r}: expected numbers separated by commas, e.g. 50,90,99") from None
    if not ps or any(not 0 < p <= 100 for p in ps):
        raise ConfigError(f"--percentiles {text!r}: each must be in (0, 100]")
    return ps


def good_mask(a: RequestArrays, goodput: dict[str, float]) -> np.ndarray:
    """Requests meeting every target (vLLM: value <= target; a one-token output's TPOT counts as 0)."""
    good = np.ones(a.ttft.size, bool)
    values = {"ttft": a.ttft, "tpot": np.nan_to_num(a.tpot, nan=0.0), "e2el": a.e2el}
    for name, ms in goodput.items():
        good &= values[name] <= ms / 1000
    return good


def benchmark_metrics(
    result: SimResult,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput: dict[str, float] | None = None,
    warmup: float = 0.0,
    cooldown: float = 0.0,
    keep: np.ndarray | None = None,
) -> BenchmarkMetrics:
    """`vllm bench serve`'s metrics of a simulated run (see the module docstring for every definition). `keep`:
    the requests the client measures (workload order; its warm-up requests left out)."""
    if warmup or cooldown:
        keep = window(result, warmup, cooldown) & (True if keep is None else keep)
    a = request_arrays(result, keep)
    total = len(result.timelines) if keep is None else int(keep.sum())
    duration = float(a.finish.max() - a.arrival.min()) if a.finish.size else 0.0
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    total_in, total_out = int(a.prompt_len.sum()), int(a.output_len.sum())
    slos = dict(goodput or {})
    summaries = {
        "ttft": Summary.of(a.ttft, percentiles),
        "tpot": Summary.of(a.tpot[~np.isnan(a.tpot)], percentiles),
        "itl": Summary.of(a.itl, percentiles, weights=a.itl_weights),
        "e2el": Summary.of(a.e2el, percentiles),
    }
    return BenchmarkMetrics(
        completed=int(a.ttft.size), failed=total - int(a.ttft.size), total_input=total_in, total_output=total_out,
        duration=duration, request_throughput=per_s(a.ttft.size), output_throughput=per_s(total_out),
        total_token_throughput=per_s(total_in + total_out),
        request_goodput=per_s(int(good_mask(a, slos).sum())) if slos else None, goodput=slos,
        max_output_tokens_per_s=peak_output_tokens_per_s(a.step_ends, a.step_tokens,
                                                         float(a.arrival.min(initial=0.0))),
        max_concurrent_requests=peak_concurrency(a.arrival, a.finish),
        summaries=summaries, percentiles=tuple(float(p) for p in percentiles),
    )


def to_json(m: BenchmarkMetrics, metrics: Sequence[str] = METRICS) -> dict[str, float | int | None]:
    """vLLM's result keys: duration, completed, ..., mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms, ..."""
    out: dict[str, float | int | None] = {
        "duration": m.duration, "completed": m.completed, "failed": m.failed,
        "total_input_tokens": m.total_input, "total_output_tokens": m.total_output,
        "request_throughput": m.request_throughput, "request_goodput": m.request_goodput,
        "output_throughput": m.output_throughput, "total_token_throughput": m.total_token_throughput,
        "max_output_tokens_per_s": m.max_output_tokens_per_s, "max_concurrent_requests": m.max_concurrent_requests,
    }
    for name in metrics:
        s = m.summaries[name]
        out[f"mean_{name}_ms"], out[f"median_{name}_ms"], out[f"std_{name}_ms"] = s.mean, s.median, s.std
        for p, v in s.percentiles:
            out[f"p{_percentile_word(p)}_{name}_ms"] = v
    return out


def _line(label: str, value: object, fmt: str = "") -> str:
    return f"{label:<40} {value:<10{fmt}}"  # vLLM's "{:<40} {:<10}": trailing spaces kept, so `diff` lines up


def format_result(m: BenchmarkMetrics, metrics: Sequence[str] = METRICS, request_rate: float | None = None,
                  max_concurrency: int | None = None, spec: SpecDecodingStats | None = None) -> str:
    """The "Serving Benchmark Result" block, line for line as `vllm bench serve` prints it (vllm/benchmarks/
    serve.py): the same labels, order, widths and formats. `request_rate` (a workload generated at a rate) and
    `max_concurrency` (a client-side cap) add vLLM's lines for them when given; servesim's client is open-loop.
    `spec`: its "Speculative Decoding" block (vLLM 0.33 reads the server's spec_decode counters)."""
    lines = [f"{' Serving Benchmark Result ':=^50}",
             _line("Successful requests:", m.completed),
             _line("Failed requests:", m.failed)]
    if max_concurrency is not None:
        lines.append(_line("Maximum request concurrency:", max_concurrency))
    if request_rate is not None and request_rate != float("inf"):
        lines.append(_line("Request rate configured (RPS):", request_rate, ".2f"))
    lines += [_line("Benchmark duration (s):", m.duration, ".2f"),
              _line("Total input tokens:", m.total_input),
              _line("Total generated tokens:", m.total_output),
              _line("Request throughput (req/s):", m.request_throughput, ".2f")]
    if m.request_goodput is not None:
        lines.append(_line("Request goodput (req/s):", m.request_goodput, ".2f"))
    lines += [_line("Output token throughput (tok/s):", m.output_throughput, ".2f"),
              _line("Peak output token throughput (tok/s):", m.max_output_tokens_per_s, ".2f"),
              _line("Peak concurrent requests:", m.max_concurrent_requests, ".2f"),  # NOTE: vLLM prints 2 decimals
              _line("Total token throughput (tok/s):", m.total_token_throughput, ".2f")]
    for name in metrics:
        header, short = HEADERS[name]
        s = m.summaries[name]
        lines += [f"{header:-^50}", _line(f"Mean {short} (ms):", s.mean, ".2f"),
                  _line(f"Median {short} (ms):", s.median, ".2f")]
        lines += [_line(f"P{_percentile_word(p)} {short} (ms):", v, ".2f") for p, v in s.percentiles]
    if spec is not None and spec.num_draft_tokens:
        lines += [f"{'Speculative Decoding':-^50}", _line("Acceptance rate (%):", spec.acceptance_rate * 100, ".2f"),
                  _line("Acceptance length:", spec.acceptance_length, ".2f"), _line("Drafts:", spec.num_drafts),
                  _line("Draft tokens:", spec.num_draft_tokens), _line("Accepted tokens:", spec.num_accepted_tokens),
                  "Per-position acceptance (%):"]
        lines += [_line(f"  Position {i}:", rate * 100, ".2f")
                  for i, rate in enumerate(spec.per_position_acceptance_rates)]
    lines.append("=" * 50)
    return "\n".join(lines)


def spec_decode_json(spec: SpecDecodingStats | None) -> dict[str, Any]:
    """`vllm bench serve`'s result-file keys of the "Speculative Decoding" block (none without drafts)."""
    if spec is None or not spec.num_draft_tokens:
        return {}
    return {"spec_decode_acceptance_rate": spec.acceptance_rate * 100,
            "spec_decode_acceptance_length": spec.acceptance_length, "spec_decode_num_drafts": spec.num_drafts,
            "spec_decode_draft_tokens": spec.num_draft_tokens,
            "spec_decode_accepted_tokens": spec.num_accepted_tokens,
            "spec_decode_per_position_acceptance_rates": spec.per_position_acceptance_rates}


def parse_metric_names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in METRICS]
    if bad or not names:
        raise ConfigError(f"--percentile-metrics {text!r}: valid names are {', '.join(METRICS)}")
    return names
