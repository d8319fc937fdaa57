"""Calibrated profiles: a JSON (or TOML) file of fitted `CostParams` for one model and GPU, usable as `--cost`.

Format (`servesim calibrate` writes it; `get_cost_model("profile", path=...)` or `get_cost_model(PATH)` reads it):

    {"servesim_profile": 1, "model": "llama-2-7b", "gpu": "a100-80gb", "tp": 1,
     "params": {"compute_efficiency": 0.74, "memory_efficiency": 0.75, "kernel_latency_s": 6e-06,
                "step_overhead_s": 0.001, "allreduce": {"2": [[4.3e-05, 0.56]], "4": [...]}},
     "engine": {"preset": "vllm-0.2", "enforce_eager": true, ..., "step_host_s": 0.0021, "seq_host_s": 4e-05, ...},
     "fit": {...held-out errors, for the record...}}

`engine` (optional; `servesim calibrate --engine`) is the engine profile with its fitted host constants
(`servesim.cost.calibrate_host`): with it the profile's steps are host and device combined by the engine's rule,
as `--cost roofline` runs are; without it, the flat `step_overhead_s` in series. `allreduce` maps a tensor-parallel
size to its (latency seconds, bandwidth efficiency) protocols; a `tp` the profile has no entry for falls back to
the GPU's default.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from servesim.cost.calibrate_host import ENGINE_FLAGS, HOST_FIELDS, engine_dict, engine_from_dict
from servesim.cost.host import EngineProfile
from servesim.cost.roofline import CostParams, Roofline
from servesim.cost.specs import (
    InputDoc,
    check_keys,
    is_finite,
    is_int,
    is_real,
    load_gpu,
    load_model,
    parse_json_input,
    parse_toml_input,
    read_input_text,
    show,
)
from servesim.errors import ConfigError

PROFILE_SUFFIXES = (".json", ".toml")
PROFILE_KEYS = ("servesim_profile", "model", "gpu", "tp", "params", "engine", "fit")
PARAM_KEYS = ("compute_efficiency", "memory_efficiency", "kernel_latency_s", "step_overhead_s", "allreduce")


def profile_dict(model: str, gpu: str, tp: int, params: CostParams,
                 allreduce_by_tp: dict[int, tuple[tuple[float, float], ...]], fit: dict | None = None,
                 engine: EngineProfile | None = None) -> dict:
    return {
        "servesim_profile": 1, "model": model, "gpu": gpu, "tp": tp,
        "params": {
            "compute_efficiency": params.compute_efficiency, "memory_efficiency": params.memory_efficiency,
            "kernel_latency_s": params.kernel_latency, "step_overhead_s": params.step_overhead,
            "allreduce": {str(k): [list(p) for p in v] for k, v in sorted(allreduce_by_tp.items())},
        },
    } | ({} if engine is None else {"engine": engine_dict(engine)}) | {"fit": fit or {}}


def save_profile(path: str | Path, data: dict) -> None:
    path = Path(path)
    if path.suffix != ".json":
        raise ConfigError(f"{path}: profiles are written as .json (TOML profiles can be read, not written)")
    from servesim.output import write_output

    write_output(path, json.dumps(data, indent=2) + "\n", "--output")


def load_profile(path: str | Path, tp: int | None = None, model: str | None = None) -> Roofline:
    """A roofline with the profile's fitted constants; `tp`/`model` override the profile's own."""
    path = Path(path)
    what = "a servesim profile (`servesim calibrate` writes one)"
    text = read_input_text(path, what)
    if path.suffix == ".toml":
        data, doc = parse_toml_input(path, text, what), InputDoc(path, text, kind="toml")
    else:
        data, doc = parse_json_input(path, text, what), InputDoc(path, text)
    if not isinstance(data, dict):
        doc.fail_type((), data, "an object with model, gpu, tp and params")
    check_keys(doc, data, (), PROFILE_KEYS)
    version = data.get("servesim_profile", 1)
    if not is_int(version) or version != 1:
        doc.fail_type(("servesim_profile",), version, "1 (the only profile version)")
    for key in ("model", "gpu") if model is None else ("gpu",):
        if key not in data:
            doc.fail((key,), "missing field; expected a built-in name or a path")
        if not isinstance(data[key], str):
            doc.fail_type((key,), data[key], "a built-in name or a path")
    try:
        gpu = load_gpu(data["gpu"])
    except ConfigError as exc:
        doc.fail(("gpu",), str(exc))
    if tp is None:
        tp = data.get("tp", 1)
        if not is_int(tp) or tp < 1:
            doc.fail_type(("tp",), tp, "a positive integer")
    p = data.get("params")
    if not isinstance(p, dict):
        doc.fail(("params",), f"expected an object of {', '.join(PARAM_KEYS)}"
                 + (f", got {show(p)}" if "params" in data else "; missing"))
    check_keys(doc, p, ("params",), PARAM_KEYS)

    def number(key: str, fraction: bool) -> float:
        if key not in p:
            doc.fail(("params", key), "missing field; expected " + ("a fraction in (0, 1]" if fraction
                                                                      else "a finite number of seconds >= 0"))
        return _number(doc, ("params", key), p[key], fraction)

    by_tp = {}
    allreduce = p.get("allreduce", {})
    if not isinstance(allreduce, dict):
        doc.fail_type(("params", "allreduce"), allreduce, "an object: tp -> [[latency_s, efficiency], ...]")
    for key, pairs in allreduce.items():
        where = ("params", "allreduce", key)
        try:
            size = int(key)
        except ValueError:
            size = 0
        if size < 2 or str(size) != key.strip():
            doc.fail(where, "expected a tensor-parallel size >= 2 as the key")
        if not isinstance(pairs, list) or not pairs:
            doc.fail_type(where, pairs, "a non-empty list of [latency_s, efficiency] pairs")
        for i, pair in enumerate(pairs):
            if not isinstance(pair, list) or len(pair) != 2:
                doc.fail_type((*where, i), pair, "a [latency_s, efficiency] pair")
        by_tp[size] = tuple((_number(doc, (*where, i), a, False), _number(doc, (*where, i), b, True))
                            for i, (a, b) in enumerate(pairs))
    params = replace(CostParams.defaults(gpu), compute_efficiency=number("compute_efficiency", True),
                     memory_efficiency=number("memory_efficiency", True),
                     kernel_latency=number("kernel_latency_s", False), step_overhead=number("step_overhead_s", False))
    if tp in by_tp:
        params = replace(params, allreduce=by_tp[tp])
    try:
        spec = load_model(model or data["model"])
    except ConfigError as exc:
        if model is not None:
            raise
        doc.fail(("model",), str(exc))
    engine = _engine(doc, data["engine"]) if "engine" in data else None
    try:
        return Roofline(spec, gpu, tp, params, engine=engine)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _number(doc: InputDoc, where: tuple[str | int, ...], value, fraction: bool) -> float:
    """A fraction in (0, 1] (an efficiency) or a finite time >= 0 in seconds; NaN, inf and zero efficiencies fail.
    A zero latency or overhead is a valid fit (the calibration's bounds include 0)."""
    if fraction:
        if not (is_real(value) and 0 < value <= 1):
            doc.fail_type(where, value, "a fraction in (0, 1]")
    elif not (is_finite(value) and value >= 0):
        doc.fail_type(where, value, "a finite number of seconds >= 0")
    return float(value)


def _engine(doc: InputDoc, data) -> EngineProfile:
    """The `engine` object: a preset, vLLM's flags, host constants in seconds (each key optional but the preset)."""
    keys = ("preset", *ENGINE_FLAGS, *HOST_FIELDS.values())
    if not isinstance(data, dict):
        doc.fail_type(("engine",), data, "an object: preset, vLLM's flags, host constants in seconds")
    check_keys(doc, data, ("engine",), keys)
    if not isinstance(data.get("preset"), str):
        doc.fail_type(("engine", "preset"), data.get("preset"), "an engine preset name, e.g. vllm-0.33")
    for key in ("enforce_eager", "disable_custom_all_reduce", "async_scheduling"):
        if key in data and not isinstance(data[key], bool):
            doc.fail_type(("engine", key), data[key], "true or false")
    for key in HOST_FIELDS.values():
        if key in data:
            _number(doc, ("engine", key), data[key], False)
    try:
        return engine_from_dict(data)
    except ConfigError as exc:
        doc.fail(("engine",), str(exc))
