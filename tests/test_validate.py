"""`servesim validate` on the shipped sample of the user format (src/servesim/data/validate/sample.csv): toy-cost
rows whose predictions are derivable by hand, and rows out of reach, each named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import cli

import servesim
from servesim.errors import ConfigError, WorkloadError
from servesim.validate.rows import read_points
from servesim.validate.score import score

SAMPLE = Path(servesim.__file__).parent / "data" / "validate" / "sample.csv"


def test_the_sample_scores_by_hand():
    # toy cost: a 100-token prompt alone is a 10 ms step (0.1 ms a token) giving the first token; 2 decode steps
    # of 1 ms: TTFT 10 ms, TPOT 1 ms, E2EL 12 ms, whatever the client (concurrency 1, or one request: each alone)
    report = score(read_points(SAMPLE))
    assert report.rows == 7 and len(report.predicted) == 5
    (bench, _, e1), (aiperf, _, e2), (gl, pred, e3), (ml, mp, e4), (ip, ipp, e5) = report.predicted
    assert [p.fields["client"] for p in (bench, aiperf, gl, ml, ip)] == ["vllm-bench", "aiperf", "guidellm",
                                                                          "mlperf", "inference-perf"]
    # measured 12.5, 1.25, 15: every error (10 - 12.5) / 12.5 = -20 %; AIPerf's measured 8, 1, 10: +25, 0, +20 %
    assert e1 == pytest.approx({"ttft_ms": -20.0, "tpot_ms": -20.0, "e2el_ms": -20.0})
    assert e2 == pytest.approx({"ttft_ms": 25.0, "tpot_ms": 0.0, "e2el_ms": 20.0}, abs=1e-9)
    # GuideLLM's TPOT counts the first token: 12 ms / 3 = 4 ms; measured 8, 5, 10: +25, -20, +20 %
    assert pred["tpot_ms"] == pytest.approx(4.0)
    assert e3 == pytest.approx({"ttft_ms": 25.0, "tpot_ms": -20.0, "e2el_ms": 20.0})
    # MLPerf Server, one query at 0: LoadGen's integer-ns means 10 / 1 / 12 ms and 3 tokens over the 12 ms to
    # completion, 250 tokens/s; measured 8, 1.25, 12: +25, -20, 0 %
    assert mp == pytest.approx({"ttft_ms": 10.0, "tpot_ms": 1.0, "e2el_ms": 12.0, "output_throughput": 250.0})
    assert e4 == pytest.approx({"ttft_ms": 25.0, "tpot_ms": -20.0, "e2el_ms": 0.0})
    # inference-perf, one constant stage of one request: NTPOT = 12 ms / 3 tokens = 4 ms; measured 12.5, 1, 12, 5:
    # -20, 0, 0, -20 %
    assert ipp["ntpot_ms"] == pytest.approx(4.0) and ipp["output_throughput"] == pytest.approx(250.0)
    assert e5 == pytest.approx({"ttft_ms": -20.0, "tpot_ms": 0.0, "e2el_ms": 0.0, "ntpot_ms": -20.0}, abs=1e-9)
    # TTFT over the five: (20 + 25 + 25 + 25 + 20) / 5 = 23 %, signed (-20 + 25 + 25 + 25 - 20) / 5 = +7 %
    assert report.mape("ttft_ms") == pytest.approx(23.0) and report.signed("ttft_ms") == pytest.approx(7.0)
    reasons = dict(report.out_of_reach)
    assert reasons[7] == "warmup_requests: mlperf sends no warm-up"
    assert reasons[8].startswith("unknown model 'mystery-70b'")


def test_a_measured_metric_the_client_does_not_report_is_refused(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("model,gpu,engine,client,request_rate,isl,osl,num_requests,cost,ttft_ms,ntpot_ms\n"
                    "llama-3-8b,h100-80gb,vllm,mlperf,0.5,100,3,1,toy,8,4\n")
    report = score(read_points(path))
    assert report.out_of_reach == [(2, "ntpot_ms: not a metric mlperf reports")]


def test_the_json_format_scores_as_the_csv(tmp_path):
    import polars as pl

    rows = [{k: v for k, v in r.items() if v is not None} for r in pl.read_csv(SAMPLE).to_dicts()]
    path = tmp_path / "points.json"
    path.write_text(json.dumps({"points": rows}))
    csv, js = score(read_points(SAMPLE)), score(read_points(path))
    assert [e for _, _, e in js.predicted] == [e for _, _, e in csv.predicted]
    assert [why for _, why in js.out_of_reach] == [why for _, why in csv.out_of_reach]
    assert [line for line, _ in js.out_of_reach] == ["point 6", "point 7"]
    path.write_text(json.dumps([{**rows[0], "isl": "ten"}]))
    with pytest.raises(WorkloadError, match="points.json:point 1: isl: got 'ten'; expected an integer > 0"):
        read_points(path)
    path.write_text(json.dumps([{**rows[0], "colour": "red"}]))
    with pytest.raises(WorkloadError, match="points.json:point 1: unknown key 'colour'"):
        read_points(path)


def test_validate_command_and_its_json(monkeypatch, capsys, tmp_path):
    code, out, err = cli(monkeypatch, capsys, "validate", str(SAMPLE), "--json", str(tmp_path / "v.json"))
    assert code == 0, err
    assert "7 rows: 5 predicted, 2 out of reach" in out and "line 7: out of reach: warmup_requests: mlperf" in out
    doc = json.loads((tmp_path / "v.json").read_text())
    assert (doc["rows"], doc["predicted"]) == (7, 5) and doc["ttft_mape"] == pytest.approx(23.0)
    assert doc["groups"]["client"]["aiperf"]["ttft_mape"] == pytest.approx(25.0)
    assert doc["ntpot_mape"] == pytest.approx(20.0)
    assert [r["line"] for r in doc["out_of_reach"]] == [7, 8] and doc["method"].startswith("no fitting")


@pytest.mark.parametrize("text, words", [
    ("model,gpu,engine,client,isl,osl,num_requests\n", "no measured metric"),
    ("model,gpu,engine,client,isl,osl,num_requests,ttft_ms\nm,g,vllm,vllm-bench,100,3,2,5\n",
     "2: give one of concurrency and request_rate"),
    ("model,gpu,engine,client,concurrency,isl,osl,num_requests,ttft_ms\nm,g,vllm,vllm-bench,1,ten,3,2,5\n",
     "sample.csv:2: isl: got 'ten'; expected an integer > 0"),
    ("model,gpu,engine,client,concurrency,isl,osl,num_requests,ttft_ms,colour\nm,g,vllm,vllm-bench,1,1,3,2,5,red\n",
     "unknown column 'colour'"),
])
def test_a_malformed_row_is_named(tmp_path, text, words):
    path = tmp_path / "sample.csv"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=words):
        read_points(path)


SILICON_HEAD = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
                "gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,"
                "silicon_ttft_ms,silicon_tpot_ms\n")


def test_aic_silicon_rows_as_deployments(tmp_path):
    # AIConfigurator's format (aiconfigurator_core/systems/silicon_sample.csv): one expressible row, and one row
    # out of reach for each reason
    rows = ["ok,src,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,fp8,agg,1024,128,fp8,,16,2,1,,,,100,10",
            "pd,src,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,fp8,disagg,1024,128,fp8,,16,2,1,,,,100,10",
            "moe,src,vllm,0.12.0,zhipuai/GLM-4.6,h200_sxm,fp8,agg,1024,128,fp8,fp8,16,8,1,,,,100,10",
            "bw,src,vllm,0.12.0,Qwen/Qwen3-32B,b200,fp8,agg,1024,128,fp8,,16,2,1,,,,100,10",
            "trt,src,trtllm,1.0,Qwen/Qwen3-32B,h100_sxm,fp8,agg,1024,128,fp8,,16,2,1,,,,100,10",
            "blk,src,sglang,0.5.9,Qwen/Qwen3-32B,h100_sxm,fp8,agg,1024,128,fp8_block,,16,2,1,,,,100,10",
            "dp,src,sglang,0.5.9,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,16,2,1,2,,,100,10",
            "ep,src,vllm,0.18.0,MiniMaxAI/MiniMax-M2.5,h100_sxm,fp8,agg,1024,128,fp8,fp8,16,4,1,1,1,4,100,10",
            "mtp,src,vllm,0.12.0,Qwen/Qwen3-235B-A22B-FP8,h200_sxm,fp8,agg,1024,128,fp8,fp8,16,1,1,,2,1,100,10",
            "both,src,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,h200_sxm,fp8,agg,1024,128,fp8,fp8,16,4,1,1,2,2,100,10",
            "sgl,src,sglang,0.5.9,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,agg,1024,128,fp8,fp8_block,16,4,1,1,1,8,100,10",
            "trt4,src,trtllm,1.2.0rc6.post2,Qwen/Qwen3-32B,b200_sxm,fp4,agg,1024,1024,nvfp4,,4,1,1,,,,100,10"]
    (tmp_path / "s.csv").write_text(SILICON_HEAD + "\n".join(rows) + "\n")
    from servesim.validate.aic import read_silicon

    points, out = read_silicon(tmp_path / "s.csv")
    assert [p.fields["id"] for p in points] == ["ok", "trt", "dp", "ep", "mtp", "trt4"]
    ok, trt, dp, ep, mtp, trt4 = (p.fields for p in points)
    # MoE with moe_ep_size = tp_size and MoE TP 1: vLLM's --enable-expert-parallel (whole experts over the TP ranks)
    assert ep["model"] == "minimax-m2.5" and ep["enable_expert_parallel"] is True
    assert "enable_expert_parallel" not in ok
    # SGLang's attention DP: AIConfigurator's tp_size is attention's per rank, so --tp-size 4 with
    # --enable-dp-attention --dp-size 2; its batch_size is per rank: 2 x 16 in flight
    assert (dp["tp"], dp["enable_dp_attention"], dp["dp_size"], dp["concurrency"]) == (4, True, 2, 32)
    # vLLM with the experts over 2 GPUs by width beside attention TP 1: two DP ranks (vLLM's MoE TP = TP x DP)
    assert (mtp["tp"], mtp["data_parallel_size"], "enable_expert_parallel" in mtp, mtp["concurrency"]) == (
        1, 2, False, 32)
    # TensorRT-LLM's rows under --policy trtllm, launched as AIConfigurator's generator writes an agg worker:
    # max_batch_size the batch size, max_num_tokens 16 + 1024 + 1500 = 2540 rounded up to the 32-token block, 2560
    assert trt["engine"] == "trtllm" and trt["trtllm"] == {
        "max_batch_size": 16, "max_num_tokens": 2560, "enable_chunked_prefill": False,
        "free_gpu_memory_fraction": 0.80, "enable_block_reuse": False, "tokens_per_block": 32,
        "disable_overlap_scheduler": False}
    # under NVFP4 the generator's KV cache is the nvfp4 profile's FP8; 4 + 1024 + 1500 = 2528 = 79 x 32
    assert (trt4["quantization"], trt4["kv_cache_dtype"], trt4["trtllm"]["max_num_tokens"]) == (
        "modelopt_fp4", "fp8", 2528)
    f = points[0].fields
    # a closed loop of 16, one wave of warm-up, four measured; FP8 GEMMs as --quantization fp8 and, the row's
    # precision being AIConfigurator's fp8 profile (FP8 GEMMs and KV cache), --kv-cache-dtype fp8
    assert (f["model"], f["gpu"], f["tp"], f["concurrency"], f["warmup_requests"], f["num_requests"],
            f["quantization"], f["kv_cache_dtype"]) == ("qwen3-32b", "h100-80gb", 2, 16, 16, 64, "fp8", "fp8")
    # and the mean E2E latency the means imply for 128-token requests: 100 + 127 x 10 = 1,370 ms
    assert points[0].measured == {"ttft_ms": 100.0, "tpot_ms": 10.0, "e2el_ms": 1370.0}
    assert [why for _, why in out] == [
        "pd: prefill_batch_size is empty: the P/D deployment's workers are unknown (AIConfigurator's estimate needs "
        "it too)",
        "moe: model zhipuai/GLM-4.6 is not a servesim model yet",
        "bw: GPU b200 is not a servesim GPU yet",
        "blk: fp8_block weights of Qwen/Qwen3-32B: servesim has its checkpoint in BF16 only",
        "both: moe_tp_size 2 beside moe_ep_size 2: vLLM's experts are whole (EP) or split (TP), not both",
        "sgl: moe_tp_size 1 x moe_ep_size 8 beside tp_size 4 x attention_dp_size 1: not an SGLang layout (its "
        "--tp-size GPUs hold the experts)"]
    # as AIConfigurator's benchmark script sends the point (bench_run.sh.j2): AIPerf, a warm-up of 2C = 32, then
    # 20C = 320 measured, every user starting together
    (g, *_), _ = read_silicon(tmp_path / "s.csv", client="aiperf")
    assert (g.fields["client"], g.fields["warmup_requests"], g.fields["num_requests"], "start" in g.fields) == (
        "aiperf", 32, 320, False)
    with pytest.raises(ConfigError, match="vllm-bench, aiperf, inferencex"):
        read_silicon(tmp_path / "s.csv", client="guidellm")


def test_aic_silicon_gpt_oss_rows_serve_the_mxfp4_checkpoint(tmp_path):
    # the file labels gpt-oss-120b's rows nvfp4 (and fp8), its precision profiles' names; the engines serve the
    # checkpoint's own MXFP4 experts (its quantization_config), as servesim does
    rows = ["v,src,vllm,0.15.1,openai/gpt-oss-120b,b200_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,8,2,1,1,2,1,100,10",
            "t,src,trtllm,1.3.0rc1,openai/gpt-oss-120b,h100_sxm,fp8,agg,4000,1000,fp8,fp8,48,4,1,,4,1,100,10"]
    (tmp_path / "s.csv").write_text(SILICON_HEAD + "\n".join(rows) + "\n")
    from servesim.validate.aic import read_silicon

    (v, t), out = read_silicon(tmp_path / "s.csv")
    assert not out
    assert (v.fields["model"], v.fields["quantization"], "kv_cache_dtype" in v.fields) == ("gpt-oss-120b", "mxfp4",
                                                                                           False)
    # (the fp8 profile's KV cache stays: AIConfigurator's generator writes it from the profile)
    assert (t.fields["quantization"], t.fields["kv_cache_dtype"]) == ("mxfp4", "fp8")


def test_aic_silicon_qwen3_5_rows(tmp_path):
    # its BF16 rows as the built-in; its fp8_block rows need the FP8 checkpoint servesim lacks; its NVFP4 rows
    # NVIDIA's checkpoint
    rows = ["bf,src,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,bf16,agg,1024,1024,,,8,8,1,1,8,1,100,10",
            "f8,src,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,1024,1024,fp8,fp8_block,8,4,1,1,4,1,100,10",
            "f4,src,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,8,4,1,1,4,1,100,10"]
    (tmp_path / "s.csv").write_text(SILICON_HEAD + "\n".join(rows) + "\n")
    from servesim.validate.aic import read_silicon

    (bf, f4), out = read_silicon(tmp_path / "s.csv")
    assert (bf.fields["model"], bf.fields["tp"], "quantization" in bf.fields) == ("qwen3.5-397b-a17b", 8, False)
    # NVIDIA's NVFP4 checkpoint, its attention, linear attention and shared experts in 16 bits (its ignore list)
    assert (f4.fields["model"], f4.fields["quantization"]) == ("qwen3.5-397b-a17b-nvfp4", "modelopt_fp4")
    assert [why for _, why in out] == [
        "f8: fp8_block weights of Qwen/Qwen3.5-397B-A17B: servesim has its checkpoint in BF16 only"]


def test_aic_silicon_glm5_rows_serve_the_fp8_checkpoint(tmp_path):
    rows = ["g,src,sglang,glm5-hopper,zhipuai/GLM-5,h200_sxm,fp8,agg,1024,1024,fp8,fp8_block,8,8,1,1,8,1,100,10",
            "n,src,sglang,nightly-dev,zhipuai/GLM-5,b200_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,8,8,1,1,8,1,100,10"]
    (tmp_path / "s.csv").write_text(SILICON_HEAD + "\n".join(rows) + "\n")
    from servesim.validate.aic import read_silicon

    (g,), out = read_silicon(tmp_path / "s.csv")
    # the fp8 profile: FP8 GEMMs (the checkpoint's block-wise FP8) and an FP8 KV cache
    assert (g.fields["model"], g.fields["quantization"], g.fields["kv_cache_dtype"]) == ("glm-5-fp8", "fp8", "fp8")
    assert [why for _, why in out] == [
        "n: nvfp4 rows of zhipuai/GLM-5: NVIDIA's checkpoint keeps attention in 16 bits, and servesim has no config "
        "of it"]


def test_a_staggered_closed_loop_by_hand():
    # toy cost, concurrency 2, 100-token prompts, 3 tokens: alone a request takes 12 ms (a 10 ms prompt step, two
    # 1 ms decodes), so the users start 6 ms apart. r0: prompt [0, 10]; r1 arrives at 6 and prefills beside r0's
    # decode in [10, 21] (11 ms); both decode in [21, 23]: r0 done at 23; r1's last in [23, 24]. TTFT 10 and 15
    # ms (mean 12.5), TPOT (23 - 10) / 2 = 6.5 and (24 - 21) / 2 = 1.5 (mean 4), E2EL 23 and 18 (mean 20.5)
    from servesim.validate.rows import Point
    from servesim.validate.score import predict

    p = Point(2, {"model": "m", "gpu": "g", "engine": "vllm", "client": "vllm-bench", "concurrency": 2, "isl": 100,
                  "osl": 3, "num_requests": 2, "cost": "toy", "start": "staggered"}, {"ttft_ms": 1.0})
    assert predict(p) == pytest.approx({"ttft_ms": 12.5, "tpot_ms": 4.0, "itl_ms": 4.0, "e2el_ms": 20.5,
                                        "output_throughput": 250.0})  # 6 tokens over 24 ms


def test_a_trtllm_row_runs_its_launch_options():
    # toy cost, two users started together, 100-token prompts, 3 tokens, --policy trtllm (its overlap scheduler
    # on). max_batch_size 2: both contexts in one 20 ms step, then two 2 ms steps of two decodes: TTFT 20, TPOT
    # (24 - 20) / 2 = 2, E2EL 24. max_batch_size 1: r0 alone, [0, 10] then decodes to 12, and its discarded token
    # [12, 13] holds the one slot (the overlap scheduler); r1 then [13, 23] and decodes to 25: TTFT (10 + 23) / 2,
    # TPOT 1, E2EL (12 + 25) / 2, 6 tokens over 25 ms
    from servesim.validate.rows import Point
    from servesim.validate.score import predict

    base = {"model": "m", "gpu": "g", "engine": "trtllm", "client": "vllm-bench", "concurrency": 2, "isl": 100,
            "osl": 3, "num_requests": 2, "cost": "toy"}

    def run(max_batch_size):
        return predict(Point(2, base | {"trtllm": {"max_batch_size": max_batch_size}}, {"ttft_ms": 1.0}))

    assert run(2) == pytest.approx({"ttft_ms": 20.0, "tpot_ms": 2.0, "itl_ms": 2.0, "e2el_ms": 24.0,
                                    "output_throughput": 250.0})
    assert run(1) == pytest.approx({"ttft_ms": 16.5, "tpot_ms": 1.0, "itl_ms": 1.0, "e2el_ms": 18.5,
                                    "output_throughput": 240.0})


def test_a_process_pool_scores_as_one_process(monkeypatch, capsys, tmp_path):
    # a prediction depends only on its row: the pool's report is the in-process one, row for row
    docs = []
    for workers in ("1", "2"):
        code, _, err = cli(monkeypatch, capsys, "validate", str(SAMPLE), "--workers", workers, "--json",
                           str(tmp_path / f"v{workers}.json"))
        assert code == 0, err
        docs.append(json.loads((tmp_path / f"v{workers}.json").read_text()))
    assert docs[0] == docs[1]


def test_the_html_page(monkeypatch, capsys, tmp_path):
    code, out, err = cli(monkeypatch, capsys, "validate", str(SAMPLE), "--workers", "1", "--html",
                         str(tmp_path / "v.html"))
    assert code == 0, err
    assert f"wrote {tmp_path / 'v.html'}" in out
    page = (tmp_path / "v.html").read_text()
    assert "7 rows: 5 predicted, 2 out of reach. ttft_ms MAPE 23.0 % (signed +7.0 %)" in page
    assert page.count("<tr>") == 1 + 5  # the worst rows: a header and the five predicted rows
    assert "<li>1 rows: mlperf sends no warm-up</li>" in page
    assert "https://" not in page.split("<script")[0]  # offline: plotly is inlined, nothing fetched


def test_executor_options_are_checked(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "validate", str(SAMPLE), "--ray-address", "auto")
    assert code == 2 and "--ray-address names a Ray cluster: add --executor ray" in err


def test_an_sglang_bench_row_by_hand(tmp_path):
    # sglang.bench_serving's closed loop of 1 after its warm-up request (awaited, then a 1 s pause), 100-token
    # prompts, 3 tokens, toy cost: each request alone, TTFT 10 ms, TPOT 1 ms, E2E 12 ms; against measured 8 / 1 /
    # 12 ms the errors are +25, 0 and 0 %
    path = tmp_path / "m.csv"
    path.write_text("model,gpu,engine,client,concurrency,isl,osl,num_requests,cost,ttft_ms,tpot_ms,e2el_ms\n"
                    "llama-3-8b,h100-80gb,vllm,sglang-bench,1,100,3,2,toy,8,1,12\n")
    (_, pred, err), = score(read_points(path)).predicted
    assert pred["ttft_ms"] == pytest.approx(10.0) and pred["e2el_ms"] == pytest.approx(12.0)
    assert err == pytest.approx({"ttft_ms": 25.0, "tpot_ms": 0.0, "e2el_ms": 0.0}, abs=1e-9)


def test_the_aic_silicon_client_options_are_refused_where_they_do_not_apply(monkeypatch, capsys):
    # --client and --start choose how aic-silicon's rows are sent; a CSV says both per row
    for args, said in ((["--client", "aiperf"], "--client sets aic-silicon's client"),
                       (["--start", "together"], "--start sets how aic-silicon's loops start")):
        code, _, err = cli(monkeypatch, capsys, "validate", str(SAMPLE), *args)
        assert code == 2 and said in err
    code, _, err = cli(monkeypatch, capsys, "validate", "aic-silicon", "--client", "aiperf", "--start", "together")
    assert code == 2 and "under --client aiperf its own client starts it" in err
    # --mode picks aic-silicon's agg or disagg rows
    code, _, err = cli(monkeypatch, capsys, "validate", str(SAMPLE), "--mode", "disagg")
    assert code == 2 and "--mode picks aic-silicon's agg or disagg rows" in err
    code, _, err = cli(monkeypatch, capsys, "validate", "aic-silicon", "--mode", "pd")
    assert code == 2 and "--mode pd: expected one of agg, disagg" in err


def test_a_user_row_says_expert_parallel_as_true_or_false(tmp_path):
    head = "model,gpu,engine,client,tp,concurrency,isl,osl,num_requests,enable_expert_parallel,tpot_ms\n"
    (tmp_path / "m.csv").write_text(head + "qwen3-30b-a3b,h100,vllm,vllm-bench,2,4,128,8,8,true,5\n")
    (p,) = read_points(tmp_path / "m.csv")
    assert p.fields["enable_expert_parallel"] is True
    (tmp_path / "m.csv").write_text(head + "qwen3-30b-a3b,h100,vllm,vllm-bench,2,4,128,8,8,yes,5\n")
    with pytest.raises(WorkloadError, match=r"m\.csv:2: enable_expert_parallel: got 'yes'; expected true or false"):
        read_points(tmp_path / "m.csv")


def test_trtllm_rows_with_attention_dp_and_a_moe_tp_x_ep(tmp_path):
    # AIConfigurator's TensorRT-LLM rows: tp_size 1 x attention_dp_size 8 with moe_ep_size 8 is
    # tensor_parallel_size 8 with enable_attention_dp, its batch_size 16 per rank (8 x 16 = 128 in flight) and
    # max_batch_size 16 on each rank; tp_size 16 with moe_tp_size 4 x moe_ep_size 4 is attention TP
    # 16 beside the experts split 4 x 4; tp_size 2 x attention_dp_size 4 is no TensorRT-LLM layout
    rows = ["adp,src,trtllm,1.2.0,deepseek-ai/DeepSeek-R1,b200_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,16,1,1,8,1,8,100,10",
            "mix,src,trtllm,1.2.0,deepseek-ai/DeepSeek-R1,b200_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,16,16,1,,4,4,100,10",
            "bad,src,trtllm,1.2.0,deepseek-ai/DeepSeek-R1,b200_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,16,2,1,4,1,8,100,10"]
    (tmp_path / "s.csv").write_text(SILICON_HEAD + "\n".join(rows) + "\n")
    from servesim.validate.aic import read_silicon
    from servesim.validate.score import engine_setup

    points, out = read_silicon(tmp_path / "s.csv")
    adp, mix = (p.fields for p in points)
    assert (adp["tp"], adp["enable_attention_dp"], adp["moe_tensor_parallel_size"], adp["moe_expert_parallel_size"],
            adp["concurrency"], adp["trtllm"]["max_batch_size"]) == (8, True, 1, 8, 128, 16)
    assert (mix["tp"], "enable_attention_dp" in mix, mix["moe_tensor_parallel_size"],
            mix["moe_expert_parallel_size"], mix["concurrency"]) == (16, False, 4, 4, 16)
    lay = engine_setup(adp)[1].layout
    assert (lay.tp, lay.dp, lay.moe_tp, lay.moe_ep, lay.moe_comm) == (1, 8, 1, 8, "gather")
    assert [why for _, why in out] == ["bad: tp_size 2 x attention_dp_size 4: not a TensorRT-LLM layout "
                                       "(enable_attention_dp runs attention one rank a GPU)"]
