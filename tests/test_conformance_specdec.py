"""servesim's vllm policy against the speculative-decoding schedules recorded from vLLM 0.33.0
(../shared/conformance/specdec): drafts in the budget, lookahead KV, rollback, trimming, padding, preemption."""

import pytest
from helpers import SHARED, assert_same_schedule

from servesim.engines.vllm.conformance import load_scenario, load_trace, run_scenario, to_trace

SPECDEC = SHARED / "conformance" / "specdec"
SCENARIOS = sorted(p.stem for p in (SPECDEC / "scenarios").glob("*.json")) if SPECDEC.is_dir() else []
SPEC_SUMMARY = ("spec_draft_tokens", "spec_accepted_tokens", "spec_verify_steps", "spec_acceptance_rate",
                "spec_padded_entries", "spec_scheduled_tokens")


def _run(name):
    scenario = load_scenario(SPECDEC / "scenarios" / f"{name}.json")
    return scenario, to_trace(scenario, run_scenario(scenario))


@pytest.mark.parametrize("name", SCENARIOS)
def test_specdec_scenario_matches_step_for_step(shared, name):
    # every step's entries (drafts, accepted, outputs appended, computed tokens after the rollback included),
    # then the per-request acceptance and the run's totals as recorded
    _, actual = _run(name)
    expected = load_trace(SPECDEC / "traces" / f"{name}.json.gz")
    assert_same_schedule(expected, actual)
    for rid, want in expected["requests"].items():
        got = actual["requests"][rid]
        for key in ("accepted", "num_draft_tokens", "num_accepted_tokens"):
            assert got[key] == want[key], (rid, key)
    assert {k: actual["summary"][k] for k in SPEC_SUMMARY} == {k: expected["summary"][k] for k in SPEC_SUMMARY}


def test_specdec_has_its_scenarios(shared):
    assert {"sd01_single_k3_full_accept", "sd02_single_k3_zero_accept", "sd03_single_eagle_pattern",
            "sd04_mixed_chunked_tight_budget_ngram", "sd06_tight_kv_preempt_eagle",
            "sd09_max_model_len_output_len_eagle", "sd12_big_random_300_ngram"} <= set(SCENARIOS)


def test_sd01_and_sd02_take_the_steps_the_readme_says(shared):
    # S10: output 101 after a 64-token prefill with K = 3 takes ceil(100 / 4) = 25 decode steps all accepted,
    # 100 all rejected; each verification costs 1 + 3 tokens whatever is accepted
    _, full = _run("sd01_single_k3_full_accept")
    _, none = _run("sd02_single_k3_zero_accept")
    assert (full["summary"]["num_steps"], none["summary"]["num_steps"]) == (26, 101)
    assert {e["num_scheduled_tokens"] for s in none["steps"][1:] for e in s["scheduled"]} == {4}


def test_sd09_pads_the_one_token_prompts(shared):
    # S7: t1 and t2 (prompt 1) are admitted while others run, so each is padded to 1 + K = 5 tokens
    _, t = _run("sd09_max_model_len_output_len_eagle")
    padded = [(s["step"], e["id"], e["num_scheduled_tokens"]) for s in t["steps"] for e in s["scheduled"]
              if e.get("spec_padded")]
    assert padded == [(4, "t1", 5), (6, "t2", 5)]
