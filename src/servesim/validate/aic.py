"""The `aic-silicon` source: AIConfigurator's measured points (`aiconfigurator_core/systems/silicon_sample.csv`,
Apache-2.0, inside the `aiconfigurator-core` wheel: `pip install 'servesim[aic]'`), read as deployments.

Each row is one point of a closed-loop concurrency sweep: `batch_size` requests in flight per engine, requests
of `isl` input and `osl` output tokens, mean TTFT and TPOT measured (and the mean E2E latency they
imply, TTFT + (osl - 1) x TPOT, scored beside them). Each row is replayed by the client its
`silicon_data_source` names (`source_of`, `client_of`): InferenceX's rows (its database dump, `db-dump/...`,
and its dated exports, `source_file=YYYY-MM-DD.csv`) by InferenceX's benchmark_serving.py
(`servesim.clients.inferencex`: lengths uniform in [0.8 L, L], 10C prompts behind max concurrency C, its
warm-up by the row's `measured=` date); AIConfigurator's gap-analysis rows by its aiperf script (below); any
other row, and every row under `--client vllm-bench` or `--start`, by vllm bench
serve's closed loop of `batch_size` (`--max-concurrency`) whose users start staggered, a C-th of a lone request's
latency apart (a desynchronised stream; `--start together` keeps them in waves), the loop's first `batch_size`
requests as warm-up (not measured), then 4 x `batch_size` (at least 8) measured. Or (`client="aiperf"`) as
AIConfigurator's own benchmark script sends a point (aiconfigurator `generator/config/backend_templates/
benchmark/bench_run.sh.j2`: `aiperf profile --concurrency C --num-requests 20C --warmup-request-count 2C
--streaming`, ISL and OSL stddev 0, `ignore_eos`): AIPerf's warm-up phase, then its profiling phase of 20
rounds, every user starting together (`servesim.clients.aiperf`). Either way the engine's defaults for the
GPU; NVFP4 (`--quantization modelopt_fp4`) where its GEMMs and experts are; FP8 weights where the row's GEMMs
are FP8; the checkpoint's own quantization where it has one (block-wise FP8: MiniMax-M2.5, DeepSeek-V3/R1,
Qwen3-235B-A22B-FP8; 4-bit experts: Kimi-K2.5; MXFP4 experts: gpt-oss-120b; their quantization_config, which
the engines read whatever the row's label says); the row's parallel layout under its engine's flags
(`_layout_reason`: vLLM's --data-parallel-size from attention_dp_size, or from a MoE that spans more GPUs than
tp_size, and --enable-expert-parallel; SGLang's --ep-size beside a MoE TP, --enable-dp-attention --dp-size), its
`batch_size` per attention-DP rank as AIConfigurator reads it (`global_bs = bs x attention_dp_size`). A TensorRT-LLM
row runs under `--policy trtllm` as AIConfigurator's generator launches an agg worker (`TRTLLM_LAUNCH`), its
layout TP with whole experts where `moe_ep_size` = `tp_size`. A row servesim cannot express yet is out of
reach, with the reason (a model or GPU it does not know, disaggregated serving, pipeline parallelism, TensorRT-LLM's
attention DP).
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

from servesim.cost.specs import load_model
from servesim.errors import ConfigError
from servesim.validate.rows import Point

MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
          "meta-llama/Llama-3.1-70B": "llama-3.1-70b", "Qwen/Qwen3-32B": "qwen3-32b",
          "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b-fp8",
          "deepseek-ai/DeepSeek-V3": "deepseek-v3", "deepseek-ai/DeepSeek-R1": "deepseek-r1",
          # NVIDIA's NVFP4 checkpoints: the base model's shapes (DeepSeek-V3.1's config has DeepSeek-V3's)
          "nvidia/DeepSeek-R1-NVFP4": "deepseek-r1", "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3",
          "nvidia/Qwen3-32B-NVFP4": "qwen3-32b", "moonshotai/Kimi-K2.5": "kimi-k2.5",
          "openai/gpt-oss-120b": "gpt-oss-120b", "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b",
          # (its rows are FP8 GEMMs beside block-FP8 experts: zai-org's block-wise FP8 checkpoint)
          "zhipuai/GLM-5": "glm-5-fp8"}
# NVIDIA's NVFP4 checkpoints that keep some linear layers in 16 bits, as the built-in that reads their
# quantization_config (nvidia/Qwen3.5-397B-A17B-NVFP4: attention, linear attention and the shared experts), or
# None where servesim has no config of it (nvidia/GLM-5-NVFP4 keeps attention and the DSA indexer in 16 bits in its
# hf_quant_config.json, which its config.json does not carry): --quantization modelopt_fp4 on the base model would
# quantize every linear layer
NVFP4_CHECKPOINTS = {"qwen3.5-397b-a17b": "qwen3.5-397b-a17b-nvfp4", "glm-5-fp8": None}
GPUS = {"h100_sxm": "h100-80gb", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
        "gb300": "gb300"}
ENGINES = ("vllm", "sglang", "trtllm")
# TensorRT-LLM's agg worker as AIConfigurator's generator writes its LLM API options (aiconfigurator 0.12.0,
# generator/rule_plugin/benchmark/trtllm.rule: `agg disable_overlap_scheduler = false`, tokens_per_block 32,
# max_num_tokens = (max_batch_size + isl + 1500) rounded up to the block; backend_templates/trtllm/
# extra_engine_args.*.yaml.j2's defaults: enable_chunked_prefill false, free_gpu_memory_fraction 0.80,
# enable_block_reuse false, no max_seq_len; kv_cache_config.dtype the precision profile's KV, fp8 under nvfp4,
# sdk/task_v1_compat.py), max_batch_size the row's batch_size (`module_bridge`: the sdk's bs)
TRTLLM_LAUNCH = {"enable_chunked_prefill": False, "free_gpu_memory_fraction": 0.80, "enable_block_reuse": False,
                 "tokens_per_block": 32, "disable_overlap_scheduler": False}
TRTLLM_MAX_NUM_TOKENS_SLACK = 1500
MEASURED_WAVES, MIN_MEASURED = 4, 8
AIPERF_ROUNDS, AIPERF_WARMUP_ROUNDS = 20, 2  # bench_run.sh.j2: BENCH_MULTI_ROUND's default, the 2C warm-up
CLIENTS = ("vllm-bench", "aiperf", "inferencex")
MODES = ("agg", "disagg")


def silicon_csv() -> Path:
    try:
        import aiconfigurator_core
    except ImportError:
        raise ConfigError("validate aic-silicon needs aiconfigurator-core (AIConfigurator's measured points): "
                          "pip install 'servesim[aic]'") from None
    path = Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv"
    if not path.is_file():
        raise ConfigError(f"{path}: not in this aiconfigurator-core; expected systems/silicon_sample.csv")
    return path


def read_silicon(path: Path | None = None, start: str | None = None, client: str | None = None,
                 mode: str | None = None) -> tuple[list[Point], list[tuple[int, str]]]:
    """(the rows servesim can express, as points; every other row's line and reason). Each row under the client
    its source names (`client_of`), unless `client` says one for all: vllm-bench (`start`: how its closed
    loop's users start, `rows.py`: staggered, a desynchronised stream, or together, in waves), aiperf
    (AIConfigurator's benchmark script; its users start together) or inferencex (InferenceX's). `mode`: only the
    rows of that mode (agg or disagg; None: all). A disagg row is a P/D deployment (`servesim.validate.aic_disagg`)
    under vllm bench serve's closed loop (`start`, staggered by default), whatever its source."""
    import polars as pl

    from servesim.validate.aic_disagg import disagg_point, disagg_reason

    if client is not None and client not in CLIENTS:
        raise ConfigError(f"--client {client}: aic-silicon replays its rows under {', '.join(CLIENTS)}")
    if start not in (None, "staggered", "together"):
        raise ConfigError(f"--start {start}: expected staggered or together")
    if start is not None and client not in (None, "vllm-bench"):
        raise ConfigError(f"--start sets how vllm-bench's loop starts; under --client {client} its own client "
                          "starts it")
    if start is not None:
        client = "vllm-bench"
    if mode not in (None, *MODES):
        raise ConfigError(f"--mode {mode}: expected one of {', '.join(MODES)}")
    path = path or silicon_csv()
    df = pl.read_csv(path, infer_schema_length=0)
    points, out = [], []
    for i, row in enumerate(df.iter_rows(named=True)):
        line = i + 2
        if mode is not None and row["mode"] != mode:
            continue
        if row["mode"] == "disagg":
            why = disagg_reason(row) or (None if client in (None, "vllm-bench") else
                                         "a P/D deployment under AIPerf's paced sends is not modelled yet")
            if why:
                out.append((line, f"{row['id']}: {why}"))
            else:
                point = disagg_point(row, line, start or "staggered")
                point.fields["source"] = source_of(row["silicon_data_source"])
                points.append(point)
            continue
        why = _out_of_reach(row)
        if why:
            out.append((line, f"{row['id']}: {why}"))
            continue
        layout = _layout_fields(row)
        # AIConfigurator's batch_size is per attention-DP rank (its `global_bs = bs x attention_dp_size`)
        c = int(row["batch_size"]) * layout.pop("ranks")
        fields = {"model": MODELS[row["model_path"]], "gpu": GPUS[row["system"]], "engine": row["backend"],
                  "engine_version": row["backend_version"] or "?", "tp": int(row["tp_size"]),
                  "concurrency": c, "isl": int(row["isl"]), "osl": int(row["osl"]), "id": row["id"],
                  "source": source_of(row["silicon_data_source"])} | layout
        fields |= client_fields(client or client_of(fields["source"]), c, row["silicon_data_source"], start)
        fields |= quantization_fields(row, fields["model"])
        if row["backend"] == "trtllm":
            fields["trtllm"] = trtllm_launch(int(row["batch_size"]), fields["isl"])  # (per attention-DP rank)
        if fields["client"] == "inferencex":
            fields |= _inferencex_launch(fields, row["precision"])
        ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
        # the mean E2E latency the two means imply: with every request `osl` tokens, each request's TPOT is
        # (e2el - ttft) / (osl - 1), so mean e2el = mean ttft + (osl - 1) x mean tpot exactly; it scores the
        # engine and cost model apart from how the client's waves split a request's life into TTFT and TPOT
        measured = {"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": ttft + (fields["osl"] - 1) * tpot}
        points.append(Point(line, fields, measured))
    return points, out


def quantization_fields(row: dict, model: str) -> dict:
    """The row's weights and KV cache as servesim's `quantization` and `kv_cache_dtype` (and `model`: NVIDIA's
    NVFP4 checkpoint of it, where servesim has its own config)."""
    out = {}
    if _mxfp4_checkpoint(model):  # (gpt-oss's MXFP4 experts, whatever the row's label says)
        out["quantization"] = "mxfp4"
    elif row["gemm_quant_mode"] == "nvfp4":  # an NVFP4 checkpoint of the model (NVIDIA's ModelOpt ones)
        out["quantization"] = "modelopt_fp4"
        out["model"] = NVFP4_CHECKPOINTS.get(model) or model
    elif row["gemm_quant_mode"] == "fp8" or _block_checkpoint(model):
        out["quantization"] = "fp8"  # (a block-wise FP8 checkpoint is served as one: its own config)
    if row["backend"] == "trtllm" and row["gemm_quant_mode"] == "nvfp4":  # the generator's kv_cache_config.dtype:
        out["kv_cache_dtype"] = "fp8"  # the nvfp4 profile's fp8
    if row["precision"] == "fp8":  # AIConfigurator's fp8 precision profile: FP8 GEMMs and an FP8 KV cache
        out["kv_cache_dtype"] = "fp8"
    return out


def source_of(text: str) -> str:
    """Where a row was measured, from its `silicon_data_source`: `db-dump` (InferenceX's database dump),
    `inferencex-csv` (a dated InferenceX export, `source_file=YYYY-MM-DD.csv; model=...`: InferenceX's models,
    its 1k/1k, 1k/8k and 8k/1k points and its concurrency ladder), `gap-analysis` (AIConfigurator's own
    gap-analysis runs: `.../aic-auto-gap-analysis/...`, `kimi-k2.5-gap-analysis.csv`), or `other`."""
    if text.startswith("db-dump/"):
        return "db-dump"
    if re.match(r"source_file=\d{4}-\d{2}-\d{2}\.csv;", text):
        return "inferencex-csv"
    return "gap-analysis" if "gap-analysis" in text else "other"


def client_of(source: str) -> str:
    """The client a source's rows were measured with: InferenceX's for its rows, AIConfigurator's benchmark
    script (aiperf) for its gap analysis, vllm bench serve's staggered loop (servesim's earlier guess) else."""
    return {"db-dump": "inferencex", "inferencex-csv": "inferencex", "gap-analysis": "aiperf"}.get(source,
                                                                                                  "vllm-bench")


def client_fields(client: str, c: int, source_text: str, start: str | None) -> dict:
    """The point's client and its load as that client sends a closed loop of `c`."""
    if client == "aiperf":
        return {"client": client, "num_requests": AIPERF_ROUNDS * c, "warmup_requests": AIPERF_WARMUP_ROUNDS * c}
    if client == "inferencex":
        from servesim.clients import inferencex

        when = measured_on(source_text)  # (none given: the newest client, with its warm-up)
        warm = when is None or when >= inferencex.WARMUPS_FROM
        return {"client": client, "num_requests": inferencex.PROMPTS_PER_USER * c,
                "measured": when.isoformat() if when else "?",
                "warmup_requests": inferencex.WARMUPS_PER_USER * c if warm else 1}
    return {"client": client, "start": start or "staggered", "num_requests": max(MIN_MEASURED, MEASURED_WAVES * c),
            "warmup_requests": c}


def measured_on(source_text: str) -> date | None:
    """The `measured=` date of a row's source (InferenceX's client changed on 2026-01-21), None where it has
    none."""
    m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", source_text)
    return date.fromisoformat(m.group(1)) if m else None


def method(points: list[Point]) -> str:
    """Which client replayed the rows, by source, for the printed method."""
    from collections import Counter

    counts = Counter((p.fields["source"], p.fields["client"]) for p in points)
    return "clients by source: " + "; ".join(f"{s} -> {c} ({n} rows)" for (s, c), n in sorted(counts.items())) + \
        (" (InferenceX's benchmark_serving.py: random lengths in [0.8 L, L], 10C prompts, max concurrency C, "
         "2C warm-ups from 2026-01-21, one test request before; AIConfigurator's bench_run.sh.j2: aiperf, 2C "
         "warm-up, 20C measured)")


def _inferencex_launch(fields: dict, precision: str) -> dict:
    """The flags InferenceX's script launched the row's server with, where one clearly applies
    (`servesim.validate.inferencex_launch`); else nothing (the engine's defaults, as before)."""
    from servesim.validate.inferencex_launch import launch

    when = None if fields["measured"] == "?" else date.fromisoformat(fields["measured"])
    if fields.get("enable_dp_attention") or fields.get("data_parallel_size") or fields.get("enable_attention_dp"):
        return {}  # (the scripts' data-parallel branches are not read here)
    return launch(fields["model"], fields["engine"], fields["gpu"], precision, when, fields["concurrency"],
                  fields["isl"], fields["osl"], fields["tp"]) or {}


def trtllm_launch(batch_size: int, isl: int) -> dict:
    """The `EngineConfig.trtllm` fields of a TensorRT-LLM row (`TRTLLM_LAUNCH`)."""
    tpb = TRTLLM_LAUNCH["tokens_per_block"]
    tokens = -(-(batch_size + isl + TRTLLM_MAX_NUM_TOKENS_SLACK) // tpb) * tpb
    return TRTLLM_LAUNCH | {"max_batch_size": batch_size, "max_num_tokens": tokens}


def _out_of_reach(row: dict) -> str | None:
    if row["mode"] != "agg":
        return f"{row['mode']} serving with a closed-loop client is not modelled yet"
    if row["model_path"] not in MODELS:
        return f"model {row['model_path']} is not a servesim model yet"
    if row["system"] not in GPUS:
        return f"GPU {row['system']} is not a servesim GPU yet"
    if row["backend"] not in ENGINES:
        return f"engine {row['backend']} has no servesim scheduler yet"
    if _set(row["pp_size"]):
        return f"pp_size {row['pp_size']} is not modelled yet"
    why = _layout_reason(row)
    if why or _mxfp4_checkpoint(MODELS[row["model_path"]]):
        return why
    gemm, moe = row["gemm_quant_mode"], row["moe_quant_mode"]
    model = MODELS[row["model_path"]]
    if "nvfp4" in (gemm, moe) and model in NVFP4_CHECKPOINTS and NVFP4_CHECKPOINTS[model] is None:
        return f"nvfp4 rows of {row['model_path']}: NVIDIA's checkpoint keeps attention in 16 bits, and servesim " \
               "has no config of it"
    if "nvfp4" in (gemm, moe) and (gemm != "nvfp4" or moe not in (None, "", "nvfp4")):
        return f"{gemm} GEMMs beside {moe} experts are not modelled yet"
    for name in ("gemm_quant_mode", "moe_quant_mode"):
        if row[name] == "int4_wo":  # the checkpoint's own 4-bit weights (Kimi-K2.5's routed experts)
            if load_model(MODELS[row["model_path"]]).quant_method != "compressed-tensors":
                return f"int4_wo weights of {row['model_path']}: servesim has no 4-bit checkpoint of it"
        elif row[name] not in (None, "", "fp8", "fp8_block", "nvfp4"):
            return f"{row[name]} weights are not modelled yet"
        if row[name] == "fp8_block" and not _block_checkpoint(MODELS[row["model_path"]]):
            return f"fp8_block weights of {row['model_path']}: servesim has its checkpoint in BF16 only"
    return None


def _sizes(row: dict) -> tuple[int, int, int, int]:
    """(tp, attention DP, MoE TP, MoE EP) of a row, 1 where the file leaves one unset (0 or empty)."""
    def size(name: str) -> int:
        return int(row[name]) if _set(row[name]) else 1

    tp, dp, mtp, ep = size("tp_size"), size("attention_dp_size"), size("moe_tp_size"), size("moe_ep_size")
    if not _set(row["moe_tp_size"]) and not _set(row["moe_ep_size"]):
        mtp = tp * dp  # (a dense model's row, or a MoE row that says nothing: the experts over every GPU by width)
    return tp, dp, mtp, ep


def _layout_reason(row: dict) -> str | None:
    """Why the row's layout is not one its engine's flags give (None: it is). vLLM (`--tensor-parallel-size tp
    --data-parallel-size dp`): the experts over tp x dp GPUs, by width (MoE TP tp x dp) or whole with
    --enable-expert-parallel (EP tp x dp); a row without attention_dp_size whose MoE spans more GPUs than tp is
    read as DP ranks of it (vLLM's DP without EP: MoE TP tp x dp). SGLang (`--tp-size`, all the GPUs: tp x dp
    here, the file's tp_size being attention's per rank): EP --ep-size, MoE TP the rest; attention DP with
    --enable-dp-attention --dp-size."""
    tp, dp, mtp, ep = _sizes(row)
    if row["backend"] == "trtllm":  # (TensorRT-LLM's Mapping: attention DP one rank a GPU; MoE TP x EP the GPUs)
        if dp > 1 and tp > 1:
            return f"tp_size {tp} x attention_dp_size {dp}: not a TensorRT-LLM layout (enable_attention_dp runs " \
                   "attention one rank a GPU)"
        if mtp * ep != tp * dp:
            return f"moe_tp_size {mtp} x moe_ep_size {ep} beside tp_size {tp} x attention_dp_size {dp}: not a " \
                   "TensorRT-LLM layout (the experts span the GPUs)"
        return None
    if row["backend"] == "vllm":
        gpus = mtp * ep
        if gpus % tp or (dp > 1 and gpus != tp * dp):
            return f"moe_tp_size {mtp} x moe_ep_size {ep} beside tp_size {tp} x attention_dp_size {dp}: not a vLLM " \
                   "layout (the experts span TP x DP GPUs)"
        if ep > 1 and mtp > 1:
            return f"moe_tp_size {mtp} beside moe_ep_size {ep}: vLLM's experts are whole (EP) or split (TP), not both"
        return None
    if mtp * ep != tp * dp:
        return f"moe_tp_size {mtp} x moe_ep_size {ep} beside tp_size {tp} x attention_dp_size {dp}: not an SGLang " \
               "layout (its --tp-size GPUs hold the experts)"
    return None


def _layout_fields(row: dict) -> dict:
    """The row's layout as its engine's flags, and its data-parallel ranks (`ranks`)."""
    tp, dp, mtp, ep = _sizes(row)
    if row["backend"] == "trtllm":  # (its LLM API's names; tensor_parallel_size is all the GPUs)
        if dp == 1 and ep == 1:
            return {"ranks": 1}  # (plain TP)
        return {"ranks": dp, "tp": tp * dp, "moe_tensor_parallel_size": mtp, "moe_expert_parallel_size": ep} | (
            {"enable_attention_dp": True} if dp > 1 else {})
    if row["backend"] == "vllm":
        dp = mtp * ep // tp
        out = {"ranks": dp} | ({"data_parallel_size": dp} if dp > 1 else {})
        return out | ({"enable_expert_parallel": True} if ep > 1 else {})
    # (AIConfigurator's tp_size is attention's, per rank: SGLang's --tp-size is all of them)
    out = {"ranks": dp} | ({"enable_dp_attention": True, "dp_size": dp, "tp": tp * dp} if dp > 1 else {})
    return out | ({"ep_size": ep} if ep > 1 else {})


def _block_checkpoint(model: str) -> bool:
    """Whether a built-in model's checkpoint is block-wise FP8 (its quantization_config), as vLLM and SGLang
    then serve it whatever the row's label."""
    return load_model(model).weight_block_size is not None


def _mxfp4_checkpoint(model: str) -> bool:
    """Whether a built-in model's checkpoint is MXFP4 (gpt-oss's quantization_config), which vLLM, SGLang and
    TensorRT-LLM serve as it is: the silicon file labels gpt-oss's rows nvfp4 (or fp8), its own precision
    profiles' names, not the checkpoint's."""
    return load_model(model).quant_method == "mxfp4"


def _set(value: str | None) -> bool:
    """Whether a parallel size is more than one (the file writes 0 or nothing where it is not set)."""
    return value not in (None, "", "0", "1")
