"""TensorRT-LLM's flags and `--extra_llm_api_options` YAML keys through the CLI: each honoured (the run changes)
or refused in one line (exit 2, no traceback); the other engines' flags refused under --policy trtllm, and
TensorRT-LLM's under theirs."""

import pytest
from helpers import cli, write_file

# the seed workload (4 short requests, L's 2000-token prompt at 20 ms), toy cost, with the lesson's sizes given as
# TensorRT-LLM's: 8 requests, 256 tokens per batch, chunked context; every step printed
BASE = ("trace", "--policy", "trtllm", "--workload", "seed", "--limit", "0", "--max_batch_size", "8",
        "--max_num_tokens", "256", "--enable_chunked_prefill")


def trace(monkeypatch, capsys, *args):
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    return out


@pytest.mark.parametrize("flag", [("--max_batch_size", "2"), ("--max-batch-size", "2"), ("--max_num_tokens", "512"),
                                  ("--max-num-tokens", "512"), ("--max_seq_len", "1000")])
def test_a_trtllm_flag_changes_the_run(monkeypatch, capsys, flag):
    base = trace(monkeypatch, capsys, *BASE)
    args = [a for a in BASE]
    name = flag[0].lstrip("-").replace("-", "_")
    if f"--{name}" in args:  # (given again: the new value replaces the base's)
        k = args.index(f"--{name}")
        del args[k:k + 2]
    # (max_seq_len 1000: L, 2000 + 8 tokens, fails on arrival, as TensorRT-LLM rejects it)
    assert trace(monkeypatch, capsys, *args, *flag) != base


def test_enable_chunked_prefill_changes_the_run(monkeypatch, capsys):
    # without it L's 2000-token context cannot run in 256-token batches: refused in one line naming both
    chunked = trace(monkeypatch, capsys, *BASE)
    code, _, err = cli(monkeypatch, capsys, *BASE[:-1])
    assert code == 2 and "max_num_tokens 256 with enable_chunked_prefill off" in err
    whole = trace(monkeypatch, capsys, *BASE[:-1], "--max_num_tokens", "4096")
    assert whole != chunked


@pytest.mark.parametrize("yaml_text", [
    "max_batch_size: 2", "max_num_tokens: 512", "max_seq_len: 1000", "enable_chunked_prefill: false\n"
    "max_num_tokens: 4096",
    "scheduler_config:\n  capacity_scheduler_policy: STATIC_BATCH",
    "kv_cache_config:\n  max_tokens: 2048\n  tokens_per_block: 64",
])
def test_a_yaml_key_changes_the_run(monkeypatch, capsys, tmp_path, yaml_text):
    base = trace(monkeypatch, capsys, *BASE)
    path = write_file(tmp_path, "extra.yaml", yaml_text)
    args = [a for a in BASE]
    for key in ("max_batch_size", "max_num_tokens"):  # (the file overrides the flag: give one of them)
        if key in yaml_text:
            k = args.index(f"--{key}")
            del args[k:k + 2]
    if "enable_chunked_prefill: false" in yaml_text:
        args.remove("--enable_chunked_prefill")
    assert trace(monkeypatch, capsys, *args, "--extra_llm_api_options", str(path)) != base


def test_equal_progress_changes_a_run_with_contexts_side_by_side(monkeypatch, capsys, tmp_path):
    # the mixed workload has contexts in the same batch, whose chunks the policy shares out differently
    args = ("trace", "--policy", "trtllm", "--workload", "mixed", "--limit", "0", "--max_batch_size", "8",
            "--max_num_tokens", "256", "--enable_chunked_prefill")
    path = write_file(tmp_path, "ep.yaml", "scheduler_config:\n  context_chunking_policy: EQUAL_PROGRESS\n")
    assert trace(monkeypatch, capsys, *args) != trace(monkeypatch, capsys, *args, "--extra_llm_api_options", str(path))


def test_max_utilization_changes_a_run_the_kv_cache_binds(monkeypatch, capsys, tmp_path):
    # a pool of 2080 tokens (65 blocks of 32): L's lifetime (2008 tokens, 63 blocks) waits under
    # GUARANTEED_NO_EVICT for the decodes' reservations; MAX_UTILIZATION starts it at once
    pool = "kv_cache_config:\n  max_tokens: 2080\n"
    base = trace(monkeypatch, capsys, *BASE, "--extra_llm_api_options", str(write_file(tmp_path, "a.yaml", pool)))
    util = pool + "scheduler_config:\n  capacity_scheduler_policy: MAX_UTILIZATION\n"
    out = trace(monkeypatch, capsys, *BASE, "--extra_llm_api_options", str(write_file(tmp_path, "b.yaml", util)))
    assert "GUARANTEED_NO_EVICT" in base and out != base


def test_enable_block_reuse_changes_a_run_with_shared_prefixes(monkeypatch, capsys, tmp_path):
    # Mooncake's sample carries block identities: reuse on (the default) computes fewer context tokens
    args = ("trace", "--policy", "trtllm", "--workload", "mooncake-sample", "--limit", "40")
    off = write_file(tmp_path, "off.yaml", "kv_cache_config:\n  enable_block_reuse: false\n")
    assert trace(monkeypatch, capsys, *args) != trace(monkeypatch, capsys, *args, "--extra_llm_api_options",
                                                       str(off))


def test_free_gpu_memory_fraction_needs_a_gpu(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, *BASE, "--kv_cache_free_gpu_memory_fraction", "0.5")
    assert code == 2 and "free_gpu_memory_fraction 0.5" in err and "knows no GPU" in err


def test_free_gpu_memory_fraction_sizes_the_pool_on_a_roofline(monkeypatch, capsys):
    # Llama-3-8B on an H100: the pool shrinks with the fraction (its blocks, in the first step's free count)
    args = ("trace", "--policy", "trtllm", "--workload", "azure-conv-sample", "--limit", "1")
    half = trace(monkeypatch, capsys, *args, "--kv_cache_free_gpu_memory_fraction", "0.45")
    full = trace(monkeypatch, capsys, *args)
    assert half != full


@pytest.mark.parametrize("yaml_text, words", [
    ("max_batch_size: 8\nscheduler_config:\n  foo: 1\n", "key 'scheduler_config.foo' is not modelled"),
    ("speculative_config:\n  decoding_type: Eagle\n", "key 'speculative_config' is not modelled"),
    ("scheduler_config:\n  capacity_scheduler_policy: FASTEST\n", "capacity_scheduler_policy 'FASTEST'"),
    ("max_batch_size: [8\n", "not YAML (line 2)"),  # (YAML finds the open list at the end of the file)
    ("", "no LLM API options in it"),
    ("max_num_tokens: 128\n", "overrides --max_num_tokens 256"),
])
def test_a_bad_yaml_file_is_refused_in_one_line(monkeypatch, capsys, tmp_path, yaml_text, words):
    path = write_file(tmp_path, "bad.yaml", yaml_text)
    code, out, err = cli(monkeypatch, capsys, *BASE, "--extra_llm_api_options", str(path))
    assert code == 2 and words in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    if "is not modelled" in words:
        assert str(path) in err


@pytest.mark.parametrize("flag", [("--max-num-batched-tokens", "256"), ("--max-num-seqs", "8"),
                                  ("--num-gpu-blocks", "100"), ("--block-size", "32"),
                                  ("--max-running-requests", "8"), ("--chunked-prefill-size", "256")])
def test_other_engines_flags_are_refused_under_trtllm(monkeypatch, capsys, flag):
    code, _, err = cli(monkeypatch, capsys, *BASE, *flag)
    assert code == 2 and ("under policy trtllm" in err or "add --policy sglang" in err)


@pytest.mark.parametrize("policy", ["vllm", "sglang", "static"])
@pytest.mark.parametrize("flag", [("--max_batch_size", "8"), ("--max_num_tokens", "256"),
                                  ("--kv_cache_free_gpu_memory_fraction", "0.5"), ("--enable_chunked_prefill",),
                                  ("--disable_overlap_scheduler",)])
def test_trtllm_flags_are_refused_under_the_other_engines(monkeypatch, capsys, policy, flag):
    code, _, err = cli(monkeypatch, capsys, "trace", "--policy", policy, "--workload", "seed", *flag)
    assert code == 2 and "is a TensorRT-LLM server option: add --policy trtllm" in err


def test_the_yaml_file_is_refused_under_another_engine(monkeypatch, capsys, tmp_path):
    path = write_file(tmp_path, "extra.yaml", "max_batch_size: 8\n")
    code, _, err = cli(monkeypatch, capsys, "trace", "--policy", "vllm", "--workload", "seed",
                       "--extra_llm_api_options", str(path))
    assert code == 2 and "--extra_llm_api_options is a TensorRT-LLM server option" in err
