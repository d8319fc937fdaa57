"""A disaggregated row of AIConfigurator's silicon file (`mode` disagg) read as the P/D deployment it measured.

What the columns mean, as AIConfigurator reads them (aiconfigurator, `tools/accuracy_regression_testing/
predict_silicon_sample.py` and `cli/api.py`'s `_run_disagg_estimate`, read at 5fddf9d5): `prefill_num_workers`
workers of `prefill_tp_size` / `prefill_attention_dp_size` / `prefill_moe_tp_size` / `prefill_moe_ep_size` GPUs
with `prefill_batch_size` requests a batch, and the decode pool likewise; the four batch and worker columns are
required (AIConfigurator's script refuses a row without them). The load is a closed loop of C users over the
whole deployment: C is the row's `silicon_concurrency` (its `silicon_data_source`), else the `_c<C>_` of its id,
else AIConfigurator's own definition of a disagg point's concurrency (`picking._build_disagg_summary_dict`: the
decode worker's concurrency, `bs x attention_dp_size`, times `decode_num_workers`; its benchmark generator's
`estimated_concurrency`, `decode_workers x decode max_batch_size`); on every row that gives C both ways they
agree. Each worker is launched as AIConfigurator's generator writes it (`generator/rule_plugin/benchmark/
{vllm,sglang,trtllm}.rule`): its max batch size the row's batch size; its token budget `isl + 1500` on a prefill
worker, the batch size on a decode worker (vLLM `max_num_batched_tokens`, TensorRT-LLM `max_num_tokens`; SGLang
`max_prefill_tokens` on both); TensorRT-LLM's overlap scheduler off on a prefill worker, on on a decode worker;
SGLang's decode server without its radix cache (its default unless `--disaggregation-decode-enable-radix-cache`).

The KV moves from a prefill worker to its decode worker over the GPU's fabric (`servesim.cost.comm.Fabric`):
NVLink when the whole deployment fits in one NVLink domain (72 GPUs on a GB200/GB300 NVL72 rack, 8 on an HGX
board), the GPUs' network links otherwise; each of the prefill worker's GPUs sends its share at once, so the
worker's link is its GPU count times one GPU's one-way link at the fabric's efficiency, with the fabric's latency.
"""

from __future__ import annotations

import re

from servesim.cost.specs import load_gpu
from servesim.engines.registry import engine_for
from servesim.validate.aic import (
    GPUS,
    MODELS,
    TRTLLM_LAUNCH,
    TRTLLM_MAX_NUM_TOKENS_SLACK,
    _layout_fields,
    _layout_reason,
    _out_of_reach,
    _set,
    quantization_fields,
)
from servesim.validate.rows import Point

SIDES = ("prefill", "decode")
PARALLEL = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
REQUIRED = ("prefill_batch_size", "prefill_num_workers", "decode_batch_size", "decode_num_workers")
TOKEN_SLACK = TRTLLM_MAX_NUM_TOKENS_SLACK  # the generator's `isl + 1500`, on every engine's prefill worker


def side_row(row: dict, side: str) -> dict:
    """The row as one pool's agg-style row: its parallel sizes and batch size under the agg columns' names."""
    return row | {"mode": "agg", "batch_size": row.get(f"{side}_batch_size")} | {
        name: row.get(f"{side}_{name}") for name in PARALLEL}


def concurrency(row: dict) -> int:
    """The closed loop's users over the whole deployment (the module's docstring)."""
    found = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"] or "") or re.search(
        r"_c(\d+)_", row["id"])
    if found:
        return int(found.group(1))
    dp = int(row["decode_attention_dp_size"]) if _set(row["decode_attention_dp_size"]) else 1
    return int(row["decode_batch_size"]) * dp * int(row["decode_num_workers"])


def disagg_reason(row: dict) -> str | None:
    """Why a disagg row is out of reach (None: it is not)."""
    for name in REQUIRED:
        if row.get(name) in (None, "", "0"):
            return f"{name} is empty: the P/D deployment's workers are unknown (AIConfigurator's estimate needs it too)"
    for side in SIDES:
        sr = side_row(row, side)
        why = _out_of_reach(sr)
        if why:
            layout = _set(sr["pp_size"]) or why == _layout_reason(sr)
            return f"{side}: {why}" if layout else why
        ranks = _layout_fields(sr)["ranks"]
        if ranks > 1:
            return f"{side}: {ranks} data-parallel ranks in a worker (attention_dp_size " \
                   f"{sr['attention_dp_size']}) are not modelled in a P/D pool yet"
    spec = engine_for(row["backend"])
    if not spec.pd_decode:
        return f"decode: {spec.display}'s decode worker (it takes the transferred KV without a forward) is not " \
               "modelled yet"
    return None


def disagg_point(row: dict, line: int, start: str) -> Point:
    """The row as a P/D point: `prefill` and `decode` each a pool's fields (its workers, layout and launch), the
    closed loop of `concurrency` users under vllm bench serve (`start`), the KV link (`kv_link`)."""
    model, gpu = MODELS[row["model_path"]], GPUS[row["system"]]
    isl, osl, c = int(row["isl"]), int(row["osl"]), concurrency(row)
    fields = {"model": model, "gpu": gpu, "engine": row["backend"], "engine_version": row["backend_version"] or "?",
              "client": "vllm-bench", "concurrency": c, "isl": isl, "osl": osl, "id": row["id"], "start": start,
              "num_requests": max(8, 4 * c), "warmup_requests": c} | quantization_fields(row, model)
    gpus = 0
    for side in SIDES:
        pool = _pool(side_row(row, side), side, isl)
        fields[side] = pool
        gpus += pool["workers"] * pool["gpus"]
    fields["kv_link"] = kv_link(gpu, fields["prefill"]["gpus"], gpus)
    ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
    return Point(line, fields, {"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": ttft + (osl - 1) * tpot})


def _pool(sr: dict, side: str, isl: int) -> dict:
    """One pool's fields: its workers, each worker's GPUs, TP and engine flags, and its launch (the generator's)."""
    bs = int(sr["batch_size"])
    layout = _layout_fields(sr)
    layout.pop("ranks")
    tp = int(sr["tp_size"]) if _set(sr["tp_size"]) else 1
    pool = {"workers": int(sr[f"{side}_num_workers"]), "tp": tp, "gpus": layout.get("tp", tp)} | layout
    tokens = isl + TOKEN_SLACK if side == "prefill" else bs
    if sr["backend"] == "trtllm":
        tpb = TRTLLM_LAUNCH["tokens_per_block"]
        pool["trtllm"] = TRTLLM_LAUNCH | {"max_batch_size": bs, "max_num_tokens": -(-tokens // tpb) * tpb,
                                          "disable_overlap_scheduler": side == "prefill"}
    elif sr["backend"] == "sglang":  # (its decode server without the radix cache: SGLang's default there)
        pool["sglang"] = {"max_running_requests": bs, "max_prefill_tokens": isl + TOKEN_SLACK} | (
            {"disable_radix_cache": True} if side == "decode" else {})
    else:
        pool |= {"max_num_seqs": bs, "max_num_batched_tokens": tokens}
    return pool


def kv_link(gpu: str, worker_gpus: int, deployment_gpus: int) -> dict:
    """A prefill worker's KV link (bytes/s, seconds): NVLink inside one domain, the network beyond it; every
    GPU of the worker sending its share at once."""
    g = load_gpu(gpu)
    if deployment_gpus <= g.nvlink_domain:
        one, latency = g.interconnect_bandwidth / 2 * g.interconnect_efficiency, g.allreduce_latency
    else:
        one, latency = g.network_bandwidth * g.network_efficiency, g.network_latency
    return {"bandwidth": worker_gpus * one, "latency": latency}
