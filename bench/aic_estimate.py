"""AIConfigurator's own estimate (mean TTFT and TPOT) of a row of its silicon file, for the side by side of
docs/accuracy.md (`python -m bench.aic_side_by_side`; needs `pip install 'servesim[aic]'`).

How AIConfigurator scores its own file: ai-dynamo/aiconfigurator's
`tools/accuracy_regression_testing/predict_silicon_sample.py` (read at 095f58a5) calls
`aiconfigurator.cli.api.cli_estimate(mode="agg", ...)` per row and, when the row's `backend_version` has no
database, again with the default (newest) one. That `cli_estimate` lives in the upper `aiconfigurator` package,
not in `aiconfigurator-core`; its agg branch (`_run_agg_estimate`) is put together here from the core 0.12.0 calls
it makes, with its defaults: the row's `batch_size` as the requests in flight (`RuntimeConfig.batch_size`), a step
budget of `isl` tokens, no prefix, no speculative decoding, the SILICON database; a row that does not fit in
memory (`check_oom`) is refused, as upstream refuses it. Checked: on the 778 dense Hopper agg rows this gives
748 estimates, TPOT MAPE 17.5 %, TTFT 52.3 %, the figures issue 25 quotes for AIConfigurator.

Model configs: AIConfigurator downloads a model's `config.json` from Hugging Face where it has none bundled;
nothing is downloaded here. The three ids the servesim rows use and the package lacks are read from its bundled
configs of the same architecture (Llama-3.1-8B-Instruct and -70B: `meta-llama--Meta-Llama-3.1-8B/-70B`; the file's
`zhipuai/GLM-5`: `zai-org--GLM-5-FP8`), and
nvidia's FP8 8B checkpoint with ModelOpt's FP8 quantisation (weights and KV cache, as the bundled
`nvidia/Llama-3.1-70B-Instruct-FP8`).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

SAME_SHAPE = {"meta-llama/Llama-3.1-8B-Instruct": "meta-llama--Meta-Llama-3.1-8B",
              "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama--Meta-Llama-3.1-8B",
              "meta-llama/Llama-3.1-70B": "meta-llama--Meta-Llama-3.1-70B",
              # (the silicon file's GLM-5 id; the package bundles zai-org's, the FP8 one as servesim reads the rows)
              "zhipuai/GLM-5": "zai-org--GLM-5-FP8"}
MODELOPT_FP8 = {"producer": {"name": "modelopt"},
                "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
_DB: dict = {}


def _offline() -> None:
    """AIConfigurator's config download answered from its own bundled configs (see the module docstring)."""
    import aiconfigurator_core
    from aiconfigurator_core.sdk import utils

    bundled = Path(aiconfigurator_core.__file__).parent / "model_configs"
    download = utils._download_hf_json

    def offline(hf_id: str, filename: str, *, raise_on_404: bool = True):
        if hf_id not in SAME_SHAPE:
            return download(hf_id, filename, raise_on_404=raise_on_404)
        if filename == "config.json":
            return json.loads((bundled / f"{SAME_SHAPE[hf_id]}_config.json").read_text())
        if filename == "hf_quant_config.json" and hf_id.startswith("nvidia/"):
            return MODELOPT_FP8
        if raise_on_404:
            raise FileNotFoundError(f"{hf_id}/{filename}")
        return None

    utils._download_hf_json = offline


def _database(system: str, backend: str, version: str | None):
    from aiconfigurator_core.sdk import perf_database as pdb

    if version is None:
        version = pdb.get_latest_database_version(system=system, backend=backend)
    key = (system, backend, version)
    if key not in _DB:
        try:
            _DB[key] = pdb.get_database_view(system, backend, version, allow_missing_data=False,
                                             database_mode="SILICON", transfer_policy=None)
        except ValueError as exc:
            _DB[key] = exc
    if isinstance(_DB[key], Exception) or _DB[key] is None:
        raise ValueError(f"Failed to load perf database {key}: {_DB[key]}")
    return _DB[key]


def _agg(row: dict, version: str | None) -> tuple[float, float]:
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import RuntimeConfig
    from aiconfigurator_core.sdk.config_builders import apply_nextn, build_model_config
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.models.helpers import (
        resolve_context_fmha_by_data,
        resolve_dsv4_moe_arch,
        resolve_nvfp4_for_system,
    )

    model_path, system, backend = row["model_path"], row["system"], row["backend"]
    isl, osl, n = int(row["isl"]), int(row["osl"]), int(row["batch_size"])
    num = {f: int(row[f]) if row.get(f) else d for f, d in (("tp_size", 1), ("pp_size", 1), ("attention_dp_size", 1),
                                                            ("moe_tp_size", None), ("moe_ep_size", None))}
    db = _database(system, backend, version)
    cfg = build_model_config(num["tp_size"], num["pp_size"], num["attention_dp_size"], num["moe_tp_size"],
                             num["moe_ep_size"], row["gemm_quant_mode"] or None, None, None,
                             row["moe_quant_mode"] or None, None, forward_model=None, enable_encoder_dp=True)
    apply_nextn(cfg, 0)
    resolve_context_fmha_by_data(cfg, model_path, db, backend, is_context_role=True)
    resolve_dsv4_moe_arch(cfg, model_path, system_name=system, backend_name=backend)
    resolve_nvfp4_for_system(cfg, system, model_path)
    rc = RuntimeConfig(isl=isl, osl=osl, batch_size=n, image_height=0, image_width=0, num_images_per_request=1,
                       prefix=0, engine_step_backend=None)
    summary = get_backend(backend).run_agg(get_model(model_path, cfg, backend), db, rc, ctx_tokens=isl,
                                           max_seq_len=None, free_gpu_memory_fraction=None,
                                           decode_tokens_per_iteration=None)
    if summary.check_oom():
        raise RuntimeError(f"does not fit: {model_path} on {system} at tp {num['tp_size']}")
    r = summary.get_result_dict()
    return float(r["ttft"]), float(r["tpot"])


def _disagg(row: dict, version: str | None) -> tuple[float, float]:
    """A disagg row as upstream's `cli_estimate(mode="disagg")` estimates it (`cli/api.py`'s
    `_run_disagg_estimate` and `sdk/inference_session.py`'s `DisaggInferenceSession.run_disagg`, read at
    5fddf9d5): each side's model config from its parallel sizes (as `_agg` builds one), the prefill worker's
    static context phase at `prefill_batch_size` (its TTFT) and the decode worker's static generation phase at
    `decode_batch_size` (its TPOT), a worker that does not fit refused. Its rate matching over the worker counts
    (`picking._build_disagg_summary_dict`) sets throughput, not TTFT or TPOT; its latency correction scales are set
    on the session and not applied by `run_disagg`."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import RuntimeConfig
    from aiconfigurator_core.sdk.config_builders import apply_nextn, build_model_config
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.models.helpers import (
        resolve_context_fmha_by_data,
        resolve_dsv4_moe_arch,
        resolve_nvfp4_for_system,
    )

    model_path, system, backend = row["model_path"], row["system"], row["backend"]
    db = _database(system, backend, version)
    out = {}
    for side, mode, key in (("prefill", "static_ctx", "ttft"), ("decode", "static_gen", "tpot")):
        num = {f: int(row[f"{side}_{f}"]) if row.get(f"{side}_{f}") else d for f, d in (
            ("tp_size", 1), ("pp_size", 1), ("attention_dp_size", 1), ("moe_tp_size", None), ("moe_ep_size", None))}
        cfg = build_model_config(num["tp_size"], num["pp_size"], num["attention_dp_size"], num["moe_tp_size"],
                                 num["moe_ep_size"], row["gemm_quant_mode"] or None, None, None,
                                 row["moe_quant_mode"] or None, None, forward_model=None, enable_encoder_dp=True)
        apply_nextn(cfg, 0)
        if side == "prefill":
            resolve_context_fmha_by_data(cfg, model_path, db, backend, is_context_role=True)
        resolve_dsv4_moe_arch(cfg, model_path, system_name=system, backend_name=backend)
        resolve_nvfp4_for_system(cfg, system, model_path)
        rc = RuntimeConfig(isl=int(row["isl"]), osl=int(row["osl"]), batch_size=int(row[f"{side}_batch_size"]),
                           image_height=0, image_width=0, num_images_per_request=1, prefix=0,
                           engine_step_backend=None)
        summary = get_backend(backend).run_static(get_model(model_path, cfg, backend), db, rc, mode)
        if summary.check_oom():
            raise RuntimeError(f"does not fit: the {side} worker of {model_path} on {system}")
        out[key] = float(summary.get_summary_df().iloc[0][key])
    return out["ttft"], out["tpot"]


def estimate(row: dict) -> tuple[float, float] | str:
    """(TTFT ms, TPOT ms) as AIConfigurator estimates the row, or why it refuses it: an agg row as its agg
    estimate, a disagg row as its disagg one."""
    if not hasattr(_offline, "done"):
        import logging

        logging.disable(logging.WARNING)  # (AIConfigurator's notes on each row's data fallbacks)
        _offline()
        _offline.done = True
    run = _disagg if row["mode"] == "disagg" else _agg
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                return run(row, row["backend_version"] or None)
            except ValueError as exc:  # no database for the row's version: upstream retries with the default
                if not row["backend_version"] or not ("perf database" in str(exc) or "queryable" in str(exc)):
                    raise
                return run(row, None)
    except Exception as exc:  # noqa: BLE001 - a row AIConfigurator refuses, with its reason
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
