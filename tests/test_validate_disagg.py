"""`validate aic-silicon`'s disaggregated rows (issues 25/26): each row read as the P/D deployment it measured
(`servesim.validate.aic_disagg`) and replayed on a P/D cluster under a closed loop (`servesim.validate.disagg`)."""

from __future__ import annotations

import pytest

from servesim.validate.rows import Point

# aiconfigurator_core/systems/silicon_sample.csv's columns, in its order
HEAD = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,"
        "moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,"
        "prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,"
        "prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,"
        "decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n")
ROWS = [
    # TensorRT-LLM on a GB200 rack: 1 prefill worker (TP 4, EP 4, batch 1) + 2 decode workers (TP 4, EP 4, batch 32)
    "trt_c64_x,silicon_concurrency=64,trtllm,1.2.0,deepseek-ai/DeepSeek-V3,gb200,fp4,disagg,1024,1024,nvfp4,nvfp4,"
    ",,,,,,1,1,4,1,1,1,4,32,2,4,1,1,1,4,200,10",
    # vLLM on H100 boards, no concurrency stated: 2 prefill workers (TP 2, batch 1) + 3 decode workers (TP 2, 48)
    "vllm_c_tp,source_file=x.csv,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,fp8,disagg,4000,1000,fp8,fp8,"
    ",,,,,,1,2,2,1,1,0,0,48,3,2,1,1,0,0,300,20",
    "id_c8_only,source_file=x.csv,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,fp8,disagg,4000,1000,fp8,fp8,"
    ",,,,,,1,1,2,1,1,0,0,48,1,2,1,1,0,0,300,20",
    # out of reach, one reason each
    "noworkers_c5_x,silicon_concurrency=5,trtllm,1.2.0,deepseek-ai/DeepSeek-V3,gb200,fp4,disagg,1024,1024,nvfp4,"
    "nvfp4,,,,,,,,,4,1,1,4,1,,,4,1,1,4,1,900,11",
    "trtdp_c4_x,silicon_concurrency=4,trtllm,1.2.0,deepseek-ai/DeepSeek-V3,gb200,fp4,disagg,1024,1024,nvfp4,nvfp4,"
    ",,,,,,1,1,1,1,4,1,4,1,4,8,1,1,1,8,200,5",
    "sgldp_c8_x,silicon_concurrency=8,sglang,0.5.8,deepseek-ai/DeepSeek-V3,gb200,fp4,disagg,1024,1024,nvfp4,nvfp4,"
    ",,,,,,1,1,4,1,1,4,1,1,1,1,1,8,1,8,200,5",
    "sgl_c8_x,silicon_concurrency=8,sglang,0.5.8,deepseek-ai/DeepSeek-V3,gb200,fp4,disagg,1024,1024,nvfp4,nvfp4,"
    ",,,,,,1,1,4,1,1,4,1,8,1,4,1,1,4,1,200,5",
    "glm_c8_x,silicon_concurrency=8,trtllm,1.2.0,zhipuai/GLM-4.6,gb200,fp4,disagg,1024,1024,nvfp4,nvfp4,"
    ",,,,,,1,1,1,1,1,1,1,8,1,1,1,1,1,1,200,5",
]


@pytest.fixture
def silicon(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(HEAD + "\n".join(ROWS) + "\n")
    return path


def test_a_disagg_row_is_its_p_d_deployment(silicon):
    from servesim.validate.aic import read_silicon

    points, _ = read_silicon(silicon)
    trt, vllm, c8, sgl = (p.fields for p in points)
    # the closed loop over the whole deployment: silicon_concurrency 64 (= 2 decode workers x batch 32); one wave
    # of warm-up, four measured; NVFP4 GEMMs and experts, the generator's FP8 KV cache under nvfp4
    assert (trt["concurrency"], trt["warmup_requests"], trt["num_requests"], trt["quantization"],
            trt["kv_cache_dtype"]) == (64, 64, 256, "modelopt_fp4", "fp8")
    # the generator's workers (benchmark/trtllm.rule): prefill max_batch_size 1, max_num_tokens 1024 + 1500 = 2524
    # rounded up to the 32-token block, 2528, overlap scheduler off; decode max_batch_size = max_num_tokens = 32,
    # overlap on; whole experts over each worker's 4 GPUs (TensorRT-LLM's moe_expert_parallel_size = tp_size)
    launch = {"enable_chunked_prefill": False, "free_gpu_memory_fraction": 0.80, "enable_block_reuse": False,
              "tokens_per_block": 32}
    ep = {"moe_tensor_parallel_size": 1, "moe_expert_parallel_size": 4}
    assert trt["prefill"] == {"workers": 1, "tp": 4, "gpus": 4, **ep, "trtllm": launch | {
        "max_batch_size": 1, "max_num_tokens": 2528, "disable_overlap_scheduler": True}}
    assert trt["decode"] == {"workers": 2, "tp": 4, "gpus": 4, **ep, "trtllm": launch | {
        "max_batch_size": 32, "max_num_tokens": 32, "disable_overlap_scheduler": False}}
    # 3 workers x 4 GPUs = 12 inside the rack's 72-GPU NVLink domain: each of the prefill worker's 4 GPUs sends
    # at NVLink's one-way 900 GB/s x 0.55 (gb200.toml): 4 x 495 GB/s; the domain's 30 us
    assert trt["kv_link"] == pytest.approx({"bandwidth": 4 * 495e9, "latency": 30e-6})
    assert points[0].measured == {"ttft_ms": 200.0, "tpot_ms": 10.0, "e2el_ms": 200 + 1023 * 10}
    # no concurrency stated: AIConfigurator's own, decode batch 48 x 3 workers; vLLM's knobs as the generator
    # writes them (benchmark/vllm.rule): prefill max_num_seqs 1, max_num_batched_tokens 4000 + 1500; decode 48, 48
    assert vllm["concurrency"] == 144
    assert vllm["prefill"] == {"workers": 2, "tp": 2, "gpus": 2, "max_num_seqs": 1, "max_num_batched_tokens": 5500}
    assert vllm["decode"] == {"workers": 3, "tp": 2, "gpus": 2, "max_num_seqs": 48, "max_num_batched_tokens": 48}
    # 5 workers x 2 GPUs = 10, past an HGX board's 8: each GPU's NIC, 50 GB/s x 0.72, NCCL's 19.1 us
    assert vllm["kv_link"] == pytest.approx({"bandwidth": 2 * 36e9, "latency": 19.1e-6})
    assert c8["concurrency"] == 8  # (the id's _c8_)
    # SGLang (benchmark/sglang.rule): max_running_requests the batch size, max_prefill_tokens 1024 + 1500 on both;
    # its decode server without the radix cache (SGLang's default there); TP 4 with MoE TP 4: --tp-size 4
    assert sgl["prefill"] == {"workers": 1, "tp": 4, "gpus": 4, "sglang": {
        "max_running_requests": 1, "max_prefill_tokens": 2524}}
    assert sgl["decode"] == {"workers": 1, "tp": 4, "gpus": 4, "sglang": {
        "max_running_requests": 8, "max_prefill_tokens": 2524, "disable_radix_cache": True}}


def test_a_disagg_row_out_of_reach_is_named(silicon):
    from servesim.validate.aic import read_silicon

    _, out = read_silicon(silicon)
    assert [why for _, why in out] == [
        "noworkers_c5_x: prefill_batch_size is empty: the P/D deployment's workers are unknown (AIConfigurator's "
        "estimate needs it too)",
        "trtdp_c4_x: prefill: 4 data-parallel ranks in a worker (attention_dp_size 4) are not modelled in a P/D pool "
        "yet",
        "sgldp_c8_x: decode: 8 data-parallel ranks in a worker (attention_dp_size 8) are not modelled in a P/D pool "
        "yet",
        "glm_c8_x: model zhipuai/GLM-4.6 is not a servesim model yet"]
    points, out = read_silicon(silicon, client="aiperf")
    assert not points and out[0][1] == "trt_c64_x: a P/D deployment under AIPerf's paced sends is not modelled yet"
    assert read_silicon(silicon, mode="agg") == ([], [])
    assert len(read_silicon(silicon, mode="disagg")[1]) == 4


def toy_point(concurrency: int, n: int, start: str = "together") -> Point:
    link = {"bandwidth": 100 * 131072 / 0.005, "latency": 0.001}  # a 100-token prompt's KV in 5 ms, + 1 ms
    fields = {"model": "-", "gpu": "-", "engine": "vllm", "client": "vllm-bench", "cost": "toy", "isl": 100,
              "osl": 4, "concurrency": concurrency, "num_requests": n, "warmup_requests": 0, "start": start,
              "prefill": {"workers": 1, "gpus": 1}, "decode": {"workers": 1, "gpus": 1}, "kv_link": link}
    return Point(2, fields, {"ttft_ms": 17.0, "tpot_ms": 1.0})


def test_a_p_d_closed_loop_by_hand():
    # toy cost (0.1 ms a prompt token, 1 ms a decoding request), one user: r0's prompt [0, 10] ms on the prefill
    # worker, its KV 5 ms on the link + 1 ms: on the decode worker at 16; tokens 2-4 at 17, 18, 19: done at 19, when
    # r1 is sent: the same 19 ms later. The client's first token is the decode worker's (17 ms), then 1 ms a token:
    # TTFT 17, TPOT 1, E2EL 17 + 3 x 1 = 20 ms
    from servesim.validate.score import score

    report = score([toy_point(1, 2)])
    ((_, pred, err),) = report.predicted
    assert pred == pytest.approx({"ttft_ms": 17.0, "tpot_ms": 1.0, "e2el_ms": 20.0})
    assert err == pytest.approx({"ttft_ms": 0.0, "tpot_ms": 0.0})


def test_two_users_share_the_prefill_worker_and_the_link():
    # two users at 0: both prompts in one prefill step of 20 ms (both first tokens at 20); the one link sends r0's
    # KV in [20, 25] (lands 26), then r1's in [25, 30] (lands 31). The decode worker: r0's tokens 2-4 at 27, 28, 29;
    # r1's at 32, 33, 34. The client's TTFT: 27 and 32 ms (mean 29.5), TPOT 1, E2EL 29.5 + 3 = 32.5 ms
    from servesim.cluster import Pool, simulate_cluster
    from servesim.engine.request import Request
    from servesim.engines.config import EngineConfig
    from servesim.validate.disagg import client_means

    reqs = [Request(f"r{i}", 0.0, 100, 4) for i in range(2)]
    cfg = EngineConfig(max_concurrency=2)
    c = simulate_cluster(reqs, [Pool(1, cfg, role="prefill"), Pool(1, cfg, role="decode")],
                         kv_transfer_bandwidth=100 * 131072 / 0.005, kv_transfer_latency=0.001)
    assert [x for tr in c.transfers for x in (tr.start, tr.end)] == pytest.approx([0.020, 0.026, 0.025, 0.031])
    assert [list(t.token_times) for t in c.cluster.timelines] == [
        pytest.approx([0.020, 0.027, 0.028, 0.029]), pytest.approx([0.020, 0.032, 0.033, 0.034])]
    assert client_means(c.cluster.timelines, 0) == pytest.approx({"ttft_ms": 29.5, "tpot_ms": 1.0, "e2el_ms": 32.5})


def test_a_staggered_p_d_loop_starts_its_users_a_lone_request_apart():
    # alone a request takes 19 ms on this deployment (above): two users start 9.5 ms apart. r0 as alone: client
    # TTFT 17 ms. r1 at 9.5: its prompt [10, 20] (the prefill worker was busy until 10), KV on the link [20, 25]
    # lands at 26; tokens 2-4 at 27, 28, 29 (r0 was done at 19): TTFT 27 - 9.5 = 17.5. Means 17.25, 1, 20.25
    from servesim.validate.score import predict

    assert predict(toy_point(2, 2, "staggered")) == pytest.approx(
        {"ttft_ms": 17.25, "tpot_ms": 1.0, "e2el_ms": 20.25})
