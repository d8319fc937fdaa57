"""Measured runs as validate's points: `vllm bench serve --save-result` files and AIPerf exports, one point each.

A folder is every vllm bench serve result (`*.json`) in it and every AIPerf artifacts folder (holding
`profile_export.jsonl`) in it or under it. The deployment comes from the file (vllm bench serve's `--metadata
gpu=h100 tp=2 engine=vllm ...`, `servesim.measured.run.DEPLOYMENT_KEYS`), `validate --set KEY=VALUE` overriding
it or filling what the file lacks; the model from `model`, else the file's model id where it names a servesim
model (a built-in's Hugging Face repository); `cost=toy` needs neither model nor GPU. `tp` defaults to 1 (vLLM's
and SGLang's default); a run without a GPU or an engine is out of reach, naming the key to record. The load is
the client's as it recorded it (`servesim.measured.replay`, sends "client"); the measured values are the file's
own means.
"""

from __future__ import annotations

from pathlib import Path

from servesim.errors import ConfigError, ServesimError
from servesim.validate.rows import Point

INT_KEYS = ("tp", "max_num_seqs", "max_num_batched_tokens")


def run_files(source: Path) -> list[Path]:
    """The run files a source names: itself, or the results and AIPerf artifacts folders in a folder."""
    from servesim.measured.aiperf_export import RECORDS_FILE

    if not source.exists():
        raise ConfigError(f"{source}: no such file or folder; expected a CSV, a vllm bench serve result .json, "
                          "an AIPerf export or a folder of them")
    if not source.is_dir() or (source / RECORDS_FILE).is_file():
        return [source]
    found = sorted(source.glob("*.json")) + sorted(p.parent for p in source.rglob(RECORDS_FILE))
    if not found:
        raise ConfigError(f"{source}: no vllm bench serve result (*.json) and no AIPerf {RECORDS_FILE} in it")
    return found


def run_points(paths: list[Path], given: dict[str, str]) -> tuple[list[Point], list[tuple[str, str]]]:
    """(a point per run file servesim can replay; every other file and why)."""
    from servesim.measured.read import read_run

    points, out = [], []
    for path in paths:
        run = read_run(path)  # (a malformed file is refused, naming it: nothing is scored from half a source)
        try:
            points.append(Point(str(path), _fields(run, given), dict(run.means), run))
        except ServesimError as exc:
            out.append((str(path), str(exc)))
    return points, out


def _fields(run, given: dict[str, str]) -> dict:
    from servesim.cost.specs import builtin_for_hf_id, builtin_models

    f = dict(run.deployment) | given
    if f.get("cost") == "toy":  # (the toy cost times a step from its tokens alone: no model, no GPU)
        f.setdefault("model", run.model_id or "-")
        f.setdefault("gpu", "-")
    if "model" not in f:
        found = run.model_id if run.model_id in builtin_models() else builtin_for_hf_id(run.model_id or "")
        if found is None:
            raise ConfigError(f"model {run.model_id!r} is not a servesim model: record --metadata model=NAME (a "
                              "built-in or a config.json), or give validate --set model=NAME")
        f["model"] = found
    for key in ("gpu", "engine"):
        if key not in f:
            raise ConfigError(f"no {key} recorded: run vllm bench serve with --metadata {key}=..., or give validate "
                              f"--set {key}=...")
    for key in INT_KEYS:
        if key in f:
            if not str(f[key]).isdigit() or int(f[key]) < 1:
                raise ConfigError(f"{key}: got {f[key]!r}; expected an integer >= 1")
            f[key] = int(f[key])
    f["client"] = run.client
    f["num_requests"] = len(run)
    f["isl"], f["osl"] = round(float(run.input_lens.mean())), round(float(run.output_lens.mean()))
    cap = run.load.get("max_concurrency", run.load.get("concurrency"))
    if cap is not None:
        f["concurrency"] = int(cap)
    else:
        f["request_rate"] = float(run.load.get("request_rate", float("inf")))
    if not run.means:
        raise ConfigError("no measured mean in the file (mean_ttft_ms, mean_tpot_ms, ...)")
    return f


def parse_set(items: list[str]) -> dict[str, str]:
    """`--set KEY=VALUE` pairs, each key one of the deployment keys."""
    from servesim.measured.run import DEPLOYMENT_KEYS

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not value.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        if key not in DEPLOYMENT_KEYS:
            raise ConfigError(f"--set {key}: expected one of {', '.join(DEPLOYMENT_KEYS)}")
        out[key] = value.strip()
    return out
