"""Fit an engine profile's host constants to measured whole steps (`operator=step` rows of the measured CSV).

A step's wall time is the GPU's part and the host's part combined by the profile's rule (`EngineProfile.wall`):
host + device without async scheduling, max(host, device) with it. The GPU part comes from the roofline (the GPU
file's constants, or the operator rows' fit), so the host part is what is left:

    host = step_host + seq_host x (sequences scheduled) [+ tp_host when tp > 1]

- **In series** (no async scheduling) every step shows its host time: measured - device. The constants are a
  bounded (>= 0) linear least squares on relative errors; `seq_host` needs two or more batch sizes, `tp_host` rows
  at tp 1 and at tp > 1, or they keep the preset's values (and the report says so).
- **Overlapped** (async scheduling) a device-bound step hides its host time: it says only host <= measured. Only
  the host-bound steps (measured above the device time by more than `HOST_BOUND_MARGIN`) identify the constants;
  with none the fit is refused, and the device-bound rows are checked against the fit (a fitted host time above
  what such a step measured is a warning: the device model or the rule does not describe the data).

Eager launches (`--enforce-eager`) cost launches x `launch` per step, the same for every step of a kind, so they
cannot be told apart from `step_host`: `launch` keeps the preset's value. With tp > 1 the executor's RPC
(`ray_rpc`, `mp_rpc`) is per step too, so it is folded into the fitted `tp_host` (and set to 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from servesim.cost.calibrate import Measurement
from servesim.cost.host import EngineProfile, get_engine
from servesim.cost.roofline import CostParams, Roofline
from servesim.cost.specs import load_gpu, load_model
from servesim.errors import ConfigError

# A step counts as host-bound under async scheduling when it measured this much above the device time: below it,
# the difference is as likely the device model's own error as host time.
HOST_BOUND_MARGIN = 0.05
# The engine fields a fit may set, as the profile file names them (seconds).
HOST_FIELDS = {"step_host": "step_host_s", "seq_host": "seq_host_s", "tp_host": "tp_host_s",
               "ray_rpc": "ray_rpc_s", "mp_rpc": "mp_rpc_s", "launch": "launch_s"}
ENGINE_FLAGS = ("enforce_eager", "distributed_executor_backend", "disable_custom_all_reduce", "async_scheduling")


@dataclass(frozen=True, slots=True)
class HostFit:
    """An engine profile with fitted host constants, and the record of how they were found."""

    engine: EngineProfile
    fitted: tuple[str, ...]  # EngineProfile fields the data determined
    report: dict  # provenance: source, rows used, the errors after the fit (percent)
    warnings: tuple[str, ...] = field(default=())


def _device_parts(steps: list[Measurement], model, gpu, params: CostParams | None,
                  allreduce_by_tp: dict[int, tuple[tuple[float, float], ...]], engine: EngineProfile
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(GPU seconds as the step sees them: device, or the eager issue time where longer; sequences) per row."""
    m, g = load_model(model), load_gpu(gpu)
    roofs: dict[int, Roofline] = {}
    gpu_s, seqs = [], []
    for r in steps:
        if r.tp not in roofs:
            p = params or CostParams.defaults(g, r.tp)
            roofs[r.tp] = Roofline(m, g, r.tp, replace(p, allreduce=allreduce_by_tp.get(r.tp, p.allreduce)),
                                   engine=engine)
        device, _, issue = roofs[r.tp].split(r.shape)
        gpu_s.append(max(device, issue) if engine.enforce_eager else device)
        seqs.append(len(r.shape.num_new_tokens))
    return np.array(gpu_s), np.array(seqs, dtype=float)


def fit_host_steps(rows: list[Measurement], model, gpu, engine: EngineProfile, params: CostParams | None = None,
                   allreduce_by_tp: dict[int, tuple[tuple[float, float], ...]] | None = None) -> HostFit:
    """The host constants of `engine` that make its wall times match the `step` rows, the GPU part fixed."""
    from scipy.optimize import lsq_linear  # the `fit` extra

    steps = [r for r in rows if r.operator == "step"]
    if not steps:
        raise ConfigError("calibrate --engine: no step rows; the host constants are fitted from whole steps "
                          "(operator=step rows: decodes,context,prefill,time_ms)")
    gpu_s, seqs = _device_parts(steps, model, gpu, params, allreduce_by_tp or {}, engine)
    meas = np.array([r.time for r in steps])
    multi = np.array([r.tp > 1 for r in steps], dtype=float)
    warnings: list[str] = []
    if engine.async_scheduling:
        use = meas > gpu_s * (1 + HOST_BOUND_MARGIN)
        if not use.any():
            raise ConfigError(
                f"calibrate --engine {engine.name}: with async scheduling the host overlaps the GPU, and all "
                f"{len(steps)} step rows are device-bound (measured within {HOST_BOUND_MARGIN:.0%} of the GPU's "
                "predicted time), so they cannot show the host time; measure host-bound steps (small batches of a "
                "small model) or give --no-async-scheduling if the engine ran without it")
        target = meas  # a host-bound step's wall time is its host time
    else:
        use = np.ones(len(steps), dtype=bool)
        target = meas - gpu_s
        faster = int((target < 0).sum())
        if faster:
            warnings.append(f"{faster} of {len(steps)} step rows measured faster than the GPU part alone "
                            "(the roofline's device time): fit the GPU side first (operator rows) or check the rows")
    # Columns: the per-step part, per sequence, the TP extra, each where the rows can tell it apart.
    cols = {"step_host": np.ones(len(steps))}
    if len(set(seqs[use])) > 1:
        cols["seq_host"] = seqs
    has_tp = multi[use].any()
    if has_tp and not multi[use].all():
        cols["tp_host"] = multi
    # What stays fixed is subtracted first: the preset's per-sequence cost where it is not fitted, and with only
    # tp > 1 rows the TP part is folded into step_host (the report says so).
    fixed = np.zeros(len(steps))
    if "seq_host" not in cols:
        fixed += engine.seq_host * seqs
        warnings.append(f"seq_host kept at the preset's {engine.seq_host * 1e3:.4f} ms: the rows used have one batch "
                        "size (give steps of two or more)")
    if has_tp and "tp_host" not in cols:
        warnings.append("tp_host and the executor's RPC folded into step_host: every row used has tp > 1, so the "
                        "fitted step_host holds them (the profile is for tp > 1)")
    a = np.column_stack(list(cols.values()))[use]
    w = 1.0 / meas[use]  # relative errors, as the GPU fit scores
    sol = lsq_linear(a * w[:, None], (target - fixed)[use] * w, bounds=(0.0, np.inf))
    values = dict(zip(cols, (float(v) for v in sol.x)))
    updates = {"step_host": values["step_host"], "seq_host": values.get("seq_host", engine.seq_host)}
    if has_tp:
        updates |= {"tp_host": values.get("tp_host", 0.0), "ray_rpc": 0.0, "mp_rpc": 0.0}
    fitted_engine = replace(engine, **updates)
    host = np.array([fitted_engine.host_time(int(n), r.tp) for n, r in zip(seqs, steps)])
    pred = np.maximum(host, gpu_s) if engine.async_scheduling else host + gpu_s
    err = np.abs(pred - meas) / meas * 100
    if engine.async_scheduling and (~use).any():
        above = int((host[~use] > meas[~use] * (1 + HOST_BOUND_MARGIN)).sum())
        if above:
            warnings.append(f"{above} device-bound step rows measured less than the fitted host time: the device "
                            "model or the overlap rule does not describe them")
    report = {"source": "steps", "rule": "max(host, device)" if engine.async_scheduling else "host + device",
              "rows": len(steps), "rows_used": int(use.sum()), "fitted": list(cols),
              "mape": float(err.mean()), "worst": float(err.max()), "in_sample": True}
    return HostFit(fitted_engine, tuple(cols), report, tuple(warnings))


def engine_dict(engine: EngineProfile) -> dict:
    """The profile file's `engine` object: the preset, vLLM's flags and every host constant (seconds)."""
    return ({"preset": engine.name} | {f: getattr(engine, f) for f in ENGINE_FLAGS}
            | {key: getattr(engine, f) for f, key in HOST_FIELDS.items()})


def engine_from_dict(data: dict) -> EngineProfile:
    """The inverse of `engine_dict` (values validated by `EngineProfile`; the caller checks types and keys)."""
    flags = {f: data[f] for f in ENGINE_FLAGS if f in data}
    base = get_engine(data.get("preset"), **flags)
    return replace(base, **{f: float(data[key]) for f, key in HOST_FIELDS.items() if key in data})
