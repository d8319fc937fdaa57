"""servesim's vllm policy against round 2's schedules recorded from vLLM 0.33.0 (../shared/conformance/round2).

Every scenario must match its trace step for step: the large random schedules (s*) and the prefix-caching ones
(p*), whose admissions must also start with the recorded num_cached_tokens.
"""


import pytest
from helpers import SHARED, assert_same_schedule

from servesim.engines.vllm.conformance import load_scenario, load_trace, run_scenario, to_trace

ROUND2 = SHARED / "conformance" / "round2"
SCENARIOS = sorted(p.stem for p in (ROUND2 / "scenarios").glob("*.json")) if ROUND2.is_dir() else []


@pytest.mark.parametrize("name", SCENARIOS)
def test_round2_scenario_matches_step_for_step(shared, name):
    path = shared / "conformance" / "round2" / "scenarios" / f"{name}.json"
    scenario = load_scenario(path)
    expected = load_trace(shared / "conformance" / "round2" / "traces" / f"{name}.json.gz")
    actual = to_trace(scenario, run_scenario(scenario))
    assert_same_schedule(expected, actual)


def test_round2_has_its_scenarios(shared):
    names = {"s1_fcfs_poisson_tightkv", "s2_priority_bursty_threshold", "s3_async_fcfs_threshold_bs32",
             "s4_no_chunked_prefill", "s6_no_full_isl_thrash", "p1_shared_system_prompt", "p2_multi_turn",
             "p3_eviction_lru", "p4_prefix_preemption", "p6_prefix_edge_cases"}
    assert names <= set(SCENARIOS)


def test_prefix_admissions_start_with_the_recorded_hits(shared):
    # round2/README.md, "What a match means": each admission's num_cached_tokens (p6: A2 48, A3 64, ..., G2 288)
    name = "p6_prefix_edge_cases"
    scenario = load_scenario(shared / "conformance" / "round2" / "scenarios" / f"{name}.json")
    expected = load_trace(shared / "conformance" / "round2" / "traces" / f"{name}.json.gz")
    actual = to_trace(scenario, run_scenario(scenario))

    def admissions(trace):
        return [(s["step"], e["id"], e["num_cached_tokens"]) for s in trace["steps"] for e in s["scheduled"]
                if e["kind"] == "prefill" and e["num_computed_tokens_before"] == 0]

    assert admissions(actual) == admissions(expected)
    assert sum(c for _, _, c in admissions(actual)) == expected["summary"]["prefix_hit_tokens"]


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n.startswith("p")])
def test_prefix_cache_counters_are_vllms(shared, name):
    # the summary's prefix_query_tokens, prefix_hit_tokens and evicted_blocks, recorded from vLLM 0.33
    scenario = load_scenario(shared / "conformance" / "round2" / "scenarios" / f"{name}.json")
    expected = load_trace(shared / "conformance" / "round2" / "traces" / f"{name}.json.gz")["summary"]
    stats = run_scenario(scenario).prefix_cache
    assert (stats.query_tokens, stats.hit_tokens, stats.evicted_blocks) == (
        expected["prefix_query_tokens"], expected["prefix_hit_tokens"], expected["evicted_blocks"])
    assert round(stats.hit_rate, 4) == expected["prefix_hit_rate"]
