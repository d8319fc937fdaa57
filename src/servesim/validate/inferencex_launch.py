"""InferenceX's server launch flags for an aic-silicon row it measured, where its script clearly gives them.

Read in SemiAnalysisAI/InferenceX's per-model scripts, the version in effect on the row's `measured=` date (a
script changed on a day counts from that day: InferenceX runs a sweep on the change that triggers it):
- Llama-3.1-70B (every row measured 2025-10-29; `benchmarks/70b_*` at 9596d23d74e9): vLLM on H100 and H200
  `--max-num-seqs $CONC`, on B200 512, and everywhere `max-num-batched-tokens: 8192`, `kv-cache-dtype: fp8`,
  `--gpu-memory-utilization 0.9`, `async-scheduling: true` (vLLM's default anyway); TensorRT-LLM
  `trtllm-serve --max_num_tokens 16384` with `kv_cache_config: {dtype: fp8, enable_block_reuse: false}`, the
  rest trtllm-serve's defaults (max_batch_size 2048, KV fraction 0.9, chunked prefill off, overlap scheduler on);
- MiniMax-M2.5 and Kimi-K2.5 under vLLM (`benchmarks/single_node/minimaxm2.5_*.sh`, `kimik2.5_*.sh`; the commit
  that set each version is named in `VLLM`).
Only the flags servesim models are taken: `--max-num-seqs`, `--max-num-batched-tokens`,
`--gpu-memory-utilization`, `--kv-cache-dtype fp8` (a script that gives none runs the engine's auto: the
model's dtype, where AIConfigurator's fp8 precision profile said FP8),
and TensorRT-LLM's `max_num_tokens` and block reuse. Not modelled, and so dropped: `--block-size 32`,
`--stream-interval`, CUDA-graph sizes, `--no-enable-prefix-caching` (random prompts share nothing), TensorRT-LLM's
`batch_wait_*` (set for 1k/1k below TP 8). DeepSeek's SGLang and TensorRT-LLM recipes (flags by CONC, ISL and TP,
rewritten over the rows' dates) and InferenceX's multi-node GB200 runs are not taken yet: those rows keep the
engine's defaults (TensorRT-LLM: AIConfigurator's generator launch), as before.
"""

from __future__ import annotations

from datetime import date

# (model, engine, gpu, weights: "fp8" | "fp4" | "int4") -> [(from date, flags, script at commit)], oldest first;
# a flag "C" is the row's concurrency, "2ISL" twice its input length
VLLM: dict[tuple[str, str, str], list[tuple[date, dict, str]]] = {
    ("minimax-m2.5", "h100-80gb", "fp8"): [
        (date(2026, 3, 2), {"gpu_memory_utilization": 0.90, "max_num_seqs": 256}, "minimaxm2.5_fp8_h100.sh@ac0d2a853")],
    ("minimax-m2.5", "h200", "fp8"): [
        (date(2026, 3, 1), {"gpu_memory_utilization": 0.95}, "minimaxm2.5_fp8_h200.sh@a36346339")],
    ("minimax-m2.5", "b200", "fp8"): [
        (date(2026, 3, 11), {"gpu_memory_utilization": 0.95}, "minimaxm2.5_fp8_b200.sh@f342df18e"),
        (date(2026, 4, 3), {"gpu_memory_utilization": 0.90, "kv_cache_dtype": "fp8", "max_num_batched_tokens": "2ISL"},
         "minimaxm2.5_fp8_b200.sh@bddbf4031")],
    ("minimax-m2.5", "b200", "fp4"): [
        (date(2026, 4, 8), {"gpu_memory_utilization": 0.90, "kv_cache_dtype": "fp8", "max_num_batched_tokens": "2ISL"},
         "minimaxm2.5_fp4_b200.sh@79bd988e9")],
    ("minimax-m2.5", "b300", "fp8"): [
        (date(2026, 4, 17), {"gpu_memory_utilization": 0.90, "kv_cache_dtype": "fp8", "max_num_batched_tokens": "2ISL"},
         "minimaxm2.5_fp8_b300.sh@340d7854c")],
    ("minimax-m2.5", "b300", "fp4"): [
        (date(2026, 4, 17), {"gpu_memory_utilization": 0.90, "kv_cache_dtype": "fp8", "max_num_batched_tokens": "2ISL"},
         "minimaxm2.5_fp4_b300.sh@22d0f12f7")],
    ("kimi-k2.5", "h200", "int4"): [
        (date(2026, 3, 2), {"gpu_memory_utilization": 0.95, "max_num_seqs": "C"}, "kimik2.5_int4_h200.sh@749096c4c")],
    ("kimi-k2.5", "b200", "int4"): [
        (date(2026, 2, 23), {"gpu_memory_utilization": 0.95, "max_num_seqs": "C"}, "kimik2.5_int4_b200.sh@eb02101ef")],
    ("kimi-k2.5", "b200", "fp4"): [
        (date(2026, 3, 11), {"gpu_memory_utilization": 0.90, "max_num_seqs": "C"}, "kimik2.5_fp4_b200.sh@a58dedd5a"),
        (date(2026, 4, 20), {"gpu_memory_utilization": 0.90, "max_num_seqs": "C", "kv_cache_dtype": "fp8",
                             "max_num_batched_tokens": "2ISL"}, "kimik2.5_fp4_b200.sh@6c3acebfa")],
    ("kimi-k2.5", "b300", "fp4"): [
        (date(2026, 4, 20), {"gpu_memory_utilization": 0.90, "max_num_seqs": "C"}, "kimik2.5_fp4_b300.sh@f34a83b25")],
}
LLAMA_70B_DAY = date(2025, 10, 29)
LLAMA_70B_VLLM = {"max_num_batched_tokens": 8192, "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.9}
LLAMA_70B_TRTLLM = {"max_num_tokens": 16384, "enable_block_reuse": False}


# DeepSeek-R1 under SGLang (`benchmarks/dsr1_{fp4,fp8}_{b200,b300,h200}*.sh`, unchanged in these flags from the
# commit named to 626932a11, 2026-03-27): (gpu, weights) -> (from, script@commit, server args, FP8 KV)
DSR1_SGLANG = {
    ("b200", "fp4"): (date(2025, 10, 1), "dsr1_fp4_b200*.sh@4b860b78e", {
        "chunked_prefill_size": 16384, "max_running_requests": 256, "mem_fraction_static": 0.85}, True),
    ("b300", "fp4"): (date(2026, 4, 17), "dsr1_fp4_b300.sh@9ebeafb4e", {
        "chunked_prefill_size": 16384, "max_running_requests": 256, "mem_fraction_static": 0.85}, True),
    ("b200", "fp8"): (date(2025, 10, 1), "dsr1_fp8_b200*.sh@4b860b78e", {
        "chunked_prefill_size": 32768, "max_prefill_tokens": 32768, "max_running_requests": 128,
        "mem_fraction_static": 0.82}, True),
    ("b300", "fp8"): (date(2026, 4, 17), "dsr1_fp8_b300.sh@5b302f147", {
        "chunked_prefill_size": 32768, "max_prefill_tokens": 32768, "max_running_requests": 128,
        "mem_fraction_static": 0.82}, True),
    ("h200", "fp8"): (date(2025, 10, 29), "dsr1_fp8_h200*.sh@9596d23d7", {
        "chunked_prefill_size": 32768, "max_prefill_tokens": 32768, "mem_fraction_static": 0.82}, False),
}
# the fp8 B200/B300 scripts' TP 4 branch (1d29967c4, 2026-01-13; 8k/1k only)
DSR1_SGLANG_FP8_TP4 = (date(2026, 1, 13), {"chunked_prefill_size": 8192, "max_prefill_tokens": 8192,
                                           "max_running_requests": 32, "mem_fraction_static": 0.95})

# DeepSeek-R1 under TensorRT-LLM (`benchmarks/dsr1_{fp4,fp8}_{b200,h200}_trt[_slurm].sh`, read at each change from
# 9596d23d7 to ec7bafaae): `--max_num_tokens` (C + ISL + 64) rounded up to 64 tokens, from 64af5a771 (2026-01-21)
# at least 8192; `kv_cache_config: {dtype: fp8, free_gpu_memory_fraction: F, enable_block_reuse: false}`
DSR1_TRTLLM_FRACTION = {("b200", "fp4"): 0.8, ("b200", "fp8"): 0.8, ("h200", "fp8"): 0.75}
DSR1_TRTLLM_FLOOR_FROM = date(2026, 1, 21)  # 64af5a771: MAX_NUM_TOKENS > 8192 ? MAX_NUM_TOKENS : 8192
DSR1_FP8_B200_BY_LOAD_FROM = date(2026, 1, 29)  # ec7bafaae: the KV fraction by ISL/OSL, CONC and TP


def launch(model: str, engine: str, gpu: str, weights: str, measured: date | None, c: int, isl: int,
           osl: int = 0, tp: int = 1) -> dict | None:
    """The row's fields from InferenceX's script (`launch`: which script, at which commit), or None where no
    script clearly applies (the engine's defaults, as before)."""
    if measured is None:
        return None
    if model in ("deepseek-r1", "deepseek-v3") and engine == "trtllm":
        return _dsr1_trtllm(gpu, weights, measured, c, isl, osl, tp)
    if model in ("deepseek-r1", "deepseek-v3") and engine == "sglang":
        return _dsr1_sglang(gpu, weights, measured, c, isl, osl, tp)
    if model == "llama-3.1-70b" and measured == LLAMA_70B_DAY:
        if engine == "trtllm":
            return {"trtllm": dict(LLAMA_70B_TRTLLM), "kv_cache_dtype": "fp8",
                    "launch": f"benchmarks/70b_{weights}_*_trt_*.sh@9596d23d74e9"}
        if engine == "vllm":
            seqs = c if gpu in ("h100-80gb", "h200") else 512
            return LLAMA_70B_VLLM | {"max_num_seqs": seqs, "launch": f"benchmarks/70b_{weights}_*.sh@9596d23d74e9"}
        return None
    if engine != "vllm":
        return None
    versions = [v for v in VLLM.get((model, gpu, weights), []) if v[0] <= measured]
    if not versions:
        return None
    _, flags, script = versions[-1]
    subst = {"C": c, "2ISL": 2 * isl}
    flags = {"kv_cache_dtype": "auto"} | flags  # (no --kv-cache-dtype: vLLM's auto, the model's dtype)
    return {k: subst.get(v, v) if isinstance(v, str) and k != "kv_cache_dtype" else v for k, v in flags.items()} | {
        "launch": script}


def _dsr1_trtllm(gpu: str, weights: str, measured: date, c: int, isl: int, osl: int, tp: int) -> dict | None:
    fraction = DSR1_TRTLLM_FRACTION.get((gpu, weights))
    if fraction is None or measured < date(2025, 10, 29):
        return None  # (GB200: InferenceX's multi-node Dynamo recipes, not these scripts)
    tokens = -(-(c + isl + 64) // 64) * 64
    if measured >= DSR1_TRTLLM_FLOOR_FROM:
        tokens = max(tokens, 8192)
    script = f"dsr1_{weights}_{gpu}_trt{'' if measured >= date(2026, 1, 22) else '_slurm'}.sh"
    commit = "64af5a771" if measured >= DSR1_TRTLLM_FLOOR_FROM else "9596d23d7"
    if (gpu, weights) == ("b200", "fp8") and measured >= DSR1_FP8_B200_BY_LOAD_FROM:
        commit = "ec7bafaae"
        if (isl, osl) == (1024, 8192) and c >= 256:
            fraction = 0.7
        elif (isl, osl) == (8192, 1024) and tp == 4:
            fraction = 0.75
    return {"trtllm": {"max_num_tokens": tokens, "free_gpu_memory_fraction": fraction, "enable_block_reuse": False},
            "kv_cache_dtype": "fp8", "launch": f"{script}@{commit}"}


def _dsr1_sglang(gpu: str, weights: str, measured: date, c: int, isl: int, osl: int, tp: int) -> dict | None:
    """Every version also passes `--disable-radix-cache` and `--scheduler-recv-interval` (10, or 30 from CONC
    16 on B200 and B300), which servesim does not model yet; H200's `--max-running-requests` is 512 at 1k/1k,
    else 256; H200 gives no `--kv-cache-dtype` (SGLang's auto: the model's BF16)."""
    entry = DSR1_SGLANG.get((gpu, weights))
    if entry is None or measured < entry[0]:
        return None
    since, script, args, fp8_kv = entry
    args = dict(args) | {"disable_radix_cache": True}
    if gpu == "h200":
        args["max_running_requests"] = 512 if (isl, osl) == (1024, 1024) else 256
    if tp > 8:
        return None  # (more GPUs than one node: InferenceX's multi-node recipes, not these scripts)
    if weights == "fp8" and gpu != "h200" and tp == 4:
        if measured < DSR1_SGLANG_FP8_TP4[0]:
            return None  # (no TP 4 branch in the script then)
        args |= DSR1_SGLANG_FP8_TP4[1]
        script = script.replace("4b860b78e", "1d29967c4")
    if c > args["max_running_requests"]:
        return None  # (a row with more users than the script's cap was not run by this version of it)
    return {"sglang": args, "kv_cache_dtype": "fp8" if fp8_kv else "auto", "launch": script}
