"""Round 3's rules of vLLM 0.33 (../shared/conformance/round3/README.md, V1-V5), one tiny scenario each on the
unit step clock, numbers by hand; and the fast path equal to step by step with the new knobs on."""

import pytest
from helpers import reqs, run, tokens
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine import simulate
from servesim.engine.records import Reason
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError


def reasons_at(result, step):
    return {w.id: w.reason for w in result.steps[step].waiting}


def test_v1_async_caches_a_finishing_requests_last_block_before_freeing_it():
    # Blocks of 4. A: prompt 4, output 5, its ids covering prompt and answer (hash_scope "sequence": 9 tokens, 3
    # ids). Async: step 0 prefills 4 tokens; steps 1-4 decode positions 4-7, so step 4's decode fills block 1
    # (4 + 5 - 1 = 8 tokens = 2 blocks) while the token at position 7 was still in flight when it was scheduled:
    # the block has no hash then. A finishes at step 4 and is released at step 5; V1 hashes block 1 first, so it
    # goes back cached. B (step 6, prompt 12 = A's first two blocks and one more) hits both: 8 cached tokens.
    a = Request("A", 0.0, 4, 5, hash_ids=(1, 2, 3), hash_scope="sequence")
    b = Request("B", 6.0, 12, 1, hash_ids=(1, 2, 9))
    for async_scheduling in (True, False):  # (synchronous: the block is registered when scheduled, P5)
        r = run([a, b], max_num_batched_tokens=16, block_size=4, num_gpu_blocks=10,
                async_scheduling=async_scheduling)
        (entry,) = [e for s in r.steps for e in s.scheduled if e.id == "B"]
        assert (entry.num_scheduled_tokens, entry.num_cached_tokens) == (4, 8)


def test_v2_max_model_len_rejects_a_long_prompt_and_clamps_an_output_sent_without_max_tokens():
    # max_model_len 10. A: prompt 10 (no room for one output token): rejected. B: prompt 6 + output 8 = 14, sent
    # without max_tokens: it runs with 10 - 6 = 4 output tokens. C: the same lengths, sent with max_tokens (as
    # vllm bench serve does): prompt + max_tokens > 10, rejected.
    r = run([Request("A", 0.0, 10, 1, sends_max_tokens=False), Request("B", 0.0, 6, 8, sends_max_tokens=False),
             Request("C", 0.0, 6, 8)], max_num_batched_tokens=16, max_model_len=10)
    assert (r.rejected, r.clamped) == (("A", "C"), ("B",))
    assert tokens(r) == [[("B", 6)], [("B", 1)], [("B", 1)], [("B", 1)]]
    assert len(r.request("B").token_times) == 4


def test_v3_adaptive_threshold_is_the_budgets_share_of_the_requests():
    # Threshold 4, budget 32, two 20-token prompts: adaptive, T = max(4, 32 // 2) = 16 each, then 4 each to
    # finish their prompts; fixed, 4 a step each (five steps of prompt).
    two = reqs(("A", 0, 20, 2), ("B", 0, 20, 2))
    r = run(two, max_num_batched_tokens=32, long_prefill_token_threshold=4,
            long_prefill_token_threshold_adaptive=True)
    assert tokens(r)[:2] == [[("A", 16), ("B", 16)], [("A", 4), ("B", 4)]]
    fixed = run(two, max_num_batched_tokens=32, long_prefill_token_threshold=4)
    assert tokens(fixed)[:5] == [[("A", 4), ("B", 4)]] * 5
    # a lone request is never capped (d3, step 8: r0 takes 302 tokens alone)
    alone = run(reqs(("A", 0, 20, 1)), max_num_batched_tokens=32, long_prefill_token_threshold=4,
                long_prefill_token_threshold_adaptive=True)
    assert tokens(alone) == [[("A", 20)]]


def test_v4_max_num_active_seqs_limits_admission_below_max_num_seqs():
    # One active sequence among 4 slots: B waits until A (prompt 4, output 2) has finished.
    r = run(reqs(("A", 0, 4, 2), ("B", 0, 4, 2)), max_num_batched_tokens=16, max_num_seqs=4, max_num_active_seqs=1)
    assert tokens(r) == [[("A", 4)], [("A", 1)], [("B", 4)], [("B", 1)]]
    assert reasons_at(r, 0)["B"] is Reason.MAX_NUM_SEQS
    with pytest.raises(ConfigError, match="max_num_active_seqs .5. must not exceed max_num_seqs .4."):
        run(reqs(("A", 0, 4, 2)), max_num_batched_tokens=16, max_num_seqs=4, max_num_active_seqs=5)


def test_v5_prefill_schedule_interval_defers_prompts_while_others_decode():
    # N = 3. Step 0 (1st step) admits A: the last prefill step is 1. B arrives at 1: steps 2 and 3 (counting
    # from 1) are fewer than 3 after it and A decodes, so B waits; the 4th step admits it.
    r = run(reqs(("A", 0, 4, 6), ("B", 1, 4, 2)), max_num_batched_tokens=16, prefill_schedule_interval=3)
    assert tokens(r) == [[("A", 4)], [("A", 1)], [("A", 1)], [("A", 1), ("B", 4)], [("A", 1), ("B", 1)], [("A", 1)]]
    assert reasons_at(r, 1)["B"] is reasons_at(r, 2)["B"] is Reason.PREFILL_INTERVAL


def test_v5_a_running_prompt_chunk_waits_for_the_next_prefill_step():
    # N = 2, budget 8. B (12-token prompt) is admitted at step 3 (1-based) with a 7-token chunk (8 - A's
    # decode); at step 4 its next chunk waits (A decodes alone); step 5 runs the last 5 tokens.
    r = run(reqs(("A", 0, 4, 5), ("B", 1, 12, 1)), max_num_batched_tokens=8, prefill_schedule_interval=2)
    assert tokens(r) == [[("A", 4)], [("A", 1)], [("A", 1), ("B", 7)], [("A", 1)], [("A", 1), ("B", 5)]]


def test_v5_capacity_bound_admission_turns_the_cadence_off():
    # N = 4, two seats. Step 1 admits A and B; C waits for a seat, so the pass was capacity bound and nothing is
    # deferred: when A finishes (its 2nd token at step 2), step 3 admits C at once, 2 steps after the last
    # prefill (without the escape it would wait until step 5).
    r = run(reqs(("A", 0, 4, 2), ("B", 0, 4, 5), ("C", 0, 4, 1)), max_num_batched_tokens=16, max_num_seqs=2,
            prefill_schedule_interval=4)
    assert tokens(r)[:3] == [[("A", 4), ("B", 4)], [("A", 1), ("B", 1)], [("B", 1), ("C", 4)]]


@st.composite
def knob_runs(draw):
    n = draw(st.integers(2, 10))
    requests = [Request(f"r{i}", float(draw(st.integers(0, 12))), draw(st.integers(1, 40)), draw(st.integers(1, 12)))
                for i in range(n)]
    knobs = {"prefill_schedule_interval": draw(st.integers(1, 4)),
             "long_prefill_token_threshold": draw(st.sampled_from([0, 4, 8])),
             "long_prefill_token_threshold_adaptive": draw(st.booleans()),
             "max_num_active_seqs": draw(st.integers(1, 4)), "async_scheduling": draw(st.booleans())}
    return requests, knobs, draw(st.sampled_from([None, 40]))


@settings(max_examples=80, deadline=None)
@given(knob_runs(), st.sampled_from(["full", "steps"]))
def test_the_fast_path_is_step_by_step_with_vllm_033s_knobs(case, record):
    # ("steps" lets the fast path plan stretches; "full" records every waiting request's reason)
    requests, knobs, blocks = case
    cfg = EngineConfig(max_num_batched_tokens=16, max_num_seqs=4, block_size=4, num_gpu_blocks=blocks, **knobs)
    slow = simulate(requests, cfg, "vllm", "unit", record=record, fast=False, check_invariants=True)
    fast = simulate(requests, cfg, "vllm", "unit", record=record, fast=True, check_invariants=True)
    assert [(s.start_time, s.scheduled, s.preempted, s.finished, s.waiting) for s in fast.steps] == [
        (s.start_time, s.scheduled, s.preempted, s.finished, s.waiting) for s in slow.steps]
    assert all(r.finish_time is not None for r in fast.requests)
