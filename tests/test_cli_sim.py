"""The simulation commands as a user runs them: demo, lesson, trace, and one-line errors."""

import json
import subprocess
import sys

from typer.testing import CliRunner

from servesim.cli.app import app

runner = CliRunner()


def test_demo_prints_the_three_policies_side_by_side():
    res = runner.invoke(app, ["demo", "--steps", "4"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "Side by side" in res.output
    for text in ("348.8 ms", "204.8 ms", "232.8 ms", "29.2 ms", "204 ms", "8 chunks (7 x 252 + 236)"):
        assert text in res.output


def test_lesson_answers_are_computed():
    res = runner.invoke(app, ["lesson"], terminal_width=200)
    assert res.exit_code == 0
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
    res = runner.invoke(app, ["trace", "--workload", "mixed", "--max-num-batched-tokens", "2048",
                              "--json", str(out), "--limit", "1"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["cost_model"] == "roofline"


def test_user_mistakes_are_one_line_errors_with_status_2():
    for args, text in ((["trace", "--policy", "bogus"], "unknown policy 'bogus'; valid: static, continuous, vllm"),
                       (["trace", "--workload", "nope"], "no such file"),
                       (["trace", "--max-num-seqs", "abc"], "Invalid value for '--max-num-seqs'"),
                       (["trace", "--no-such-flag"], "No such option: --no-such-flag"),
                       (["conform"], "Missing argument")):
        proc = subprocess.run([sys.executable, "-m", "servesim.cli", *args], capture_output=True, text=True)
        assert proc.returncode == 2
        assert text in proc.stderr
        assert "Traceback" not in proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr  # one line
