"""`servesim cost` and `--cost PROFILE` through the real entry point, as a user types them (issue 4)."""

from __future__ import annotations

import json

import pytest
from helpers import cli

from servesim.cost import Roofline, StepShape, get_cost_model
from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.workloads import load_workload

BOUNDS = {"compute", "memory", "communication", "overhead"}




def test_prefill_repeats_and_json_has_total_and_a_bound_per_operator(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "cost", "--model", "llama-3-70b", "--gpu", "a100", "--tp", "4",
                         "--prefill", "512@1024", "--prefill", "256@0", "--decodes", "8", "--context", "2048",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    shape = StepShape.of(decodes=[2048] * 8, prefills=[(512, 1024), (256, 0)])
    assert (data["num_tokens"], data["num_decodes"]) == (512 + 256 + 8, 8)
    # Each all-reduce carries 776 tokens x 8192 x 2 B = 12.1 MiB, over vLLM's 8 MiB custom all-reduce limit: NCCL,
    # as the bare roofline has it. The device time is the bare roofline less the A100 file's flat 1 ms overhead;
    # the host's (vllm-0.33, mp): 0.851 + 0.0417 x 10 sequences + 0.866 (TP > 1) ms, overlapped.
    device = Roofline("llama-3-70b", "a100-80gb", 4).step_time(shape) - 1e-3
    host = (0.851 + 0.0417 * 10 + 0.866) * 1e-3
    assert (data["device_ms"], data["host_ms"]) == (pytest.approx(device * 1e3), pytest.approx(host * 1e3))
    assert data["total_ms"] == pytest.approx(max(device, host) * 1e3) and data["bound"] == "device"
    assert sum(op["ms"] for op in data["breakdown"]) == pytest.approx(data["device_ms"])
    assert {op["bound"] for op in data["breakdown"]} <= BOUNDS
    assert any(op["operator"].startswith("all_reduce") and op["bound"] == "communication" for op in data["breakdown"])


def test_user_config_json_and_gpu_toml(monkeypatch, capsys, tmp_path):
    (tmp_path / "tiny-moe").mkdir()
    config = tmp_path / "tiny-moe" / "config.json"
    config.write_text(json.dumps({  # Hugging Face field names, verbatim
        "model_type": "mixtral", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
        "num_key_value_heads": 4, "intermediate_size": 2048, "vocab_size": 32000, "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16", "num_local_experts": 8, "num_experts_per_tok": 2}))
    gpu = tmp_path / "mygpu.toml"
    gpu.write_text("dense_bf16_tflops = 100.0\nmemory_bandwidth_gb_s = 1000.0\nmemory_gib = 24\n"
                   "interconnect_gb_s = 64\npcie_gb_s = 32\n")
    code, out, err = cli(monkeypatch, capsys, "cost", "--model", str(config), "--gpu", str(gpu), "--decodes", "4",
                         "--prefill", "64@0", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["model"], data["gpu"]) == ("tiny-moe", "mygpu")
    # The bare roofline less the file's default 1 ms step overhead, against 0.851 + 0.0417 x 5 ms of host work.
    device = Roofline(str(config), str(gpu), 1).step_time(StepShape.of(decodes=[1024] * 4, prefills=[(64, 0)])) - 1e-3
    assert data["total_ms"] == pytest.approx(max(device, (0.851 + 0.0417 * 5) * 1e-3) * 1e3)


@pytest.mark.parametrize("args, listed", [
    (["--model", "llama-4"], "built-in models: bloom-176b, deepseek-r1, deepseek-v3, glm-5, glm-5-fp8, "
                                     "gpt-oss-120b, kimi-k2.5, llama-2-70b"),
    (["--gpu", "tpu-v5e"], "built-in GPUs: a100-80gb (a100), b200 (b200-180gb, b200-sxm), b300"),
])
def test_unknown_names_list_the_valid_ones_even_before_a_step_is_given(monkeypatch, capsys, args, listed):
    code, out, err = cli(monkeypatch, capsys, "cost", *args)
    assert code == 2 and out == ""
    assert err.startswith("servesim: error: unknown ") and listed in err and err.count("\n") == 1


def test_calibrated_profile_drives_run_and_trace(monkeypatch, capsys, tmp_path):
    pytest.importorskip("scipy")
    truth = Roofline("llama-2-7b", "a100", 1)
    lines = ["operator,tp,num_tokens,size_bytes,decodes,context,prefill,time_ms"]
    for n in (1, 16, 128, 512, 1024, 4096):
        t = {o.name: o.seconds / 32 for o in truth.breakdown(StepShape.of(prefills=[(n, 0)]))}["gate_up_proj"]
        lines.append(f"gate_up_proj,1,{n},,,,,{t * 1e3}")
    for d in (1, 8, 64, 128):
        lines.append(f"step,1,,,{d},1000,,{truth.step_time(StepShape.of(decodes=[1000] * d)) * 1e3}")
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    profile = tmp_path / "fit.json"
    code, out, err = cli(monkeypatch, capsys, "calibrate", str(tmp_path / "m.csv"), "--model", "llama-2-7b",
                         "--gpu", "a100-80gb", "--output", str(profile))
    assert code == 0, err
    assert "MAPE" in out and f"wrote {profile}" in out

    cfg = ["--max-num-batched-tokens", "256", "--max-num-seqs", "8"]
    reference = simulate(load_workload("seed"), EngineConfig(max_num_batched_tokens=256, max_num_seqs=8), "vllm",
                         get_cost_model(str(profile)))
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "seed", *cfg, "--cost", str(profile),
                       "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["duration"] == pytest.approx(reference.makespan)
    code, _, err = cli(monkeypatch, capsys, "trace", "--workload", "seed", *cfg, "--cost", str(profile),
                       "--json", str(tmp_path / "t.json"))
    assert code == 0, err
    steps = json.loads((tmp_path / "t.json").read_text())["steps"]
    assert len(steps) == len(reference.steps)


def test_a_poor_fit_is_written_with_a_warning(monkeypatch, capsys, tmp_path):
    # times that no roofline can follow (each size alternately x1 and x1000 the truth): the held-out half misses
    pytest.importorskip("scipy")
    truth = Roofline("llama-2-7b", "a100", 1)
    lines = ["operator,tp,num_tokens,size_bytes,decodes,context,prefill,time_ms"]
    for i, n in enumerate((1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)):
        t = {o.name: o.seconds / 32 for o in truth.breakdown(StepShape.of(prefills=[(n, 0)]))}["gate_up_proj"]
        lines.append(f"gate_up_proj,1,{n},,,,,{t * 1e3 * (1000 if i % 2 else 1)}")
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    code, out, err = cli(monkeypatch, capsys, "calibrate", str(tmp_path / "m.csv"), "--model", "llama-2-7b",
                         "--gpu", "a100-80gb", "--output", str(tmp_path / "fit.json"))
    assert code == 0 and (tmp_path / "fit.json").exists()
    assert "servesim: warning: held-out error" in err and "the profile predicts them poorly" in err
