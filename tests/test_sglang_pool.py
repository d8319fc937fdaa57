"""SGLang's token pool sized from GPU memory, as SGLang sizes it at start-up (`mem_fraction_static`)."""

import pytest

from servesim.cost import get_cost_model
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.engines.sglang.server_args import SGLangConfig, default_mem_fraction_static
from servesim.errors import ConfigError

GiB = 2**30


def test_default_mem_fraction_static_follows_sglangs_reserve():
    # H100 80GB, TP 1, 8192-token chunks: 512 + 8192 x 1.5 + 256 CUDA-graph slots x 2 + 1/8 x 1024 = 13440 MiB
    # held back: round((81920 - 13440) / 81920, 3) = 0.836
    assert default_mem_fraction_static(SGLangConfig(), 80 * GiB, 1) == 0.836
    # TP 4 on the same GPU: 512 CUDA-graph slots and 4/8 x 1024: 512 + 12288 + 1024 + 512 = 14336 -> 0.825
    assert default_mem_fraction_static(SGLangConfig(), 80 * GiB, 4) == 0.825
    # a 40 GB A100 with 2048-token chunks: 512 + 3072 + 32 x 2 + 128 = 3776 MiB (no 10 GiB floor under 60 GiB):
    # round((40960 - 3776) / 40960, 3) = 0.908
    assert default_mem_fraction_static(SGLangConfig(chunked_prefill_size=2048), 40 * GiB, 1) == 0.908
    # the same on an 80 GB GPU reaches the 10 GiB floor: round((81920 - 10240) / 81920, 3) = 0.875
    assert default_mem_fraction_static(SGLangConfig(chunked_prefill_size=2048), 80 * GiB, 1) == 0.875


def test_token_pool_from_gpu_memory():
    # Llama-3-8B on an H100 80GB: 16,059,990,016 bytes of weights, 32 layers x 2 x 8 KV heads x 128 x 2 B =
    # 131,072 bytes of KV a token: (80 GiB x 0.836 - weights) // 131072 = 425,352 tokens
    cost = get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb")
    assert (cost.weight_bytes, cost.kv_bytes_per_token) == (16_059_990_016, 131_072)
    assert cost.max_total_num_tokens(0.836) == 425_352
    r = simulate([Request("a", 0.0, 100, 4)], None, "sglang", cost, record="summary")
    sg = r.config.sglang
    assert (sg.mem_fraction_static, sg.max_total_num_tokens) == (0.836, 425_352)
    assert r.config.max_model_len == 8192  # the model's context, not the pool's
    assert r.step_log.usable_blocks == 425_352  # pages of one token
    # given: used as given (0.5: (40 GiB - weights) // 131072 = 205,152)
    r = simulate([Request("a", 0.0, 100, 4)], EngineConfig(sglang=SGLangConfig(mem_fraction_static=0.5)), "sglang",
                 cost, record="summary")
    assert r.config.sglang.max_total_num_tokens == (40 * GiB - 16_059_990_016) // 131_072 == 205_152


def test_pool_left_alone_when_given_or_unknowable():
    cost = get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb")
    r = simulate([Request("a", 0.0, 100, 4)], EngineConfig(sglang=SGLangConfig(max_total_num_tokens=1000)),
                 "sglang", cost, record="summary")
    assert r.config.sglang.max_total_num_tokens == 1000 and r.config.sglang.mem_fraction_static is None
    r = simulate([Request("a", 0.0, 100, 4)], None, "sglang", "toy", record="summary")
    assert r.config.sglang.max_total_num_tokens is None  # the toy cost knows no GPU: unlimited


def test_bad_mem_fraction_static_is_refused():
    with pytest.raises(ConfigError, match="mem_fraction_static must be a number in"):
        SGLangConfig(mem_fraction_static=1.5)
    cost = get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb")
    with pytest.raises(ConfigError, match="does not fit"):  # 8 GiB cannot hold 16 GB of weights
        simulate([Request("a", 0.0, 100, 4)], EngineConfig(sglang=SGLangConfig(mem_fraction_static=0.1)), "sglang",
                 cost, record="summary")


def test_mem_fraction_static_flag(monkeypatch, capsys):
    from helpers import cli

    args = ("run", "--workload", "seed", "--model", "llama-3-8b", "--gpu", "h100-80gb")
    code, _, err = cli(monkeypatch, capsys, *args, "--policy", "sglang", "--mem-fraction-static", "0.5")
    assert code == 0, err
    code, _, err = cli(monkeypatch, capsys, *args, "--mem-fraction-static", "0.5")
    assert code == 2 and "--mem-fraction-static is an SGLang server option: add --policy sglang" in err
    code, _, err = cli(monkeypatch, capsys, *args, "--policy", "sglang", "--mem-fraction-static", "0")
    assert code == 2 and "sglang.mem_fraction_static must be a number in (0, 1], got 0" in err
    assert len(err.strip().splitlines()) == 1


def test_ignore_eos_flag_reaches_sglangs_admission(tmp_path, monkeypatch, capsys):
    # the rule's scenario (tests/test_sglang_rules.py) as a trace, toy cost (0.1 ms a prompt token, 1 ms a decode):
    # a (10 + 40) at 0, b (10 + 40) at 0.5 ms while a's prompt runs (1 ms), a 100-token pool, radix cache off.
    # Without --ignore-eos b prefills at 1-2 ms: TTFTs 1 and 1.5 ms, mean 1.25. With it b waits for a's last
    # token (39 decode steps, 1-40 ms) and prefills at 40-41 ms: TTFT 40.5 ms, mean 20.75.
    import json

    from helpers import cli

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time,prompt_len,output_len,request_id\n0,10,40,a\n0.0005,10,40,b\n")
    ttft = {}
    for flags in ((), ("--ignore-eos",)):
        out = tmp_path / "r.json"
        code, _, err = cli(monkeypatch, capsys, "run", "--policy", "sglang", "--workload", str(trace), "--cost", "toy",
                           "--max-total-tokens", "100", "--disable-radix-cache", "--json", str(out), *flags)
        assert code == 0, err
        ttft[flags] = json.loads(out.read_text())["mean_ttft_ms"]
    assert ttft[()] == pytest.approx(1.25) and ttft[("--ignore-eos",)] == pytest.approx(20.75)


def test_the_policy_brings_its_engine_preset():
    """Under --policy sglang the roofline runs the `sglang` engine preset unless --engine says otherwise; the toy
    cost has no engine."""
    from servesim.cli.options import SimOptions

    opts = SimOptions(model="llama-3-8b", gpu="h100-80gb")
    assert opts.cost_model("sglang").engine.name == "sglang"
    assert opts.cost_model("vllm").engine.name == "vllm-0.33"
    assert SimOptions(model="llama-3-8b", engine="trtllm").cost_model("sglang").engine.name == "trtllm"
    assert SimOptions(cost="toy").cost_model("sglang").name == "toy"
    # SGLang's overlap loop (its default) overlaps the host's work with the GPU's; --disable-overlap-schedule
    # puts them in series, as vLLM's --no-async-scheduling does
    assert opts.cost_model("sglang").engine.async_scheduling is True
    normal = SimOptions(model="llama-3-8b", gpu="h100-80gb", disable_overlap_schedule=True)
    assert normal.cost_model("sglang").engine.async_scheduling is False


def test_mem_fraction_static_is_refused_where_it_would_be_ignored():
    reqs = [Request("a", 0.0, 100, 4)]
    with pytest.raises(ConfigError, match="the toy cost knows no GPU memory"):
        simulate(reqs, EngineConfig(sglang=SGLangConfig(mem_fraction_static=0.5)), "sglang", "toy")
    cost = get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb")
    both = SGLangConfig(mem_fraction_static=0.5, max_total_num_tokens=1000)
    with pytest.raises(ConfigError, match="give one of sglang.max_total_num_tokens and sglang.mem_fraction_static"):
        simulate(reqs, EngineConfig(sglang=both), "sglang", cost)
    # a resolved config (the pair it derived) runs again as it is: the unchunked counterfactual does this
    r = simulate(reqs, EngineConfig(sglang=SGLangConfig(mem_fraction_static=0.5)), "sglang", cost)
    again = simulate(reqs, EngineConfig(sglang=r.config.sglang), "sglang", cost)
    assert again.config.sglang.max_total_num_tokens == r.config.sglang.max_total_num_tokens == 205_152


def test_priority_flags_reach_sglangs_scheduler(tmp_path, monkeypatch, capsys):
    # one row, toy cost: a (priority 0, 10 + 40) at 0, b (priority 20, 10 + 4) at 0.5 ms while a's prompt runs
    # (1 ms). Without priority scheduling b waits for a's 39 decodes (1-40 ms) and prefills at 40-41 ms: TTFTs 1
    # and 40.5 ms, mean 20.75. With it b, 20 above a (more than the threshold 10), preempts a at 1 ms and
    # prefills at 1-2 ms: TTFT 1.5 ms. Under SGLang's default overlap loop a's first token (sampled at 1 ms) was
    # still in flight and is dropped (O4): a re-prefills once b's last token (4-5 ms) is processed, at 5-6 ms,
    # TTFT 6 ms, mean 3.75; with --disable-overlap-schedule a's first token stands: mean (1 + 1.5) / 2 = 1.25.
    # --retraction-policy priority is refused (not modelled).
    import json

    from helpers import cli

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time,prompt_len,output_len,priority,request_id\n0,10,40,0,a\n0.0005,10,4,20,b\n")
    base = ("run", "--policy", "sglang", "--workload", str(trace), "--cost", "toy", "--max-total-tokens", "100",
            "--max-running-requests", "1", "--disable-radix-cache", "--json", str(tmp_path / "r.json"))
    ttft = {}
    on, off = ("--enable-priority-scheduling",), ("--enable-priority-scheduling", "--disable-overlap-schedule")
    for flags in ((), on, off):
        code, _, err = cli(monkeypatch, capsys, *base, *flags)
        assert code == 0, err
        ttft[flags] = json.loads((tmp_path / "r.json").read_text())["mean_ttft_ms"]
    assert ttft[()] == pytest.approx(20.75)
    assert ttft[on] == pytest.approx(3.75) and ttft[off] == pytest.approx(1.25)
    code, _, err = cli(monkeypatch, capsys, *base, "--retraction-policy", "priority")
    assert code == 2 and "retraction_policy" in err and len(err.strip().splitlines()) == 1
