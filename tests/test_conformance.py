"""servesim's vllm policy against schedules recorded from the real vLLM v1 scheduler (../shared/conformance)."""

import json

import pytest
from helpers import SHARED, assert_same_schedule
from typer.testing import CliRunner

from servesim.cli.app import app
from servesim.engines.vllm.conformance import load_scenario, run_scenario, to_trace

FIXTURES = sorted(p.stem for p in (SHARED / "conformance" / "scenarios").glob("*.json")) if SHARED.is_dir() else []


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_matches_step_for_step(shared, name):
    scenario = load_scenario(shared / "conformance" / "scenarios" / f"{name}.json")
    expected = json.loads((shared / "conformance" / "traces" / f"{name}.json").read_text())
    actual = to_trace(scenario, run_scenario(scenario))
    assert_same_schedule(expected, actual)


def test_there_are_fixtures(shared):
    assert len(FIXTURES) >= 10


def test_cli_conform_exit_codes(shared, tmp_path):
    sc = shared / "conformance" / "scenarios" / "05_kv_exhaustion_preempt.json"
    good = shared / "conformance" / "traces" / "05_kv_exhaustion_preempt.json"
    runner = CliRunner()
    res = runner.invoke(app, ["conform", str(sc), "--expected", str(good), "--out", str(tmp_path / "o.json")])
    assert res.exit_code == 0, res.output
    assert "match" in res.output
    written = json.loads((tmp_path / "o.json").read_text())
    assert written["summary"]["total_preemptions"] == 3  # the recorded trace: request 3 preempted in steps 65, 97, 193
    # a trace with one step altered (step 65's preemption of request 3 removed): exit 1 and the first differing step
    bad = json.loads(good.read_text())
    bad["steps"][65]["preempted"] = []
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    res = runner.invoke(app, ["conform", str(sc), "--expected", str(tmp_path / "bad.json")])
    assert res.exit_code == 1
    assert "step #65" in res.output and "preempted" in res.output
