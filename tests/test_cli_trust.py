"""Every option honoured or refused, vLLM's defaults, and vllm bench serve's flags and result file (issue 12)."""

import json
import os

import pytest
from helpers import SHARED, cli

import servesim
from servesim.cost import Roofline
from servesim.defaults import build_cost
from servesim.errors import ConfigError

SAMPLE = ["--workload", "azure-conv-sample", "--num-requests", "40", "--server"]


def run_json(monkeypatch, capsys, tmp_path, *args):
    out = tmp_path / "r.json"
    code, stdout, err = cli(monkeypatch, capsys, "run", *args, "--json", str(out))
    assert code == 0, err
    return json.loads(out.read_text()), err


# -- silently wrong before: each option is honoured ------------------------------------------------------------------

def test_gpu_without_model_is_honoured(monkeypatch, capsys, tmp_path):
    h100, _ = run_json(monkeypatch, capsys, tmp_path, *SAMPLE)
    a100, _ = run_json(monkeypatch, capsys, tmp_path, *SAMPLE, "--gpu", "a100")
    # vLLM's defaults differ by GPU (>= 70 GiB and not an A100: 8192 / 1024), and so do the step times
    assert (h100["config"]["max_num_batched_tokens"], h100["config"]["max_num_seqs"]) == (8192, 1024)
    assert (a100["config"]["max_num_batched_tokens"], a100["config"]["max_num_seqs"]) == (2048, 256)
    assert a100["mean_ttft_ms"] > h100["mean_ttft_ms"]  # A100: 312 vs 989 TFLOP/s, 2.0 vs 3.35 TB/s
    assert h100["model_id"] == a100["model_id"] == "llama-3-8b"


def test_tp_without_model_is_honoured(monkeypatch, capsys, tmp_path):
    one, _ = run_json(monkeypatch, capsys, tmp_path, *SAMPLE)
    two, _ = run_json(monkeypatch, capsys, tmp_path, *SAMPLE, "--tensor-parallel-size", "2")
    assert two["mean_tpot_ms"] < one["mean_tpot_ms"]  # half the weights per GPU to read each step
    assert build_cost("auto", "azure-conv-sample", tp=2).tp == 2


def test_unknown_gpu_is_one_line_exit_2_with_the_valid_names(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "azure-conv-sample", "--gpu", "nope")
    assert code == 2 and err.count("\n") == 1
    assert "unknown GPU 'nope'" in err and "h100-80gb" in err and "a100-80gb" in err


@pytest.mark.parametrize("args, text", [
    (["--cost", "toy", "--model", "llama-3-8b"], "--model llama-3-8b: not an option of the toy cost"),
    (["--cost", "roofline", "--decode-ms", "2"], "--decode-ms 2.0: not an option of the roofline cost"),
    (["--cost", "unit", "--gpu", "a100"], "--gpu a100: not an option of the unit cost"),
    (["--decode-ms", "2", "--gpu", "a100"], "--decode-ms is an option of the toy cost and --gpu of the roofline"),
    (["--dtype", "float32"], "--dtype float32: servesim models 16-bit weights"),
    (["--block-size", "12"], "--block-size 12: vLLM allows 1, 8, 16, 32, 64, 128"),
    (["--max-concurrency", "0"], "max_concurrency must be"),
    (["--set-nothing"], "No such option"),
])
def test_conflicting_or_unmodelled_options_are_refused(monkeypatch, capsys, args, text):
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "azure-conv-sample", *args)
    assert code == 2 and err.count("\n") == 1 and err.startswith("servesim: error: ")
    assert text in err


def test_a_toy_option_selects_the_toy_cost_under_auto():
    cost = build_cost("auto", "azure-conv-sample", decode_ms=2.0)
    assert (cost.name, cost.decode_ms, cost.prefill_token_ms) == ("toy", 2.0, 0.1)


def test_a_profile_keeps_the_model_given_and_refuses_another_gpu(tmp_path):
    profile = tmp_path / "p.json"
    from servesim.cost import CostParams, load_gpu
    from servesim.cost.profile import profile_dict, save_profile

    gpu = load_gpu("a100")
    save_profile(profile, profile_dict("llama-2-7b", gpu.name, 1, CostParams.defaults(gpu), {}, {}))
    cost = build_cost(str(profile), "azure-conv-sample", model="llama-3-8b")
    assert isinstance(cost, Roofline) and cost.model.name == "llama-3-8b" and cost.gpu.name == "a100-80gb"
    with pytest.raises(ConfigError, match="fitted on its own GPU"):
        build_cost(str(profile), "azure-conv-sample", gpu="h100")


def test_the_api_and_the_cli_share_one_set_of_defaults(monkeypatch, capsys, tmp_path):
    data, _ = run_json(monkeypatch, capsys, tmp_path, "--workload", "azure-conv-sample")
    run = servesim.Run.simulate("azure-conv-sample", record="summary")
    assert run.result.cost_model == data["cost_model"] == "roofline"
    assert run.benchmark["ttft"].mean == pytest.approx(data["mean_ttft_ms"], rel=1e-12)  # both in ms
    assert servesim.Run.simulate("azure-conv-sample", cost="auto", record="summary").result.cost_model == "roofline"
    seed = servesim.Run.simulate("seed")
    assert (seed.result.cost_model, seed.result.config.max_num_batched_tokens, seed.result.config.max_num_seqs) == (
        "toy", 256, 8)


def test_lesson_workloads_keep_the_lessons_settings_and_say_so(monkeypatch, capsys, tmp_path):
    data, err = run_json(monkeypatch, capsys, tmp_path, "--workload", "seed")
    assert (data["config"]["max_num_batched_tokens"], data["config"]["max_num_seqs"]) == (256, 8)
    assert err == ("servesim: note: seed: the lesson's settings, max_num_seqs 8, max_num_batched_tokens 256 "
                   "(override with --max-num-seqs --max-num-batched-tokens)\n")
    given, err = run_json(monkeypatch, capsys, tmp_path, "--workload", "seed", "--max-num-seqs", "16",
                          "--max-num-batched-tokens", "512")
    assert (given["config"]["max_num_batched_tokens"], given["config"]["max_num_seqs"]) == (512, 16) and err == ""


@pytest.mark.parametrize("value", ["no", "yes", "2"])
def test_booleans_in_set_are_true_or_false_only(monkeypatch, capsys, value):
    code, _, err = cli(monkeypatch, capsys, "compare", "--set", f"enable_chunked_prefill=true,{value}")
    assert code == 2 and "enable_chunked_prefill must be true or false" in err


def test_max_model_len_is_the_models_and_longer_requests_fail(monkeypatch, capsys, tmp_path):
    # Llama-3-8B's config.json: max_position_embeddings 8192. The Mooncake sample's longest prompts are far
    # beyond it: vLLM rejects those requests and vllm bench serve counts them as failed.
    from servesim.workloads import load_workload

    reqs = load_workload("mooncake-sample")
    too_long = sum(r.prompt_len + r.output_len > 8192 for r in reqs)
    assert too_long > 0
    data, err = run_json(monkeypatch, capsys, tmp_path, "--workload", "mooncake-sample")
    assert data["config"]["max_model_len"] == 8192
    assert (data["failed"], data["completed"]) == (too_long, len(reqs) - too_long)
    assert f"{too_long:,} requests (e.g. " in err and "longer than max_model_len 8,192" in err


# -- output paths are checked before simulating --------------------------------------------------------------------

@pytest.mark.parametrize("command", [
    ["run", "--workload", "seed", "--json"],
    ["trace", "--workload", "seed", "--json"],
    ["run", "--workload", "seed", "--record", "steps", "--records"],
    ["conform", str(SHARED / "conformance" / "scenarios" / "01_seed_budget256.json"), "--out"],
    ["calibrate", "missing.csv", "--model", "llama-2-7b", "--gpu", "a100", "--output"],
])
@pytest.mark.parametrize("where", ["missing-folder", "a-file-as-folder", "a-folder-as-file"])
def test_an_unwritable_output_is_one_line_before_anything_runs(monkeypatch, capsys, tmp_path, command, where):
    if command[0] == "conform" and not SHARED.exists():
        pytest.skip("needs ../shared")
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    path = {"missing-folder": tmp_path / "nope" / "x.json", "a-file-as-folder": afile / "x.json",
            "a-folder-as-file": tmp_path}[where]
    if command[-1] == "--records" and where == "a-folder-as-file":
        path = afile  # a folder option given a file
    code, out, err = cli(monkeypatch, capsys, *command, str(path))
    assert code == 2 and err.count("\n") == 1 and err.startswith("servesim: error: "), err
    assert str(path) in err and out == ""
    assert afile.read_text() == "keep me"


# -- vllm bench serve's flags and result file ---------------------------------------------------------------------

def test_random_dataset_flags_equal_servesims_own(monkeypatch, capsys, tmp_path):
    vllm, _ = run_json(monkeypatch, capsys, tmp_path, "--dataset-name", "random", "--random-input-len", "100",
                       "--random-output-len", "10", "--num-prompts", "6", "--request-rate", "inf", "--cost", "toy")
    own, _ = run_json(monkeypatch, capsys, tmp_path, "--workload", "random", "--prompt-len", "100",
                      "--output-len", "10", "--num-requests", "6", "--request-rate", "inf", "--cost", "toy")
    vllm.pop("date"), own.pop("date")
    assert vllm == own
    assert (vllm["num_prompts"], vllm["total_input_tokens"], vllm["total_output_tokens"]) == (6, 600, 60)


def test_random_range_ratio_and_prefix_len(monkeypatch, capsys, tmp_path):
    # vLLM's RandomDataset: input lengths uniform in [floor(L(1-r)), floor(L(1+r))] plus the fixed prefix
    from servesim.cli.options import random_lengths

    assert random_lengths(100, 0.5, 20) == "uniform:70:170"
    assert random_lengths(100, 0.0, 20) == "120"
    data, _ = run_json(monkeypatch, capsys, tmp_path, "--dataset-name", "random", "--random-input-len", "100",
                       "--random-range-ratio", "0.5", "--random-prefix-len", "20", "--random-output-len", "4",
                       "--num-prompts", "50", "--request-rate", "inf", "--cost", "toy", "--save-detailed")
    assert all(70 <= n <= 170 for n in data["input_lens"]) and len(set(data["input_lens"])) > 10
    assert all(2 <= n <= 6 for n in data["output_lens"])


def test_the_result_file_is_a_superset_of_vllms(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    data, _ = run_json(monkeypatch, capsys, tmp_path, "--workload", "seed", "--save-detailed")
    # vllm/benchmarks/serve.py's keys (its per-request arrays with --save-detailed), then servesim's config
    for key in ("date", "backend", "model_id", "num_prompts", "request_rate", "burstiness", "max_concurrency",
                "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
                "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms",
                "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "input_lens", "output_lens", "ttfts", "itls", "errors",
                "config"):
        assert key in data, key
    assert data["date"] == "19700101-000000" and data["num_prompts"] == 5
    # the seed (README, tests/test_seed.py): L's 2000-token prompt has a TTFT of 232.8 ms under vllm at budget 256
    i = data["input_lens"].index(2000)
    assert data["ttfts"][i] == pytest.approx(0.2328)
    assert data["output_lens"][i] == len(data["itls"][i]) + 1 and data["errors"] == [""] * 5


def test_save_result_writes_vllms_default_file_name(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    code, out, err = cli(monkeypatch, capsys, "run", "--workload", "seed", "--save-result", "--result-dir",
                         str(tmp_path))
    assert code == 0, err
    path = tmp_path / "servesim-infqps-toy-19700101-000000.json"
    assert json.loads(path.read_text())["completed"] == 5 and f"wrote {path}" in out


def test_version(monkeypatch, capsys):
    code, out, _ = cli(monkeypatch, capsys, "--version")
    assert code == 0 and out == f"servesim {servesim.__version__}\n"


def test_help_fits_80_columns_and_never_cuts_an_option(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    for command in ("run", "trace", "compare", "explain"):
        code, out, _ = cli(monkeypatch, capsys, command, "--help")
        assert code == 0
        assert max(len(line) for line in out.splitlines()) <= 80
        for flag in ("--max-num-batched-tokens", "--tensor-parallel-size", "--gpu-memory-utilization",
                     "--random-input-len", "--model"):
            assert flag in out, (command, flag)


def test_every_simulating_command_takes_the_same_engine_and_cost_options():
    import typer

    from servesim.cli.app import app

    commands = typer.main.get_command(app).commands
    shared = [{p.name for p in commands[c].params} for c in ("run", "trace", "compare", "explain")]
    for names in shared:
        assert {"model", "gpu", "tp", "dtype", "cost", "max_num_seqs", "max_model_len", "block_size",
                "gpu_memory_utilization", "num_requests", "dataset_name"} <= names


def test_cost_refuses_a_gpu_beside_a_profile(monkeypatch, capsys, tmp_path):
    from servesim.cost import CostParams, load_gpu
    from servesim.cost.profile import profile_dict, save_profile

    profile = tmp_path / "p.json"
    gpu = load_gpu("a100")
    save_profile(profile, profile_dict("llama-2-7b", gpu.name, 1, CostParams.defaults(gpu), {}, {}))
    code, _, err = cli(monkeypatch, capsys, "cost", "--cost", str(profile), "--gpu", "h100", "--decodes", "8")
    assert code == 2 and "fitted on its own GPU" in err and err.count("\n") == 1
    code, out, err = cli(monkeypatch, capsys, "cost", "--cost", str(profile), "--decodes", "8", "--json")
    assert code == 0, err


@pytest.mark.parametrize("command", [["explain"], ["trace"], ["run"], ["compare", "--policies", "static,vllm"]])
def test_every_request_too_long_is_said_not_crashed(monkeypatch, capsys, command):
    code, out, err = cli(monkeypatch, capsys, *command, "--workload", "seed", "--max-model-len", "1")
    assert code == 0, err
    assert "5 requests (e.g. d0) longer than max_model_len 1" in err
    if command == ["explain"]:
        assert "No request was served: all 5 are longer than max_model_len 1" in out


def test_compare_set_names_the_knob_once_and_each_value_fits_80_columns(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli(monkeypatch, capsys, "compare", "--workload", "seed", "--set",
                         "max_num_batched_tokens=256,512,2048")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "seed: max_num_batched_tokens = 256, 512, 2048 (vllm, toy cost)"
    assert "256" in lines[2] and "512" in lines[2] and "2048" in lines[2] and "…" not in lines[2]
    assert max(len(line) for line in lines if line.startswith(("┃", "│", "┏", "└"))) <= 80


def test_random_prefix_is_served_by_the_prefix_cache(monkeypatch, capsys, tmp_path):
    # 4 prompts of 256 shared + 64 own tokens, all at once (budget 8192 on the H100): the first computes its 320
    # tokens; the prefix's 16 full blocks are cached once scheduled, so the 3 admitted after it in the same step hit
    # 256 tokens each: queried 4 x 320 = 1280, hit 3 x 256 = 768 (60 %)
    data, _ = run_json(monkeypatch, capsys, tmp_path, "--dataset-name", "random", "--random-prefix-len", "256",
                       "--random-input-len", "64", "--random-output-len", "4", "--num-prompts", "4",
                       "--request-rate", "inf")
    assert (data["prefix_cache_queries"], data["prefix_cache_hits"]) == (1280, 768)
    assert data["prefix_cache_hit_rate"] == pytest.approx(0.6)
    off, _ = run_json(monkeypatch, capsys, tmp_path, "--dataset-name", "random", "--random-prefix-len", "256",
                      "--random-input-len", "64", "--random-output-len", "4", "--num-prompts", "4",
                      "--request-rate", "inf", "--no-enable-prefix-caching")
    assert "prefix_cache_hits" not in off and off["mean_ttft_ms"] > data["mean_ttft_ms"]


def test_prefix_repetition_dataset(monkeypatch, capsys, tmp_path):
    # vllm bench serve's prefix_repetition: 2 prefixes of 256 tokens, 20 // 2 = 10 prompts after each (+ 64 own
    # tokens), all at once within the H100's 8192-token budget: the first prompt of each prefix computes it, the 18
    # others hit its 16 blocks: queried 20 x 320 = 6400, hit 18 x 256 = 4608 (72 %)
    data, _ = run_json(monkeypatch, capsys, tmp_path, "--dataset-name", "prefix_repetition", "--num-prompts", "20",
                       "--prefix-repetition-num-prefixes", "2", "--prefix-repetition-suffix-len", "64",
                       "--prefix-repetition-output-len", "4", "--request-rate", "inf")
    assert (data["num_prompts"], data["total_input_tokens"], data["total_output_tokens"]) == (20, 6400, 80)
    assert (data["prefix_cache_queries"], data["prefix_cache_hits"]) == (6400, 4608)
    code, _, err = cli(monkeypatch, capsys, "run", "--dataset-name", "prefix_repetition", "--num-prompts", "5")
    assert code == 2 and "--num-prompts (5) must be >= --prefix-repetition-num-prefixes (10)" in err


def test_a_full_swap_space_is_said_with_what_happened(monkeypatch, capsys):
    # the seed with 137 usable blocks preempts once (README); --swap-space 0.001 GiB holds no 2 MiB block
    code, _, err = cli(monkeypatch, capsys, "trace", "--workload", "seed", "--max-num-batched-tokens", "256",
                       "--max-num-seqs", "8", "--num-gpu-blocks", "138", "--preemption-mode", "swap",
                       "--swap-space", "0.001")
    assert code == 0
    assert ("note: 1 of 1 preemptions found the CPU swap space full (swap_space 0.001 GiB = 0 blocks of 16 tokens) "
            "and were recomputed instead") in err
    code, _, err = cli(monkeypatch, capsys, "trace", "--workload", "seed", "--max-num-batched-tokens", "256",
                       "--max-num-seqs", "8", "--num-gpu-blocks", "138", "--preemption-mode", "swap")
    assert code == 0 and "swap space full" not in err  # vLLM's 4 GiB hold 2,048 blocks


# -- unbounded work is refused up front, naming the limit ------------------------------------------------------------

def test_an_unreachable_ray_address_is_refused_in_seconds(monkeypatch, capsys):
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = cli(monkeypatch, capsys, "sweep", "--workload", "seed", "--cost", "toy", "--executor", "ray",
                       "--ray-address", f"127.0.0.1:{port}")
    assert code == 2 and err == (f"servesim: error: --ray-address 127.0.0.1:{port}: no Ray cluster answers at "
                                 f"127.0.0.1:{port} (Connection refused); start one there (ray start --head) or drop "
                                 "--ray-address\n")


def test_replicas_past_the_limit_are_refused(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "seed", "--num-replicas", "100000")
    assert code == 2 and "100,000 replicas: servesim simulates at most 4,096" in err


def test_a_target_rate_past_the_replica_limit_is_refused(monkeypatch, capsys):
    # the seed's capacity search reaches --max-rate (10,000 req/s) on one replica: 1e9 needs 100,000 of them
    code, _, err = cli(monkeypatch, capsys, "capacity", "--workload", "seed", "--goodput", "ttft:500",
                       "--target-rate", "1e9")
    assert code == 2 and "so about 100,000 replicas; servesim simulates at most 4,096" in err


def test_a_sweep_past_the_point_limit_is_refused(monkeypatch, capsys):
    rates = ",".join(str(r) for r in range(1, 401))  # 400 x 300 = 120,000 points
    seqs = ",".join(str(s) for s in range(1, 301))
    code, _, err = cli(monkeypatch, capsys, "sweep", "--workload", "seed", "--cost", "toy", "--request-rate", rates,
                       "--set", f"max_num_seqs={seqs}")
    assert code == 2 and "120,000 points: a sweep takes at most 100,000" in err


# -- the small ones (issue 24, Low) ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--router", "least-loaded"], "--router shapes a cluster's routing: add --num-replicas N"),
    (["--router-delay-ms", "5"], "--router-delay-ms shapes a cluster's routing: add --num-replicas N"),
    (["--num-replicas", "2", "--router-delay-ms", "-1"], "--router-delay-ms -1: expected a finite number of ms >= 0"),
    (["--num-replicas", "2", "--router", "weighted:"], "--router weighted:: expected NAME=WEIGHT pairs"),
])
def test_cluster_options_need_a_cluster_and_their_own_units(monkeypatch, capsys, args, words):
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "seed", *args)
    assert code == 2 and words in err and err.count("\n") == 1, err


@pytest.mark.parametrize("args", [["sweep", "--request-rate", "1,,2"], ["compare", "--set", "max_num_seqs=2,,4"],
                                  ["sweep", "--request-rate", "1,2,"]])
def test_an_empty_list_item_is_refused_not_dropped(monkeypatch, capsys, args):
    code, _, err = cli(monkeypatch, capsys, *args[:1], "--workload", "seed", "--cost", "toy", *args[1:])
    assert code == 2 and "an empty item; expected comma-separated values" in err


def test_a_cluster_result_file_counts_prompts_and_steps(monkeypatch, capsys, tmp_path):
    code, _, _ = cli(monkeypatch, capsys, "run", "--workload", "seed", "--num-replicas", "2", "--json",
                     str(tmp_path / "c.json"))
    data = json.loads((tmp_path / "c.json").read_text())
    assert code == 0 and data["num_prompts"] == 5
    assert data["num_steps"] == sum(r["steps"] for r in data["replicas"]) > 0  # every replica's steps


def test_sweep_and_capacity_say_which_rates_replace_the_arrivals(monkeypatch, capsys):
    _, _, err = cli(monkeypatch, capsys, "sweep", "--workload", "seed", "--cost", "toy", "--request-rate", "1,2")
    assert "arrival times replaced: each point's --request-rate (1, 2), --burstiness 1" in err
    _, _, err = cli(monkeypatch, capsys, "capacity", "--workload", "seed", "--goodput", "ttft:500")
    assert "arrival times replaced: the rates capacity tries (from --start-rate 1, Poisson at --seed 0)" in err
    assert "--request-rate 1," not in err and "1 configuration in" in err


def test_an_engine_preset_that_prices_as_the_default_says_so(monkeypatch, capsys, tmp_path):
    # trtllm's host model at TP 1 is vllm-0.33's (docs/cost-models.md): the same numbers, and a note that says why
    runs = {}
    for engine in ("trtllm", "vllm-0.33", "vllm-0.2"):
        code, _, err = cli(monkeypatch, capsys, "run", "--workload", "azure-conv-sample", "--num-prompts", "50",
                           "--engine", engine, "--json", str(tmp_path / f"{engine}.json"))
        runs[engine] = (json.loads((tmp_path / f"{engine}.json").read_text())["duration"], err)
    assert runs["trtllm"][0] == runs["vllm-0.33"][0] != runs["vllm-0.2"][0]
    assert "--engine trtllm: at TP 1 its host model is vllm-0.33's" in runs["trtllm"][1]
    assert "note: --engine" not in runs["vllm-0.33"][1] + runs["vllm-0.2"][1]


def test_calibrate_refuses_tp_0(monkeypatch, capsys, tmp_path):
    code, _, err = cli(monkeypatch, capsys, "calibrate", str(tmp_path / "m.csv"), "--model", "llama-2-7b", "--gpu",
                       "a100", "--tp", "0")
    assert code == 2 and err == "servesim: error: --tp 0: expected a tensor-parallel size >= 1\n"


def test_a_device_as_a_workload_is_named_as_such(monkeypatch, capsys, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # (never the machine's own device files)
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", str(fifo))
    assert code == 2 and err == (f"servesim: error: {fifo}: not a regular file (a device, FIFO or socket); expected "
                                 "a trace file, a built-in workload or 'random'\n")
