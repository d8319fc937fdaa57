"""The simulation commands as a user runs them: demo, lesson, trace, and one-line errors."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from servesim.cli import main
from servesim.cli.app import app

runner = CliRunner()


def test_demo_prints_the_three_policies_side_by_side():
    res = runner.invoke(app, ["demo", "--steps", "4"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "Side by side" in res.output
    # static / continuous / vllm TTFT of L, worst gaps, the chunk plan: derived by hand in test_seed.py
    for text in ("348.8 ms", "204.8 ms", "232.8 ms", "29.2 ms", "204 ms", "8 chunks (7 x 252 + 236)"):
        assert text in res.output


def test_lesson_answers_are_computed():
    res = runner.invoke(app, ["lesson"], terminal_width=200)
    assert res.exit_code == 0
    # 256 - 4; ceil(2000 / 252); 4 x 1 + 252 x 0.1; 4 + 2000 x 0.1; 5/8 and 5/6 (lesson.txt); the lesson's answer
    for text in ("= 252 prompt tokens", "8 iterations", "29.2 ms", "204 ms", "62.5%", "83.33%", "No."):
        assert text in res.output


def test_trace_json_has_step_records_and_timelines(tmp_path):
    out = tmp_path / "seed.json"
    res = runner.invoke(app, ["trace", "--workload", "seed", "--max-num-batched-tokens", "256",
                              "--max-num-seqs", "8", "--json", str(out)], terminal_width=200)
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["cost_model"] == "toy"  # auto: the lesson's cost for the lesson's workload
    assert [e["num_scheduled_tokens"] for e in data["steps"][3]["scheduled"]] == [1, 1, 1, 1, 252]
    assert {r["id"]: len(r["token_times"]) for r in data["requests"]}["L"] == 5


def test_real_workloads_default_to_the_roofline(tmp_path):
    out = tmp_path / "mixed.json"
    # the first 2 s of `mixed` (4 requests) keep the run short; any non-lesson workload gets the roofline
    res = runner.invoke(app, ["trace", "--workload", "mixed", "--window", "0:2", "--max-num-batched-tokens", "2048",
                              "--max-num-seqs", "256", "--json", str(out), "--limit", "1"], terminal_width=200)
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["cost_model"] == "roofline"
    # Llama-3-8B on one H100-80GB: the KV pool derived from GPU memory, 29043 blocks for a 2048-token budget and
    # 256 sequences (worked out by hand in test_cost_roofline.py), 131072 KV bytes per token
    assert (data["config"]["num_gpu_blocks"], data["config"]["kv_bytes_per_token"]) == (29043, 131072)


@pytest.mark.parametrize("args, text", [
    (["trace", "--policy", "bogus"], "unknown policy 'bogus'; valid: static, continuous, vllm"),
    (["trace", "--workload", "nope"], "no such file"),
    (["trace", "--max-num-seqs", "abc"], "Invalid value for '--max-num-seqs'"),
    (["trace", "--no-such-flag"], "No such option: --no-such-flag"),
    (["conform"], "Missing argument"),
])
def test_user_mistakes_are_one_line_errors_with_status_2(monkeypatch, capsys, args, text):
    # in-process through the entry point `python -m servesim.cli` calls (servesim.cli.main)
    monkeypatch.setattr(sys, "argv", ["servesim", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and text in err
    assert err.count("\n") == 1, err  # one line


def test_python_dash_m_entry_point_reports_one_line_errors():
    proc = subprocess.run([sys.executable, "-m", "servesim.cli", "trace", "--no-such-flag"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == "servesim: error: No such option: --no-such-flag\n"


def test_python_dash_m_flushes_all_output_before_it_exits(tmp_path):
    # the program leaves by os._exit, without the interpreter's teardown: everything must be written by then
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "servesim.cli", "run", "--workload", "seed", "--json", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("============ Serving Benchmark Result ============\n")
    assert proc.stdout.endswith(f"wrote {out}\n")
    assert json.loads(out.read_text())["completed"] == 5


def test_engine_options_reach_every_simulating_command(tmp_path):
    # the seed under KV pressure (137 usable blocks): L is preempted once; by swap nothing is recomputed
    kv = ["--workload", "seed", "--max-num-batched-tokens", "256", "--max-num-seqs", "8", "--num-gpu-blocks", "138"]
    swap = runner.invoke(app, ["run", *kv, "--preemption-mode", "swap", "--json", str(tmp_path / "s.json")])
    recompute = runner.invoke(app, ["run", *kv, "--json", str(tmp_path / "r.json")])
    assert swap.exit_code == recompute.exit_code == 0, swap.output + recompute.output
    assert "Recomputed tokens:                       0" in swap.output
    assert "Recomputed tokens:                       0" not in recompute.output
    traced = runner.invoke(app, ["trace", *kv, "--preemption-mode", "swap"], terminal_width=300)
    assert "swapped" in traced.output  # the events column (folded at 80 columns): "swapped out/in N blocks"
    assert "1 preemption; recomputed tokens 0" in traced.output


def test_the_entry_point_builds_only_the_command_it_runs(monkeypatch, capsys):
    # typer builds a click command per registered command at each start; main() builds the named one alone and
    # puts the others back, so the next in-process call (and the top-level help) sees every command
    from servesim.cli.app import only_command

    every = list(app.registered_commands), list(app.registered_groups)
    with only_command(["trace", "--limit", "2"]):
        assert [c.name for c in app.registered_commands] == [None] and app.registered_groups == []
        assert app.registered_commands[0].callback.__name__ == "trace"
    with only_command(["workload", "list"]):
        assert app.registered_commands == [] and [g.name for g in app.registered_groups] == ["workload"]
    with only_command(["--version"]):
        assert (app.registered_commands, app.registered_groups) == every
    assert (app.registered_commands, app.registered_groups) == every
    monkeypatch.setattr(sys, "argv", ["servesim", "trace", "--limit", "2"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0 and capsys.readouterr().out
    assert (app.registered_commands, app.registered_groups) == every
