"""InferenceX's client (`servesim.clients.inferencex`) and the aic-silicon rows it replays."""

from datetime import date

import numpy as np
import pytest

from servesim.clients import inferencex
from servesim.engine.request import Request
from servesim.errors import ConfigError


def test_lengths_are_drawn_as_sample_random_requests_draws_them():
    # np.random.seed(0), then randint(int(L x 0.8), L + 1) for the inputs, then the outputs: ISL 10 in [8, 10],
    # OSL 5 in [4, 5]; numpy's legacy stream under seed 0 gives these
    assert inferencex.lengths(10, 5, 4) == ([8, 9, 8, 9], [5, 5, 4, 4])
    # the inputs come first: the same four inputs whatever the outputs' length
    assert inferencex.lengths(10, 1000, 4)[0] == [8, 9, 8, 9]
    # ISL 1024 at ratio 0.8: never below int(819.2) = 819 nor above 1024
    ins, _ = inferencex.lengths(1024, 1024, 10_000)
    assert (min(ins), max(ins)) == (819, 1024)


def test_the_load_of_a_point_before_and_after_the_warm_up_came():
    # CONC 2: 10C = 20 prompts; from 2026-01-21 (InferenceX d053ae24ea30) 2C = 4 warm-ups, copies of the first
    # sampled request; before, the one "initial single prompt test run" of that request
    load = inferencex.plan(10, 5, 2, date(2026, 4, 17))
    ins, outs = inferencex.lengths(10, 5, 20)
    assert load.concurrency == 2
    assert [(r.prompt_len, r.output_len) for r in load.benchmark] == list(zip(ins, outs, strict=True))
    # (the outputs are drawn after all 20 inputs, so the first request is (8, 4) here, not lengths(10, 5, 4)'s)
    assert [(r.prompt_len, r.output_len) for r in load.before] == [(ins[0], outs[0])] * 4 == [(8, 4)] * 4
    assert all(r.ignore_eos and r.arrival_time == 0.0 for r in (*load.before, *load.benchmark))
    assert len(inferencex.plan(10, 5, 2, date(2026, 1, 20)).before) == 1
    with pytest.raises(ConfigError, match="--random-range-ratio 1.5"):
        inferencex.plan(10, 5, 2, date(2026, 4, 17), ratio=1.5)


def test_the_send_pattern_by_hand():
    # toy cost (1 ms a decoding request, 0.1 ms a prompt token), C = 2. Warm-up, 4 x (100, 2): w0 and w1 prefill
    # [0, 20], decode [20, 22]; w2 and w3 [22, 42], [42, 44]. The benchmark is sent at 44: r0 (100, 3) and r1
    # (80, 2) prefill [44, 62], decode [62, 64] (r1 done: r2 sent); r0's decode beside r2's 90-token prefill
    # [64, 74] (r0 done: r3 sent); r2's decode beside r3's prefill [74, 85]; r3's decode [85, 86].
    # TTFT 18, 18, 10, 11 (mean 14.25); E2EL 30, 20, 21, 12 (mean 20.75); TPOT 12/2, 2, 11, 1 (mean 5); ITL over
    # the five gaps 2, 10, 2, 11, 1 (5.2); 9 tokens over [44, 86] ms
    from servesim.defaults import build_cost
    from servesim.engines.config import EngineConfig

    before = tuple(Request(f"w{i}", 0.0, 100, 2) for i in range(4))
    bench = (Request("r0", 0.0, 100, 3), Request("r1", 0.0, 80, 2), Request("r2", 0.0, 90, 2),
             Request("r3", 0.0, 100, 2))
    result, measured = inferencex.run(inferencex.Load(2, before, bench), EngineConfig(), "vllm", build_cost("toy"))
    t = result.timelines
    assert np.allclose(t.arrival_time * 1e3, [0, 0, 22, 22, 44, 44, 64, 74])
    assert np.allclose(t.finish_time * 1e3, [22, 22, 44, 44, 74, 64, 85, 86])
    assert measured.tolist() == [False] * 4 + [True] * 4
    assert inferencex.means(result, measured) == pytest.approx(
        {"ttft_ms": 14.25, "tpot_ms": 5.0, "itl_ms": 5.2, "e2el_ms": 20.75, "output_throughput": 9 / 0.042})


SILICON_HEAD = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
                "gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,"
                "silicon_ttft_ms,silicon_tpot_ms\n")
ROW = ",vllm,0.19.0,meta-llama/Llama-3.1-70B,h100_sxm,fp8,agg,1024,1024,fp8,,8,4,1,,,,100,10"


def _rows(tmp_path, sources):
    from servesim.validate.aic import read_silicon

    (tmp_path / "s.csv").write_text(SILICON_HEAD + "".join(f"{name},\"{src}\"{ROW}\n" for name, src in sources))
    return tmp_path / "s.csv", read_silicon


def test_each_row_is_replayed_by_the_client_its_source_names(tmp_path):
    # the file's silicon_data_source: InferenceX's database dump and dated exports -> InferenceX's client (its
    # warm-up from 2026-01-21, one test request before); AIConfigurator's gap analysis -> its aiperf script;
    # anything else -> vllm bench serve's staggered loop, as before
    path, read_silicon = _rows(tmp_path, [
        ("db", "db-dump/2026-04-27; config_id=60; silicon_concurrency=8; measured=2026-04-17T00:00:00.000Z; "
               "workflow_run_id=754; vllm/vllm-openai:v0.19.0-cu130"),
        ("csv", "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=8; "
                "measured=2025-10-29T00:00:00.000Z; wip=False"),
        ("gap", "source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/a.csv; silicon_concurrency=8"),
        ("mine", "my lab")])
    points, _ = read_silicon(path)
    db, csv, gap, mine = (p.fields for p in points)
    assert (db["source"], db["client"], db["measured"], db["num_requests"], db["warmup_requests"]) == (
        "db-dump", "inferencex", "2026-04-17", 80, 16)
    assert (csv["source"], csv["client"], csv["measured"], csv["warmup_requests"]) == (
        "inferencex-csv", "inferencex", "2025-10-29", 1)
    assert (gap["source"], gap["client"], gap["num_requests"], gap["warmup_requests"]) == (
        "gap-analysis", "aiperf", 160, 16)
    assert (mine["source"], mine["client"], mine["start"]) == ("other", "vllm-bench", "staggered")
    # --client and --start still say one client for every row
    assert {p.fields["client"] for p in read_silicon(path, client="aiperf")[0]} == {"aiperf"}
    assert {p.fields["start"] for p in read_silicon(path, start="together")[0]} == {"together"}
    with pytest.raises(ConfigError, match="--start sideways: expected staggered or together"):
        read_silicon(path, start="sideways")


def test_the_method_says_which_client_replayed_which_source(tmp_path):
    from servesim.validate.aic import method

    path, read_silicon = _rows(tmp_path, [("a", "db-dump/x; measured=2026-04-17"), ("b", "db-dump/y"),
                                          ("c", "kimi-k2.5-gap-analysis.csv; silicon_concurrency=8")])
    points, _ = read_silicon(path)
    assert points[1].fields["measured"] == "?" and points[1].fields["warmup_requests"] == 16  # (the newest client)
    assert method(points).startswith("clients by source: db-dump -> inferencex (2 rows); gap-analysis -> aiperf "
                                     "(1 rows) (InferenceX's benchmark_serving.py: random lengths in [0.8 L, L], "
                                     "10C prompts")


def test_an_inferencex_row_is_predicted_by_its_client(tmp_path):
    # the scorer runs the row's load as inferencex.plan sends it (toy cost: whatever the engine, the same means)
    from servesim.defaults import build_cost
    from servesim.engines.config import EngineConfig
    from servesim.validate.rows import Point
    from servesim.validate.score import predict

    f = {"model": "m", "gpu": "g", "engine": "vllm", "client": "inferencex", "concurrency": 2, "isl": 100,
         "osl": 3, "num_requests": 20, "measured": "2026-04-17", "cost": "toy"}
    load = inferencex.plan(100, 3, 2, date(2026, 4, 17))
    expected = inferencex.means(*inferencex.run(load, EngineConfig(), "vllm", build_cost("toy")))
    assert predict(Point(2, f, {"ttft_ms": 1.0})) == pytest.approx(expected)


def test_a_row_runs_the_launch_flags_of_inferencex_s_script(tmp_path):
    # Llama-3.1-70B, measured 2025-10-29 (benchmarks/70b_* at 9596d23d74e9): vLLM on H100 with --max-num-seqs
    # $CONC, max-num-batched-tokens 8192, an FP8 KV cache, --gpu-memory-utilization 0.9; TensorRT-LLM with
    # --max_num_tokens 16384 and no block reuse, the rest trtllm-serve's defaults (not AIConfigurator's generator)
    from servesim.validate.aic import read_silicon

    src = "\"db-dump/2026-04-27; measured=2025-10-29T00:00:00.000Z\""
    rows = [f"v,{src},vllm,,meta-llama/Llama-3.1-70B,h100_sxm,fp8,agg,1024,1024,fp8,,16,4,1,,,,100,10",
            f"t,{src},trtllm,,meta-llama/Llama-3.1-70B,h200_sxm,fp4,agg,1024,1024,nvfp4,,16,4,1,,,,100,10",
            # MiniMax-M2.5 on B200 from 2026-04-03 (minimaxm2.5_fp8_b200.sh@bddbf4031): 0.90, FP8 KV, 2 x ISL
            "m,\"db-dump/x; measured=2026-04-17T00:00:00.000Z\",vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,"
            "8192,1024,fp8,fp8,32,4,1,1,4,1,100,10",
            # the same before the script set them (2026-03-11, @f342df18e): --gpu-memory-utilization 0.95 only
            "n,\"db-dump/x; measured=2026-03-20T00:00:00.000Z\",vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,"
            "8192,1024,fp8,fp8,32,4,1,1,4,1,100,10",
            # DeepSeek under SGLang on H200 (dsr1_fp8_h200*.sh@9596d23d7): 1k/1k --max-running-requests 512, no
            # KV dtype given (SGLang's auto)
            "d,\"db-dump/x; measured=2026-03-25T00:00:00.000Z\",sglang,0.5.9,deepseek-ai/DeepSeek-V3,h200_sxm,fp8,"
            "agg,1024,1024,fp8,fp8_block,16,8,1,1,8,1,100,10",
            # a model and engine no script here covers: the engine's defaults, as before
            "q,\"db-dump/x; measured=2026-03-25T00:00:00.000Z\",vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,fp8,agg,1024,"
            "128,fp8,,16,2,1,,,,100,10"]
    (tmp_path / "s.csv").write_text(SILICON_HEAD + "\n".join(rows) + "\n")
    points, out = read_silicon(tmp_path / "s.csv")
    assert out == []
    v, t, m, n, d, q = (p.fields for p in points)
    assert (v["max_num_seqs"], v["max_num_batched_tokens"], v["kv_cache_dtype"], v["gpu_memory_utilization"],
            v["launch"]) == (16, 8192, "fp8", 0.9, "benchmarks/70b_fp8_*.sh@9596d23d74e9")
    assert (t["trtllm"], t["kv_cache_dtype"]) == ({"max_num_tokens": 16384, "enable_block_reuse": False}, "fp8")
    assert (m["gpu_memory_utilization"], m["kv_cache_dtype"], m["max_num_batched_tokens"], m["launch"]) == (
        0.90, "fp8", 16384, "minimaxm2.5_fp8_b200.sh@bddbf4031")
    # (and no --kv-cache-dtype: vLLM's auto, where AIConfigurator's fp8 precision profile reads an FP8 cache)
    assert (n["gpu_memory_utilization"], "max_num_batched_tokens" in n, n["kv_cache_dtype"]) == (0.95, False, "auto")
    assert (d["sglang"], d["kv_cache_dtype"]) == ({
        "chunked_prefill_size": 32768, "max_prefill_tokens": 32768, "mem_fraction_static": 0.82,
        "max_running_requests": 512, "disable_radix_cache": True}, "auto")
    assert "launch" not in q and "max_num_seqs" not in q and q["kv_cache_dtype"] == "fp8"


def test_deepseek_under_tensorrt_llm_takes_the_script_s_token_budget():
    # dsr1_*_trt*.sh: --max_num_tokens (C + ISL + 64) rounded up to 64: C = 4, ISL 1024 -> 1092 -> 1152; from
    # 64af5a771 (2026-01-21) at least 8192; the KV fraction 0.75 on H200, 0.8 on B200, and from ec7bafaae
    # (2026-01-29) 0.75 for B200 FP8 at 8k/1k on TP 4
    from servesim.validate.inferencex_launch import launch

    def trt(gpu, weights, day, isl=1024, osl=1024, tp=8):
        out = launch("deepseek-r1", "trtllm", gpu, weights, day, 4, isl, osl, tp)
        return out["trtllm"]["max_num_tokens"], out["trtllm"]["free_gpu_memory_fraction"], out["launch"]

    assert trt("h200", "fp8", date(2025, 11, 2)) == (1152, 0.75, "dsr1_fp8_h200_trt_slurm.sh@9596d23d7")
    assert trt("b200", "fp4", date(2026, 2, 6)) == (8192, 0.8, "dsr1_fp4_b200_trt.sh@64af5a771")
    # (8k/1k: 4 + 8192 + 64 = 8260 -> 8320, above the floor)
    assert trt("b200", "fp8", date(2026, 2, 5), 8192, 1024, 4) == (8320, 0.75, "dsr1_fp8_b200_trt.sh@ec7bafaae")
    assert launch("deepseek-r1", "trtllm", "gb200", "fp4", date(2025, 11, 16), 4, 1024, 1024, 8) is None
