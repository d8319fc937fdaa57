"""Every simulating command (trace, run, compare, explain) takes `--workload` as a built-in, a file or `random`,
with the workload options `servesim workload` has (issue 5): format, columns, rates, sampling, capping."""

from __future__ import annotations

import json

import pytest
import typer
from helpers import cli

from servesim.cli import app
from servesim.cli.workload import LOADER_OPTIONS

SIM_COMMANDS = ["trace", "run", "compare", "explain"]




@pytest.mark.parametrize("command", SIM_COMMANDS)
def test_every_simulating_command_declares_every_workload_option(command):
    click_cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    names = {p.name for p in click_cmd.params}
    assert {"workload", *LOADER_OPTIONS} <= names


def test_run_random_lengths_all_at_once(monkeypatch, capsys, tmp_path):
    # 6 requests of 100 prompt + 10 output tokens at once, toy cost: one 600-token prefill step (60 ms, which also
    # samples each first token), then 9 steps of 6 decodes (6 ms each): 60 + 54 = 114 ms.
    out = tmp_path / "r.json"
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--num-requests", "6", "--prompt-len",
                       "100", "--output-len", "10", "--request-rate", "inf", "--cost", "toy", "--max-num-seqs", "8",
                       "--json", str(out))
    assert code == 0, err
    data = json.loads(out.read_text())
    assert (data["completed"], data["total_input_tokens"], data["total_output_tokens"]) == (6, 600, 60)
    assert data["duration"] == pytest.approx(0.114)


def test_trace_generic_csv_with_columns_time_unit_and_rate_scale(monkeypatch, capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("ts,in,out\n0,5,3\n1000,4,2\n")  # arrivals in milliseconds
    out = tmp_path / "t.json"
    code, _, err = cli(monkeypatch, capsys, "trace", "--workload", str(trace), "--columns",
                       "arrival=ts,prompt=in,output=out", "--time-unit", "ms", "--rate-scale", "2", "--cost", "toy",
                       "--max-num-seqs", "8", "--json", str(out))
    assert code == 0, err
    reqs = json.loads(out.read_text())["requests"]
    # 1000 ms = 1 s, then twice the rate: 0.5 s
    assert [(r["arrival_time"], r["prompt_len"], r["output_len"]) for r in reqs] == [(0.0, 5, 3), (0.5, 4, 2)]


def test_compare_window_keeps_the_seed_decodes_only(monkeypatch, capsys):
    # seed: d0..d3 (32-token prompts) at 0 s, L (2000 tokens) at 0.02 s; [0, 0.01) keeps the four d's.
    code, out, err = cli(monkeypatch, capsys, "compare", "--workload", "seed", "--window", "0:0.01",
                         "--policies", "static,vllm", "--max-num-seqs", "8")
    assert code == 0, err
    row = next(line for line in out.splitlines() if "Prompt tokens processed" in line)
    assert [cell.strip() for cell in row.split("│")[2:4]] == ["128", "128"]  # 4 x 32


def test_explain_max_model_len_fails_longer_requests_as_vllm_does(monkeypatch, capsys):
    # L has 2000 + 5 tokens > 1000: vLLM rejects it ("maximum context length"), and the four d's (32 + 40) run.
    code, out, err = cli(monkeypatch, capsys, "explain", "--workload", "seed", "--max-model-len", "1000",
                         "--request", "L", "--max-num-batched-tokens", "256", "--max-num-seqs", "8")
    assert code == 0, err
    assert err == ("servesim: note: request L longer than max_model_len 1,000 (prompt + output tokens) failed: "
                   "vLLM rejects it, and vllm bench serve counts it as failed\n")
    assert out.split() == ("L failed on arrival: its 2,000 prompt + 5 output tokens exceed max_model_len 1,000 "
                           "(vLLM rejects it; vllm bench serve counts it as failed).").split()


@pytest.mark.parametrize("command", SIM_COMMANDS)
def test_bad_file_is_one_line_exit_2_from_every_simulating_command(monkeypatch, capsys, tmp_path, command):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1,abc,5\n")
    args = [command, "--workload", str(bad)] + (["--policies", "static,vllm"] if command == "compare" else [])
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 2
    assert err == (f"servesim: error: {bad}: line 3, column 'num_prefill_tokens': got 'abc'; "
                   f"expected a whole number >= 1\n")


def test_out_of_order_warning_is_a_servesim_line_not_a_python_warning(monkeypatch, capsys, tmp_path):
    trace = tmp_path / "v.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n2,10,5\n1,10,5\n0,10,5\n")
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", str(trace), "--cost", "toy", "--max-num-seqs", "8")
    assert code == 0
    assert err == (f"servesim: warning: {trace}: 2 timestamps were earlier than the line before them "
                   "(out of order); sorted by arrival\n")
