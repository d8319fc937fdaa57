"""Fit the host constants to a `vllm bench serve --save-result --save-detailed` file, by simulating its requests.

Read from the file (vLLM 0.33's keys; servesim's own result file is a superset):

- `input_lens`, `output_lens`, `ttfts` (seconds), `itls` (a list of seconds per request): required, one entry per
  request, in the order vLLM sent them.
- `errors`: optional; a request with a non-empty error (vLLM's failed request: TTFT 0, no ITLs) is left out of
  the simulation and of the comparison.
- `request_rate` (a number or "inf") and `burstiness` (default 1): the arrival process, overridden by the
  command line's; a finite rate with neither is refused.
- `max_concurrency`: null, or a cap with `request_rate` inf: a closed loop, replayed as one (its sends follow
  servesim's completions, as the real ones followed the engine's), compared request by request; its batch stays
  near the cap, which fixes the host time of such a step but not its split, so only `step_host` is fitted.
- `start_times` (each request's send, which newer vLLM writes): an open loop is replayed at them, compared one
  by one. AIPerf's per-request export (`profile_export.jsonl`, `from_aiperf`): `--concurrency` as a closed loop,
  `--request-rate` at its recorded sends.

Assumed: vLLM's file holds no send time per request, so the arrivals are drawn again with `vllm bench serve`'s
process (`servesim.workloads.synthetic.arrival_times`) from the given seed. With rate inf (all at once) or
burstiness inf (a fixed interval) they are exactly vLLM's, and the simulated requests are compared one by one;
otherwise they follow the same process but not the same draws (numpy's `default_rng(seed)`, not vLLM's global
`np.random` state), so the sorted TTFTs and the sorted per-request mean ITLs are compared instead (a Q-Q match).

The fit: `step_host` and `seq_host` (the engine profile's per-step and per-sequence host seconds) minimise the mean
squared log ratio, simulated over measured, of the TTFTs and the mean ITLs. A scan of one scale over both (the
preset's values x 1/30 .. 30) picks the start, Nelder-Mead refines in log space: deterministic, ~150 runs.
A constant whose doubling changes no simulated time is reported as not identifiable (the steps were device-bound
under async scheduling, or every step had the same batch) and keeps the preset's value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from servesim.cost.calibrate_host import HostFit
from servesim.cost.host import EngineProfile
from servesim.cost.roofline import CostParams, Roofline
from servesim.cost.specs import is_finite, is_int, parse_json_input, read_input_text, show
from servesim.errors import ConfigError
from servesim.measured.vllm_result import detailed

REQUIRED_KEYS = ("input_lens", "output_lens", "ttfts", "itls")
WHAT = "a `vllm bench serve --save-result --save-detailed` result (JSON with input_lens, output_lens, ttfts, itls)"
# The search: the start scan's scales and Nelder-Mead's tolerance on log(seconds) (0.1 %).
SCAN_SCALES = np.logspace(-math.log10(30), math.log10(30), 5)
LOG_TOLERANCE = 1e-3
# Bounds on a fitted host constant (seconds): log space needs > 0; beyond 1 s a step is not an engine's.
HOST_RANGE = (1e-9, 1.0)


@dataclass(frozen=True, slots=True)
class ServeResult:
    """The successful requests of a result file, and the arrival process it ran."""

    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    ttfts: np.ndarray  # seconds
    mean_itls: np.ndarray  # seconds; NaN for a request with one output token
    request_rate: float  # requests per second, inf: all at once
    burstiness: float
    num_failed: int
    send: np.ndarray | None = None  # an open loop's recorded sends (seconds, any origin) where the file has them
    cap: int | None = None  # a closed loop's cap (all sent at once, each next at a completion): replayed as one


def read_vllm_result(path: str | Path, request_rate: float | None = None,
                     burstiness: float | None = None) -> ServeResult:
    """The file's per-request arrays, checked; `request_rate`/`burstiness` override the file's."""
    path = Path(path)
    data = parse_json_input(path, read_input_text(path, WHAT), WHAT)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected {WHAT}, got a JSON {type(data).__name__}")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        hint = (" (saved without --save-detailed: it has the summary, not the per-request arrays)"
                if "mean_ttft_ms" in data else "")
        raise ConfigError(f"{path}: missing {', '.join(missing)}{hint}; expected {WHAT}")
    arrays = detailed(path, data)  # (the successful requests, checked)
    lens = tuple(arrays["input_lens"].tolist()), tuple(arrays["output_lens"].tolist())
    rate, cap = _rate(path, data, request_rate), data.get("max_concurrency")
    if data.get("ramp_up_strategy") is not None:
        raise ConfigError(f"{path}: ramp_up_strategy: {show(data['ramp_up_strategy'])}; calibrating from a "
                          "ramp-up run is not supported yet, expected a run at one --request-rate")
    if cap is not None:  # a closed loop: replayed as one (its sends follow the completions, simulated or real)
        if not (is_int(cap) and cap >= 1) or not math.isinf(rate):
            raise ConfigError(f"{path}: max_concurrency: {show(cap)} at request_rate {show(data.get('request_rate'))};"
                              " calibrating from a capped run needs --request-rate inf (a closed loop), expected "
                              "that or a run without --max-concurrency (null)")
        return ServeResult(*lens, arrays["ttft"], arrays["mean_itl"], rate, 1.0, arrays["failed"], None, cap)
    if arrays["send"] is not None:  # an open loop's recorded sends: its schedule, replayed as it was
        if burstiness is not None or request_rate is not None:
            raise ConfigError(f"{path}: has start_times (each request's send): --request-rate and --burstiness "
                              "do not apply; drop them")
        return ServeResult(*lens, arrays["ttft"], arrays["mean_itl"], rate, 1.0, arrays["failed"], arrays["send"])
    return ServeResult(*lens, arrays["ttft"], arrays["mean_itl"], rate, _burstiness(path, data, burstiness),
                       arrays["failed"])


def from_aiperf(path: str | Path) -> ServeResult:
    """AIPerf's per-request export (`servesim.measured.aiperf_export`): every request at its recorded send, its
    mean ITL AIPerf's (latency - TTFT) / (OSL - 1)."""
    from servesim.measured.read import read_run

    run = read_run(path)
    with np.errstate(invalid="ignore", divide="ignore"):
        itl = np.where(run.output_lens > 1, (run.e2el - run.ttft) / np.maximum(run.output_lens - 1, 1), math.nan)
    lens = tuple(run.input_lens.tolist()), tuple(run.output_lens.tolist())
    rate, cap = run.load.get("request_rate"), run.load.get("concurrency")
    if rate is not None and cap is not None:
        raise ConfigError(f"{path}: --request-rate with --concurrency: calibrating from paced sends under a cap is "
                          "not supported yet; expected one of them")
    if rate is None and cap is None:
        raise ConfigError(f"{path}: no load in {run.path.name}'s profile_export_aiperf.json beside it "
                          "(input_config.loadgen.concurrency or request_rate); expected it there")
    if cap is not None:  # AIPerf's concurrency: N at once, each next one at a completion (a closed loop)
        return ServeResult(*lens, run.ttft, itl, math.inf, 1.0, run.failed, None, int(cap))
    return ServeResult(*lens, run.ttft, itl, float(rate), 1.0, run.failed, run.send)


def _rate(path: Path, data: dict, given: float | None) -> float:
    if given is not None:
        return given
    rate = data.get("request_rate")
    if rate is None:
        raise ConfigError(f"{path}: request_rate: not in the file; give --request-rate (inf: all at once)")
    if rate == "inf":
        return math.inf
    if not (is_finite(rate) and rate > 0):
        raise ConfigError(f"{path}: request_rate: expected a rate > 0 requests/s or \"inf\", got {show(rate)}")
    return float(rate)


def _burstiness(path: Path, data: dict, given: float | None) -> float:
    if given is not None:
        return given
    b = data.get("burstiness")
    if b is None:
        return 1.0
    if b == "inf":
        return math.inf
    if not (isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0):
        raise ConfigError(f"{path}: burstiness: expected a gamma shape > 0, got {show(b)}")
    return float(b)


class _Replay:
    """The file's requests through servesim under one engine profile: simulated TTFTs and mean ITLs."""

    def __init__(self, result: ServeResult, model, gpu, tp: int, engine: EngineProfile, config,
                 params: CostParams | None, seed: int) -> None:
        from servesim.engine.request import Request
        from servesim.workloads.synthetic import arrival_times

        if result.send is not None:
            t = result.send
        else:
            t = arrival_times(len(result.ttfts), result.request_rate, result.burstiness, np.random.default_rng(seed))
        if result.cap is not None:
            from servesim.engines.config import EngineConfig

            config = replace(config or EngineConfig(), max_concurrency=result.cap)
        self.requests = [Request(str(i), float(a), p, o)
                         for i, (a, p, o) in enumerate(zip(t, result.input_lens, result.output_lens))]
        self.model, self.gpu, self.tp, self.engine, self.config, self.params = model, gpu, tp, engine, config, params
        self.paired = result.send is not None or math.isinf(result.request_rate) or math.isinf(result.burstiness)
        self.ttft, self.itl = self._order(result.ttfts, result.mean_itls)
        self.runs = 0

    def _order(self, ttfts: np.ndarray, itls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.paired:
            return ttfts, itls
        return np.sort(ttfts), np.sort(itls[~np.isnan(itls)])

    def simulate(self, step_host: float, seq_host: float) -> tuple[np.ndarray, np.ndarray]:
        from servesim.engine.loop import simulate
        from servesim.export.result_file import per_request

        self.runs += 1
        engine = replace(self.engine, step_host=step_host, seq_host=seq_host)
        cost = Roofline(self.model, self.gpu, self.tp, self.params, engine=engine)
        res = per_request(simulate(self.requests, self.config, cost=cost, record="summary"))
        if any(res["errors"]):
            i = next(i for i, e in enumerate(res["errors"]) if e)
            raise ConfigError(f"request {i} (input_lens {self.requests[i].prompt_len}, output_lens "
                              f"{self.requests[i].output_len}) did not finish in servesim: {res['errors'][i]}; "
                              "check --model, --max-model-len")
        itls = np.array([np.mean(g) if g and sum(g) > 0 else math.nan for g in res["itls"]])
        return self._order(np.array(res["ttfts"]), itls)

    def loss(self, step_host: float, seq_host: float) -> float:
        ttft, itl = self.simulate(step_host, seq_host)
        r = [np.log(ttft / self.ttft)]
        if self.paired:
            ok = ~np.isnan(itl) & ~np.isnan(self.itl)
            r.append(np.log(itl[ok] / self.itl[ok]))
        else:  # arrivals redrawn: the distributions' means (each request's sawtooth averages out)
            r = [np.log(np.mean(ttft) / np.mean(self.ttft)), np.log(np.mean(itl) / np.mean(self.itl))]
        z = np.concatenate([np.atleast_1d(v) for v in r])
        return float(np.mean(z * z))


def fit_host_serve(result: ServeResult, model, gpu, tp: int, engine: EngineProfile, config=None,
                   params: CostParams | None = None, seed: int = 0) -> HostFit:
    """`engine` with the `step_host` and `seq_host` that make servesim's TTFTs and ITLs match the file's (scipy,
    the `fit` extra, does the search)."""
    replay = _Replay(result, model, gpu, tp, engine, config, params, seed)
    lo, hi = np.log(HOST_RANGE[0]), np.log(HOST_RANGE[1])
    split = replay.paired and result.cap is None
    if split:
        step_host, seq_host, best = _search2(replay, engine, lo, hi)
    else:  # the per-step and the per-sequence part cannot be told apart: seq_host stays the preset's
        step_host, best = _search1(replay, engine, lo, hi)
        seq_host = engine.seq_host
    fitted, warnings = [], []
    if not replay.paired:
        warnings.append(f"seq_host kept at the preset's {engine.seq_host * 1e3:.4f} ms: with redrawn arrivals only "
                        "the mean TTFT and ITL are compared, which fix the host time of a typical step, not its split")
    elif not split:
        warnings.append(f"seq_host kept at the preset's {engine.seq_host * 1e3:.4f} ms: under the client's cap of "
                        f"{result.cap} the batch stays near {result.cap}, which fixes the host time of such a step, "
                        "not its split into a per-step and a per-sequence part")
    trials = (("step_host", (2 * step_host, seq_host)), ("seq_host", (step_host, 2 * seq_host)))
    for name, trial in trials[:2 if split else 1]:
        if abs(replay.loss(*trial) - best) > 1e-9 * max(best, 1e-12):
            fitted.append(name)
        else:
            warnings.append(f"{name} not identifiable from this run (doubling it changes no simulated time: the "
                            "steps were device-bound under async scheduling, or their host part never showed); "
                            "kept the preset's value")
    updates = {"step_host": step_host, "seq_host": seq_host}
    updates = {k: v for k, v in updates.items() if k in fitted}
    if not fitted:
        raise ConfigError(f"calibrate --engine {engine.name}: the host time never shows in this run's simulated "
                          "steps (device-bound under async scheduling), so the file cannot fit it; give "
                          "--no-async-scheduling if the engine ran without it, or measure a lighter load")
    ttft, itl = replay.simulate(updates.get("step_host", engine.step_host), updates.get("seq_host", engine.seq_host))
    recorded = result.send is not None
    report = {"source": "vllm-result", "requests": len(result.ttfts), "failed_left_out": result.num_failed,
              "request_rate": "recorded sends" if recorded else "inf" if math.isinf(result.request_rate)
              else result.request_rate,
              "burstiness": None if recorded else "inf" if math.isinf(result.burstiness) else result.burstiness,
              "seed": seed, "compared": "per request, at the recorded sends" if recorded else "per request"
              if replay.paired else "sorted (Q-Q): arrivals redrawn",
              "fitted": fitted, "rms_log_error": math.sqrt(best), "simulations": replay.runs,
              "ttft_mape": _mape(ttft, replay.ttft), "itl_mape": _mape(itl, replay.itl)}
    return HostFit(replace(engine, **updates), tuple(fitted), report, tuple(warnings))


def _search2(replay: _Replay, engine: EngineProfile, lo: float, hi: float) -> tuple[float, float, float]:
    """(step_host, seq_host, loss): the best of a 5 x 5 grid of scales, refined by Nelder-Mead twice."""
    from scipy.optimize import minimize

    base = np.log(np.clip([engine.step_host, engine.seq_host], *HOST_RANGE))

    def f(x: np.ndarray) -> float:
        a, b = np.exp(np.clip(x, lo, hi))
        return replay.loss(float(a), float(b))

    start = min((base + np.log([a, b]) for a in SCAN_SCALES for b in SCAN_SCALES), key=f)
    for step in (0.4, 0.05):  # a second, finer simplex from the first's end: the loss is stepped (discrete events)
        sol = minimize(f, start, method="Nelder-Mead",
                       options={"xatol": LOG_TOLERANCE, "fatol": 1e-12, "maxfev": 150, "initial_simplex":
                                [start, start + [step, 0.0], start + [0.0, step]]})
        start = sol.x
    a, b = (float(v) for v in np.exp(np.clip(sol.x, lo, hi)))
    return a, b, float(sol.fun)


def _search1(replay: _Replay, engine: EngineProfile, lo: float, hi: float) -> tuple[float, float]:
    """(step_host, loss): a scan of 25 scales of the preset's, then a bounded Brent search around the best."""
    from scipy.optimize import minimize_scalar

    def f(x: float) -> float:
        return replay.loss(float(np.exp(np.clip(x, lo, hi))), engine.seq_host)

    base = float(np.log(np.clip(engine.step_host, *HOST_RANGE)))
    grid = base + np.log(np.logspace(-math.log10(30), math.log10(30), 25))
    best = min(grid, key=f)
    width = grid[1] - grid[0]
    sol = minimize_scalar(f, bounds=(best - width, best + width), method="bounded",
                          options={"xatol": LOG_TOLERANCE})
    x = sol.x if sol.fun <= f(best) else best
    return float(np.exp(np.clip(x, lo, hi))), float(f(x))


def _mape(pred: np.ndarray, meas: np.ndarray) -> float | None:
    if len(pred) != len(meas):
        return None
    ok = ~np.isnan(pred) & ~np.isnan(meas)
    return float(np.mean(np.abs(pred[ok] - meas[ok]) / meas[ok]) * 100) if ok.any() else None
