"""Fit the roofline's efficiencies and overheads to measured operator or step times (bounded least squares).

Measured CSV, one row per measurement (extra columns are ignored; `#` starts a comment, on its own line or after
the values; blank lines are skipped):

    operator,tp,num_tokens,size_bytes,decodes,context,prefill,time_ms
    qkv_proj,1,512,,,,,0.234           # one layer's GEMM: qkv_proj | o_proj | gate_up_proj | down_proj
    all_reduce,2,,1048576,,,,0.047      # one all-reduce of size_bytes over tp GPUs
    step,1,,,32,1024,512@1024,14.2      # a whole step: decodes at context, prefill chunks TOKENS@CONTEXT

The rows are split in two halves (seeded); the fit uses one and the errors are reported on the other, so the
reported MAPE is a held-out figure. scipy is needed (the `fit` extra) and imported only here.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from servesim.cost.base import StepShape
from servesim.cost.roofline import GEMM_TILE_TOKENS, CostParams, Roofline
from servesim.cost.specs import load_gpu, load_model, read_input_text, show
from servesim.errors import ConfigError

GEMM_OPERATORS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
OPERATORS = (*GEMM_OPERATORS, "all_reduce", "step")
# Bounds: efficiencies are fractions of peak; latencies and overheads are seconds.
EFF_BOUNDS, KERNEL_BOUNDS, OVERHEAD_BOUNDS, AR_LAT_BOUNDS = (0.02, 1.0), (0.0, 1e-4), (0.0, 0.1), (0.0, 1e-3)
MEASURED_FORMAT = "operator,tp,num_tokens,size_bytes,decodes,context,prefill,time_ms"
REQUIRED_COLUMNS = ("operator", "time_ms")  # the others where a row's operator needs them
# Bounds on a row's counts (far beyond any real measurement): the fit's arithmetic stays finite, a row small.
MAX_COUNT, MAX_DECODES, MAX_TP = 1 << 31, 1 << 20, 1 << 10


@dataclass(frozen=True, slots=True)
class Measurement:
    operator: str
    tp: int
    time: float  # seconds
    num_tokens: int = 0
    size_bytes: float = 0.0
    shape: StepShape | None = None

    @property
    def group(self) -> str:
        return "gemm" if self.operator in GEMM_OPERATORS else self.operator


@dataclass(frozen=True, slots=True)
class Calibration:
    params: CostParams
    allreduce_by_tp: dict[int, tuple[tuple[float, float], ...]]
    held_out: dict[str, dict[str, float]]  # group -> {"rows", "mape", "worst"} (percent), scored on held-out rows
    num_fit: int
    num_held_out: int


def parse_prefill(spec: str) -> list[tuple[int, int]]:
    """`512@1024 256@0` (or comma-separated) -> [(512, 1024), (256, 0)]."""
    chunks = []
    for part in spec.replace(",", " ").split():
        tokens, _, context = part.partition("@")
        try:
            chunks.append((int(tokens), int(context or 0)))
        except ValueError:
            raise ConfigError(f"prefill: expected TOKENS@CONTEXT, e.g. 512@1024, got {part!r}") from None
        if not 0 < chunks[-1][0] <= MAX_COUNT or not 0 <= chunks[-1][1] <= MAX_COUNT:
            raise ConfigError(f"prefill: expected TOKENS in 1..{MAX_COUNT} and CONTEXT in 0..{MAX_COUNT}, "
                              f"got {part!r}")
    return chunks


def _csv_lines(path: Path, text: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of each line that holds data: `#` starts a comment to the end of the line (a whole line
    or after the values, as in the documented example) and blank lines are skipped."""
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            cells = next(csv.reader([line]))
        except csv.Error as exc:
            raise ConfigError(f"{path}:{n}: not a CSV line ({exc}); expected {MEASURED_FORMAT}") from None
        out.append((n, [c.strip() for c in cells]))
    return out


def read_measurements(path: str | Path) -> list[Measurement]:
    path = Path(path)
    what = f"a CSV of measurements with the columns {MEASURED_FORMAT}"
    lines = _csv_lines(path, read_input_text(path, what))
    if not lines:
        raise ConfigError(f"{path}: no header and no measurements; expected {what}")
    header_line, header = lines[0]
    columns: dict[str, int] = {}
    for i, name in enumerate(header):
        if name in columns and name:
            raise ConfigError(f"{path}:{header_line}: header: column {name!r} twice; expected {what}")
        columns.setdefault(name, i)
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise ConfigError(f"{path}:{header_line}: header: missing column{'s' * (len(missing) > 1)} "
                          f"{', '.join(missing)}; expected the columns {MEASURED_FORMAT} (the header has "
                          f"{show(','.join(header))})")
    out = []
    for line, cells in lines[1:]:
        def cell(key: str, line=line, cells=cells) -> str | None:
            """The cell's text; None where it is empty or the column is absent."""
            i = columns.get(key)
            return cells[i] if i is not None and i < len(cells) and cells[i] else None

        def need(key: str, op: str, line=line) -> None:
            if key not in columns:
                raise ConfigError(f"{path}:{line}: {key}: {op} rows need the column {key!r}; expected the columns "
                                  f"{MEASURED_FORMAT}")
            if cell(key) is None:
                raise ConfigError(f"{path}:{line}: {key}: empty; {op} rows need a value")

        def number(key: str, default: float, low: float = 0.0, high: float | None = None, line=line) -> float:
            """An integer in low..high when `high` is given, else a finite number > `low`; `default` if empty."""
            text = cell(key)
            if text is None:
                return default
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if high is None:
                ok, kind = math.isfinite(value) and value > low, f"a finite number > {low:g}"
            else:
                ok, kind = low <= value <= high and value == int(value), f"an integer in {int(low)}..{int(high)}"
            if not ok:
                raise ConfigError(f"{path}:{line}: {key}: expected {kind}, got {show(text)}")
            return value

        if len(cells) > len(header):
            raise ConfigError(f"{path}:{line}: {len(cells)} values for the header's {len(header)} columns; "
                              f"expected {what}")
        op = cell("operator") or ""
        if op not in OPERATORS:
            raise ConfigError(f"{path}:{line}: operator: expected one of {', '.join(OPERATORS)}, got {show(op)}")
        tp = int(number("tp", 1, 1, MAX_TP))
        shape, tokens, size = None, 0, 0.0
        if op in GEMM_OPERATORS:
            need("num_tokens", op)
            tokens = int(number("num_tokens", 0, 1, MAX_COUNT))
        elif op == "all_reduce":
            need("size_bytes", op)
            size = number("size_bytes", 0.0)
            if tp < 2:
                raise ConfigError(f"{path}:{line}: tp: an all_reduce row needs tp >= 2 (GPUs in the all-reduce)")
        else:
            decodes = int(number("decodes", 0, 0, MAX_DECODES))
            ctx = int(number("context", 0, 0, MAX_COUNT))
            try:
                prefill = parse_prefill(cell("prefill") or "")
            except ConfigError as exc:  # "prefill: expected TOKENS@CONTEXT ..."
                raise ConfigError(f"{path}:{line}: {exc}") from None
            if not decodes and not prefill:
                raise ConfigError(f"{path}:{line}: decodes: a step row needs decodes > 0 or a prefill TOKENS@CONTEXT")
            shape = StepShape.of(decodes=[ctx] * decodes, prefills=prefill)
        need("time_ms", op)
        t = number("time_ms", 0.0) / 1e3
        out.append(Measurement(op, tp, t, tokens, size, shape))
    if not out:
        raise ConfigError(f"{path}: a header and no measurements; expected {what}")
    return out


class _Predictor:
    """Vectorised predictions for a parameter vector [ec, em, kernel, overhead, (lat, eff) x protocols per tp]."""

    def __init__(self, rows: list[Measurement], model, gpu, protocols: int) -> None:
        self.model, self.gpu, self.rows, self.protocols = load_model(model), load_gpu(gpu), rows, protocols
        self.tps = sorted({r.tp for r in rows if r.tp > 1 and r.operator in ("all_reduce", "step")})
        self.link = self.gpu.interconnect_bandwidth / 2
        rooflines = {tp: Roofline(self.model, self.gpu, tp) for tp in {r.tp for r in rows if r.group != "all_reduce"}}
        d = self.model.dtype_bytes
        gemm = [(i, r) for i, r in enumerate(rows) if r.group == "gemm"]
        self.g_idx = np.array([i for i, _ in gemm], dtype=int)
        c, m = [], []
        for _, r in gemm:
            k, n = {name: (k, n) for name, k, n in rooflines[r.tp]._gemms}[r.operator]
            padded = -(-r.num_tokens // GEMM_TILE_TOKENS) * GEMM_TILE_TOKENS
            c.append(2.0 * padded * k * n / self.gpu.peak_flops)
            m.append(d * (k * n + r.num_tokens * (k + n)) / self.gpu.memory_bandwidth)
        self.g_c, self.g_m = np.array(c), np.array(m)
        self.ar = {tp: np.array([i for i, r in enumerate(rows) if r.operator == "all_reduce" and r.tp == tp],
                                dtype=int) for tp in self.tps}
        self.ar_wire = {tp: np.array([2 * (tp - 1) / tp * rows[i].size_bytes / self.link for i in idx])
                        for tp, idx in self.ar.items()}
        self.steps = [i for i, r in enumerate(rows) if r.operator == "step"]

    def unpack(self, x: np.ndarray) -> tuple[CostParams, dict[int, tuple[tuple[float, float], ...]]]:
        by_tp = {}
        for j, tp in enumerate(self.tps):
            v = x[4 + 2 * self.protocols * j: 4 + 2 * self.protocols * (j + 1)]
            by_tp[tp] = tuple((float(v[2 * q]), float(v[2 * q + 1])) for q in range(self.protocols))
        base = CostParams.defaults(self.gpu)
        return replace(base, compute_efficiency=float(x[0]), memory_efficiency=float(x[1]),
                       kernel_latency=float(x[2]), step_overhead=float(x[3])), by_tp

    def predict(self, x: np.ndarray) -> np.ndarray:
        out = np.zeros(len(self.rows))
        out[self.g_idx] = np.maximum(self.g_c / x[0], self.g_m / x[1]) + x[2]
        for j, tp in enumerate(self.tps):
            v = x[4 + 2 * self.protocols * j: 4 + 2 * self.protocols * (j + 1)]
            if len(self.ar[tp]):
                out[self.ar[tp]] = np.min([v[2 * q] + self.ar_wire[tp] / v[2 * q + 1]
                                           for q in range(self.protocols)], axis=0)
        if self.steps:
            params, by_tp = self.unpack(x)
            cache: dict[int, Roofline] = {}
            for i in self.steps:
                tp = self.rows[i].tp
                if tp not in cache:
                    cache[tp] = Roofline(self.model, self.gpu, tp,
                                         replace(params, allreduce=by_tp.get(tp, params.allreduce)))
                out[i] = cache[tp].step_time(self.rows[i].shape)
        return out

    def start_and_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Initial point at the GPU's defaults; `active` marks what the rows can identify."""
        g = self.gpu
        x0 = [g.compute_efficiency, g.memory_efficiency, g.kernel_latency, g.step_overhead]
        lo = [EFF_BOUNDS[0], EFF_BOUNDS[0], KERNEL_BOUNDS[0], OVERHEAD_BOUNDS[0]]
        hi = [EFF_BOUNDS[1], EFF_BOUNDS[1], KERNEL_BOUNDS[1], OVERHEAD_BOUNDS[1]]
        has_gemm, has_step = len(self.g_idx) > 0, bool(self.steps)
        active = [has_gemm or has_step] * 3 + [has_step]
        for _ in self.tps:
            for q in range(self.protocols):
                # Protocols start apart (fast-start/low-bandwidth vs slow-start/high-bandwidth) so they can split.
                x0 += [g.allreduce_latency * (0.5 + q), min(1.0, g.interconnect_efficiency * (0.6 + 0.6 * q))]
                lo += [AR_LAT_BOUNDS[0], EFF_BOUNDS[0]]
                hi += [AR_LAT_BOUNDS[1], EFF_BOUNDS[1]]
                active += [True, True]
        return np.array(x0), np.array(lo), np.array(hi), np.array(active)


def _errors(pred: np.ndarray, rows: list[Measurement], idx: np.ndarray) -> dict[str, dict[str, float]]:
    report = {}
    for group in sorted({rows[i].group for i in idx}):
        sel = np.array([i for i in idx if rows[i].group == group])
        meas = np.array([rows[i].time for i in sel])
        err = np.abs(pred[sel] - meas) / meas * 100
        report[group] = {"rows": int(len(sel)), "mape": float(err.mean()), "worst": float(err.max())}
    return report


def evaluate(rows: list[Measurement], model, gpu, params: CostParams | None = None,
             allreduce_by_tp: dict[int, tuple[tuple[float, float], ...]] | None = None) -> dict[str, dict]:
    """Errors (percent) of a fixed parameter set on all `rows`: the uncalibrated check uses the GPU defaults."""
    pred = _Predictor(rows, model, gpu, protocols=1)
    p = params or CostParams.defaults(pred.gpu)
    by_tp = allreduce_by_tp or {}
    x = [p.compute_efficiency, p.memory_efficiency, p.kernel_latency, p.step_overhead]
    # Without a fit for a TP size: the GPU file's protocols for it (its [allreduce] table), as `Roofline` uses.
    by_tp = {tp: by_tp.get(tp, p.allreduce if params else CostParams.defaults(pred.gpu, tp).allreduce)
             for tp in pred.tps}
    protocols = max([len(by_tp[tp]) for tp in pred.tps] or [1])
    pred.protocols = protocols
    for tp in pred.tps:
        pairs = list(by_tp[tp])
        pairs += [pairs[-1]] * (protocols - len(pairs))
        x += [v for pair in pairs for v in pair]
    return _errors(pred.predict(np.array(x)), rows, np.arange(len(rows)))


def calibrate(rows: list[Measurement], model, gpu, seed: int = 0, protocols: int = 2) -> Calibration:
    """Fit on one seeded half of `rows`, score on the other; `protocols` all-reduce lines per tp (min of them)."""
    from scipy.optimize import least_squares  # the `fit` extra

    if len(rows) < 4:
        raise ConfigError(f"calibration needs at least 4 measurements, got {len(rows)}")
    order = np.random.default_rng(seed).permutation(len(rows))
    fit_idx, held_idx = np.sort(order[::2]), np.sort(order[1::2])
    pred = _Predictor(rows, model, gpu, protocols)
    x0, lo, hi, active = pred.start_and_bounds()
    meas = np.array([r.time for r in rows])

    def residuals(xa: np.ndarray) -> np.ndarray:
        x = x0.copy()
        x[active] = xa
        return (pred.predict(x)[fit_idx] - meas[fit_idx]) / meas[fit_idx]

    # soft_l1 (about L1 on relative errors) so the bimodal noise of tiny all-reduces does not steer the fit:
    # MAPE, the score, is an L1 measure too.
    # x_scale: latencies (~1e-5 s) and efficiencies (~0.5) differ by 10^5; unscaled, the solver crawls.
    sol = least_squares(residuals, x0[active], bounds=(lo[active], hi[active]), loss="soft_l1", f_scale=0.05,
                        x_scale=np.maximum(np.abs(x0[active]), 1e-6))
    x = x0.copy()
    x[active] = sol.x
    params, by_tp = pred.unpack(x)
    return Calibration(params, by_tp, _errors(pred.predict(x), rows, held_idx), len(fit_idx), len(held_idx))
