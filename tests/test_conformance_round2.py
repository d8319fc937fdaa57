"""servesim's vllm policy against round 2's schedules recorded from vLLM 0.33.0 (../shared/conformance/round2).

Every scenario without prefix caching must match its trace step for step; the prefix-caching ones (p*) need a
prefix cache, which servesim does not simulate yet (load_scenario refuses them), so they are skipped.
"""

import json

import pytest
from helpers import SHARED

from servesim.conformance import first_difference, load_scenario, load_trace, run_scenario, to_trace

ROUND2 = SHARED / "conformance" / "round2"
SCENARIOS = sorted(p.stem for p in (ROUND2 / "scenarios").glob("*.json")) if ROUND2.is_dir() else []


@pytest.mark.parametrize("name", SCENARIOS)
def test_round2_scenario_matches_step_for_step(shared, name):
    path = shared / "conformance" / "round2" / "scenarios" / f"{name}.json"
    if json.loads(path.read_text())["config"].get("enable_prefix_caching"):
        pytest.skip("needs prefix caching, which servesim does not simulate yet")
    scenario = load_scenario(path)
    expected = load_trace(shared / "conformance" / "round2" / "traces" / f"{name}.json.gz")
    actual = to_trace(scenario, run_scenario(scenario))
    assert first_difference(expected, actual) is None
    assert actual["summary"]["total_preemptions"] == expected["summary"]["total_preemptions"]
    for rid, want in expected["requests"].items():
        got = actual["requests"][rid]
        for key in ("first_scheduled_step", "first_token_step", "finish_step", "num_preemptions"):
            assert got[key] == want[key], (rid, key)


def test_round2_has_its_five_scenarios_without_prefix_caching(shared):
    names = {"s1_fcfs_poisson_tightkv", "s2_priority_bursty_threshold", "s3_async_fcfs_threshold_bs32",
             "s4_no_chunked_prefill", "s6_no_full_isl_thrash"}
    assert names <= set(SCENARIOS)
