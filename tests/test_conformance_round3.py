"""servesim's vllm policy against round 3's schedules recorded from vLLM 0.33.0 (../shared/conformance/round3):
priority with prefix caching, answers hit again (hash_scope "sequence"), vLLM 0.33's own knobs, max_model_len."""

import pytest
from helpers import SHARED, assert_same_schedule

from servesim.engines.vllm.conformance import load_scenario, load_trace, run_scenario, to_trace

ROUND3 = SHARED / "conformance" / "round3"
SCENARIOS = sorted(p.stem for p in (ROUND3 / "scenarios").glob("*.json")) if ROUND3.is_dir() else []


def _run(name):
    scenario = load_scenario(ROUND3 / "scenarios" / f"{name}.json")
    return scenario, to_trace(scenario, run_scenario(scenario))


@pytest.mark.parametrize("name", SCENARIOS)
def test_round3_scenario_matches_step_for_step(shared, name):
    scenario, actual = _run(name)
    assert_same_schedule(load_trace(ROUND3 / "traces" / f"{name}.json.gz"), actual)


def test_round3_has_its_scenarios(shared):
    assert {"a1_priority_prefix_sysprompt", "a3_priority_ties_handmade", "b1_async_priority_prefix_preempt",
            "c2_multiturn_answer_hits", "d1_threshold_prefix_hits", "d3_adaptive_threshold_active_seqs",
            "e1_max_model_len_too_long", "e2_idle_gaps_identical_bursts", "e4_budget_below_block"} <= set(SCENARIOS)


def test_e1_rejects_and_clamps_as_the_readme_says(shared):
    # round3/README.md: 24 prompts >= 1024 rejected (the first q7 at step 42), 63 outputs clamped; q0 (prompt
    # 699, output 331) runs with max_tokens 325 and finishes at step 327
    _, t = _run("e1_max_model_len_too_long")
    assert t["summary"]["num_rejected"] == 24
    assert sum("max_tokens" in r for r in t["requests"].values()) == 63
    assert (t["requests"]["q0"]["max_tokens"], t["requests"]["q0"]["finish_step"]) == (325, 327)
    (first,) = [s for s in t["steps"] if s.get("rejected")][:1]
    assert (first["step"], first["rejected"]) == (42, ["q7"])


def test_b1_a_finished_requests_last_block_is_hit_after_its_release(shared):
    # V1: r50 finishes at 1372 (548 + 29 - 1 = 576 tokens, 36 blocks); at 1374 the resumed r55 hits 464 tokens
    _, t = _run("b1_async_priority_prefix_preempt")
    (step,) = [s for s in t["steps"] if s["step"] == 1374]
    (r55,) = [e for e in step["scheduled"] if e["id"] == "r55"]
    assert (r55["num_cached_tokens"], r55["num_scheduled_tokens"]) == (464, 92)
