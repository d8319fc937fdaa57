"""servesim's sglang policy against schedules recorded from the real SGLang 0.5.23 scheduler
(../shared/conformance/sglang: the README's match, its rules S1-S10)."""

import gzip
import json

import pytest
from helpers import SHARED, cli
from typer.testing import CliRunner

from servesim.cli.app import app
from servesim.engines.sglang.conformance import first_difference, load_scenario, load_trace, run_scenario, to_trace

DIR = SHARED / "conformance" / "sglang"
FIXTURES = sorted(p.stem for p in (DIR / "scenarios").glob("*.json")) if DIR.is_dir() else []
REQUEST_KEYS = ("first_scheduled_step", "first_token_step", "finish_step", "num_retractions",
                "cached_tokens_first_admission", "prefill_chunks")


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_matches_step_for_step(shared, name):
    scenario = load_scenario(DIR / "scenarios" / f"{name}.json")
    expected = load_trace(DIR / "traces" / f"{name}.json.gz")
    actual = to_trace(scenario, run_scenario(scenario))
    assert first_difference(expected, actual, radix=scenario["config"]["radix_cache"]) is None
    for key in ("num_steps", "finished", "total_retractions", "prefill_steps", "decode_steps", "mixed_steps"):
        assert actual["summary"][key] == expected["summary"][key], key
    for rid, want in expected["requests"].items():
        for key in REQUEST_KEYS:
            assert actual["requests"][rid][key] == want[key], (rid, key)
    for e, a in zip(expected["steps"], actual["steps"], strict=True):  # beyond the README's match: SGLang's state
        assert round(a["new_token_ratio_at_schedule"], 6) == round(e["new_token_ratio_at_schedule"], 6)
        assert (a["chunked_req_after_schedule"], a["num_running_after"], a["num_waiting_after"]) == \
            (e["chunked_req_after_schedule"], e["num_running_after"], e["num_waiting_after"])


# round 2's schedules (issue 28): every one shared
ROUND2 = sorted(p.stem for p in (DIR / "round2" / "scenarios").glob("*.json")) if DIR.is_dir() else []


@pytest.mark.parametrize("name", ROUND2)
def test_round2_fixture_matches_step_for_step(shared, name):
    scenario = load_scenario(DIR / "round2" / "scenarios" / f"{name}.json")
    expected = load_trace(DIR / "round2" / "traces" / f"{name}.json.gz")
    actual = to_trace(scenario, run_scenario(scenario))
    assert first_difference(expected, actual, radix=scenario["config"]["radix_cache"]) is None
    assert actual["summary"]["num_steps"] == expected["summary"]["num_steps"]


def test_there_are_fixtures(shared):
    assert len(FIXTURES) >= 6 and len(ROUND2) >= 7


def test_cli_conform_sglang_exit_codes(shared, tmp_path):
    sc, good = DIR / "scenarios" / "04_retract_small_pool.json", DIR / "traces" / "04_retract_small_pool.json.gz"
    runner = CliRunner()
    res = runner.invoke(app, ["conform", "--policy", "sglang", str(sc), "--expected", str(good),
                              "--out", str(tmp_path / "o.json")])
    assert res.exit_code == 0, res.output
    assert "match" in res.output
    assert json.loads((tmp_path / "o.json").read_text())["summary"]["total_retractions"] == 1  # r05 at step 215
    bad = json.loads(gzip.decompress(good.read_bytes()))
    assert bad["steps"][215]["retracted"] == ["r05"]
    bad["steps"][215]["retracted"] = []
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    res = runner.invoke(app, ["conform", "--policy", "sglang", str(sc), "--expected", str(tmp_path / "bad.json")])
    assert res.exit_code == 1
    assert "step #215" in res.output and "retracted" in res.output


def test_bad_policy_and_scenario_are_refused_in_one_line(monkeypatch, capsys, shared, tmp_path):
    sc = str(DIR / "scenarios" / "01_seed_chunk256.json")
    code, _, err = cli(monkeypatch, capsys, "conform", "--policy", "trtllm", sc)
    assert code == 2 and "expected vllm or sglang" in err
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"config": {"max_total_num_tokens": 100, "max_running_requests": 4, "policy": "sjf"},
                             "requests": [{"id": "a", "arrival_step": 0, "prompt_len": 4, "output_len": 2}]}))
    code, _, err = cli(monkeypatch, capsys, "conform", "--policy", "sglang", str(p))
    assert code == 2
    assert "config.policy" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_04_paged_rules_c_f_g_as_round2s_readme_shows_them(shared):
    # ../shared/conformance/sglang/round2/README.md, page 16 with the radix cache: rule C at step 61 (21 decode
    # rows evict for 21 x 16 tokens: evictable 560 -> 256, free after schedule 368); rule F at step 107 (p034 needs
    # its extend + 16 + its output = 361 with 357.24 left: it waits, admitted at step 110); with rule G and F's
    # page charged to the budget too the whole schedule is exact (test_round2_fixture_matches_step_for_step)
    name = "04_page16_radix_lpm"
    scenario = load_scenario(DIR / "round2" / "scenarios" / f"{name}.json")
    expected = load_trace(DIR / "round2" / "traces" / f"{name}.json.gz")
    actual = to_trace(scenario, run_scenario(scenario))
    by_step = {s["step"]: s for s in actual["steps"]}
    assert by_step[61]["free_tokens_after_schedule"] == 368  # (servesim's trace does not carry the evictable count)
    prefills = {k: [e["id"] for e in by_step[k]["scheduled"] if e["kind"] == "prefill"] for k in (107, 110)}
    assert "p034" not in prefills[107] and "p034" in prefills[110]
    assert first_difference(expected, actual, radix=True) is None


def test_12_the_overlap_loop_as_round2s_readme_shows_it(shared):
    # README O3-O5: 3 iterations with no forward (after steps 256 and 513, and the last); step 215's ratio 0.909446
    # (non-overlap 0.913349); r05 re-prefills 341 tokens at step 514 (non-overlap: 342)
    scenario = load_scenario(DIR / "round2" / "scenarios" / "12_overlap_r1_04_retract.json")
    t = to_trace(scenario, run_scenario(scenario))
    assert t["summary"]["idle_overlap_iterations"] == 3
    assert round(t["steps"][215]["new_token_ratio_at_schedule"], 6) == 0.909446
    assert ("r05", 341) in [(e["id"], e["num_scheduled_tokens"]) for e in t["steps"][514]["scheduled"]]
    twin = to_trace(scenario, run_scenario({**scenario, "config": {**scenario["config"], "overlap": False}}))
    assert round(twin["steps"][215]["new_token_ratio_at_schedule"], 6) == 0.913349
