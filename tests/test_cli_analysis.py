"""`servesim run`, `compare` and `explain` end to end (issue 6)."""

import json
import sys

import pytest
from typer.testing import CliRunner

from servesim.cli import app, main

SEED = ["--workload", "seed", "--max-num-batched-tokens", "256", "--max-num-seqs", "8"]


def invoke(*args):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_run_prints_vllm_block_and_writes_vllm_keys(tmp_path):
    out = invoke("run", *SEED, "--goodput", "ttft:100", "--json", str(tmp_path / "r.json"))
    assert "============ Serving Benchmark Result ============" in out
    # seed under vllm, budget 256 (test_seed.py): d0-d3 TTFT 12.8 ms, L 232.8 ms; last finish at 372.8 ms
    assert "Mean TTFT (ms):                          56.80" in out  # (4 x 12.8 + 232.8) / 5
    assert "Request goodput (req/s):                 10.73" in out  # 4 good / 0.3728 s
    assert "Server-side Breakdown" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["median_ttft_ms"] == pytest.approx(12.8)
    # 160 gaps, the 28 largest (7 per d, steps 3-9) 29.2 ms: the 99th percentile falls among them
    assert data["p99_itl_ms"] == pytest.approx(29.2)
    assert data["completed"] == 5 and data["overloaded"] is False


def test_compare_policies_prints_a_column_each_and_sentences():
    out = invoke("compare", "--policies", "static,continuous,vllm", *SEED)
    assert "chunked prefill cut the worst gap between tokens from 204 ms to 29.2 ms" in out
    assert "static, continuous never chunk" in out


def test_explain_request():
    out = invoke("explain", *SEED, "--request", "L")
    assert "prefilled in 8 chunks (7 x 252 + 236) over steps 3-10" in out


def test_explain_run_answers_the_lesson():
    assert "2000 prompt tokens processed either way" in invoke("explain", *SEED)


@pytest.mark.parametrize("args, message", [
    (["run", "--goodput", "itl:5"], "--goodput 'itl:5'"),
    (["run", "--percentiles", "0"], "--percentiles"),
    (["compare"], "exactly one of --policies"),
    (["compare", "--set", "max_num_batched_tokens=256", "--policy", "static"], "smaller than max_model_len"),
    (["explain", "--request", "nope"], "no such request"),
])
def test_user_errors_are_one_line_exit_2(monkeypatch, capsys, args, message):
    monkeypatch.setattr(sys, "argv", ["servesim", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and message in err and err.count("\n") == 1


def test_run_defaults_to_summary_records_and_says_what_it_cannot_know(tmp_path):
    # seed on 138 KV blocks, worked out in test_explain_kv.py: L preempted once, 29 steps bound by KV blocks,
    # all 5 requests present from 20 ms, all 165 output tokens within the first second (the run lasts 571.9 ms)
    kv = [*SEED, "--num-gpu-blocks", "138"]
    out = invoke("run", *kv, "--json", str(tmp_path / "r.json"))
    assert "Steps bound by:                          not recorded (needs --record full)" in out
    assert "Peak concurrent requests:                5.00      " in out
    assert "Preemptions:                             1" in out
    full = invoke("run", *kv, "--record", "full")
    assert "Steps bound by kv_blocks:                29" in full
    # the vLLM block is the same at every record level
    assert out.split("=" * 50)[0] == full.split("=" * 50)[0]
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["max_concurrent_requests"], data["max_output_tokens_per_s"]) == (5, 165.0)
    assert data["request_rate"] is None and data["max_concurrency"] is None


def test_explain_request_under_kv_pressure():
    out = invoke("explain", *SEED, "--num-gpu-blocks", "138", "--request", "L")
    assert "Preempted in step 11 (recompute) with 0 KV blocks free at the step's start" in out
