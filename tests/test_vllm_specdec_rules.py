"""vLLM 0.33's speculative decoding (../shared/conformance/specdec/README.md, S1-S10), one tiny scenario each on
the unit step clock, every number derived by hand in a comment (docs/speculative.md)."""

from dataclasses import replace

import pytest
from helpers import run, tokens

from servesim.engine import simulate
from servesim.engine.acceptance import Acceptance
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError

NGRAM3 = {"method": "ngram", "num_speculative_tokens": 3}
EAGLE3 = {"method": "eagle", "num_speculative_tokens": 3}


def spec_run(requests, spec=NGRAM3, **cfg):
    # max_model_len well past every request (vLLM's default would be the model's), so that S6 binds only where a
    # test sets it: by default servesim's is the longest request, whose drafts it would cap near its end
    cfg.setdefault("max_model_len", 1024)
    return run(requests, speculative_config=spec, **cfg)


def entries(result, rid):
    return [(s.step, e) for s in result.steps for e in s.scheduled if e.id == rid]


def test_s10_one_request_output_101_k3_decodes_in_25_steps_all_accepted_and_100_none():
    # prompt 64, output 101: the prefill samples the first token; the other 100 come 1 + 3 a step when every
    # draft is accepted, ceil(100 / 4) = 25 steps; one a step when none is, 100 steps. Each decode step schedules
    # 1 + 3 = 4 tokens whatever is accepted.
    for accept, decode_steps in (((3,), 25), ((0,), 100)):
        r = spec_run([Request("A", 0.0, 64, 101, accept=accept)], max_num_batched_tokens=256)
        assert len(r.steps) == 1 + decode_steps
        assert tokens(r)[0] == [("A", 64)] and {t for (t,) in tokens(r)[1:]} == {("A", 4)}
    # the same from the run's acceptance rates (1.0: every draft, 0.0: none)
    for rate, steps in ((1.0, 26), (0.0, 101)):
        r = spec_run([Request("A", 0.0, 64, 101)], max_num_batched_tokens=256, acceptance_rate=rate)
        assert len(r.steps) == steps
    # rates (1.0, 0.0): the first draft always passes, the second never: 2 tokens a step, ceil(100 / 2) = 50
    r = spec_run([Request("A", 0.0, 64, 101)], max_num_batched_tokens=256, acceptance_rate=(1.0, 0.0))
    assert len(r.steps) == 51


def test_s1_s2_the_budget_trims_the_last_running_requests_drafts():
    # Budget 14, K = 3, four 3-token prompts (12 tokens at step 0). At step 1 each decode asks 1 + 3 = 4: A, B and C
    # get 4 (12 tokens), D the 2 left: 1 token and 1 draft; its other 2 drafts are dropped, and the drafter's next
    # proposal gives it 3 again (drafts_before 3 at step 2, not 2). The running order does not rotate.
    four = [Request(x, 0.0, 3, 20, accept=(3,)) for x in "ABCD"]
    r = spec_run(four, max_num_batched_tokens=14)
    assert tokens(r)[1] == tokens(r)[2] == [("A", 4), ("B", 4), ("C", 4), ("D", 2)]
    (_, d1), (_, d2) = entries(r, "D")[1:3]
    assert (d1.num_spec_tokens, d1.num_accepted, d2.drafts_before) == (1, 1, 3)
    # budget 12: A, B and C spend it all; D, running, gets nothing (running requests after the trimmed one wait)
    r = spec_run(four, max_num_batched_tokens=12)
    assert tokens(r)[1] == [("A", 4), ("B", 4), ("C", 4)]


def test_s2_a_draft_model_costs_each_request_an_input_slot_and_stops_the_scan():
    # draft_model K = 3: one input slot per scheduled request (max_num_new_slots_for_drafting 1), input budget 12.
    # Step 0: four 2-token prompts, input 12 - 3 - 3 - 3 - 3 = 0. Step 1: A min(4, 12 - 1) = 4 (input 12 - 5 = 7),
    # B min(4, 7 - 1) = 4 (input 2), C min(4, 2 - 1) = 1 (input 0); D: input 0 <= 1 slot, the scan stops though
    # 3 tokens of budget are left. With n-gram drafts (no slots) A, B and C get 4 each.
    four = [Request(x, 0.0, 2, 20, accept=(0,)) for x in "ABCD"]
    r = spec_run(four, {"method": "draft_model", "num_speculative_tokens": 3}, max_num_batched_tokens=12)
    assert tokens(r)[1] == [("A", 4), ("B", 4), ("C", 1)]
    assert tokens(spec_run(four, max_num_batched_tokens=12))[1] == [("A", 4), ("B", 4), ("C", 4)]


def test_s3_kv_held_includes_the_lookahead_and_rejections_free_nothing():
    # eagle K = 3 (lookahead 3), blocks of 16, prompt 28, every draft rejected. Step 0: ceil((28 + 3) / 16) = 2
    # blocks. Step 1: 28 + 4 + 3 = 35 -> 3 blocks; its 3 drafts are rejected, so 29 tokens are computed (2
    # blocks' worth) and it still holds 3. Step 2: 29 + 4 + 3 = 36 -> 3. With n-gram drafts (no lookahead):
    # ceil(28 / 16) = 2, ceil(32 / 16) = 2, ceil(33 / 16) = 3.
    a = Request("A", 0.0, 28, 10, accept=(0,))
    eagle = spec_run([a], EAGLE3, max_num_batched_tokens=64, num_gpu_blocks=11)
    assert [e.num_blocks for _, e in entries(eagle, "A")][:3] == [2, 3, 3]
    assert eagle.steps[1].free_blocks_after_step == 10 - 3
    ngram = spec_run([a], max_num_batched_tokens=64, num_gpu_blocks=11)
    assert [e.num_blocks for _, e in entries(ngram, "A")][:3] == [2, 2, 3]
    # all accepted: step 2 starts at 32 computed, 32 + 4 + 3 = 39 -> 3 blocks, as with every draft rejected
    held = spec_run([replace(a, accept=(3,))], EAGLE3, max_num_batched_tokens=64, num_gpu_blocks=11)
    assert [e.num_blocks for _, e in entries(held, "A")][:3] == [2, 3, 3]


def test_s4_s5_rejected_drafts_roll_back_and_the_last_step_schedules_its_drafts_in_full():
    # Prompt 10, output 12, K = 3, accepted 3, 1, 0, 2, 3: step 0 prefills (1 token, 10 computed); then each step
    # schedules 4 and gains a + 1: computed 10 -> 14 (+4), 16 (+2), 17 (+1), 20 (+3): 1 + 4 + 2 + 1 + 3 = 11 tokens.
    # Step 5 needs 1 more token but still schedules 1 + 3 (S5); its 4 tokens are cut to the one it needs.
    r = spec_run([Request("A", 0.0, 10, 12, accept=(3, 1, 0, 2, 3))], max_num_batched_tokens=64)
    assert tokens(r) == [[("A", 10)]] + [[("A", 4)]] * 5
    es = [e for _, e in entries(r, "A")]
    assert [e.num_computed_tokens_before for e in es] == [0, 10, 14, 16, 17, 20]
    assert [e.num_accepted for e in es[1:]] == [3, 1, 0, 2, 3]
    assert r.steps[5].finished == ("A",) and r.request("A").output_len == 12


def test_s6_max_model_len_caps_the_drafts_and_the_lookahead():
    # max_model_len 20, blocks of 4, eagle K = 3, prompt 12, output 8, all accepted. Step 0: ceil(15 / 4) = 4
    # blocks. Step 1: min(4, 20 - 12 - 1 = 7) = 4 tokens, ceil(19 / 4) = 5 blocks; 16 computed. Step 2: min(4,
    # 20 - 16 - 1 = 3) = 3 tokens (2 drafts), KV for min(16 + 3 + 3, 20) = 20 tokens = 5 blocks; it accepts both
    # and reaches 12 + 8 = 20 tokens (1 + 4 + 3 outputs).
    r = spec_run([Request("A", 0.0, 12, 8, accept=(3,))], EAGLE3, max_num_batched_tokens=64, max_model_len=20,
                 block_size=4)
    assert tokens(r) == [[("A", 12)], [("A", 4)], [("A", 3)]]
    es = [e for _, e in entries(r, "A")]
    assert [e.num_blocks for e in es] == [4, 5, 5] and es[2].num_spec_tokens == 2


def test_s7_a_one_token_waiting_request_is_padded_to_1_plus_k():
    # A (prompt 8) runs; B (prompt 1) arrives at step 1 while A decodes: one token to compute, so B is padded to
    # 1 + 3 = 4 tokens of -1 drafts, never accepted (its own list says 3): it gains 1 token. At step 2 it holds 3
    # real drafts.
    a, b = Request("A", 0.0, 8, 10, accept=(0,)), Request("B", 1.0, 1, 5, accept=(3,))
    r = spec_run([a, b], max_num_batched_tokens=32)
    assert tokens(r)[1] == [("A", 4), ("B", 4)]
    (_, b1), (_, b2) = entries(r, "B")[:2]
    assert (b1.spec_padded, b1.num_spec_tokens, b1.num_accepted) == (True, 3, 0)
    assert (b2.spec_padded, b2.drafts_before, b2.num_computed_tokens_before) == (False, 3, 1)
    # alone (nothing scheduled or computed) B is not padded: 1 token
    assert tokens(spec_run([replace(b, arrival_time=0.0)], max_num_batched_tokens=32))[0] == [("B", 1)]
    # budget 7 (seats 4), A's prompt 4: at step 1 A's 4 leave 3 < 1 + 3, so B waits rather than run unpadded
    short = replace(a, prompt_len=4)
    assert tokens(spec_run([short, b], max_num_batched_tokens=7, max_num_seqs=4))[1] == [("A", 4)]
    # a running prompt chunk this step: no padding. Budget 32: A 4 and C 28 of 40 at step 0; at step 1 A 4, C's
    # last 12 (a running chunk), and B 1 unpadded
    c = Request("C", 0.0, 40, 2, accept=(0,))
    assert tokens(spec_run([short, c, b], max_num_batched_tokens=32))[1] == [("A", 4), ("C", 12), ("B", 1)]


def test_s8_no_drafts_after_a_partial_chunk_nor_after_a_preemption():
    # Budget 16, prompt 20: step 0 is a partial chunk of 16, after which the drafter's proposal is dropped, so step
    # 1 schedules only the prompt's last 4 (no drafts); after that chunk samples, 3 drafts: step 2 schedules 4.
    r = spec_run([Request("A", 0.0, 20, 6, accept=(0,))], max_num_batched_tokens=16)
    assert tokens(r)[:3] == [[("A", 16)], [("A", 4)], [("A", 4)]]
    assert [e.num_spec_tokens for _, e in entries(r, "A")][:3] == [0, 0, 3]
    # Preemption: blocks of 8, 5 usable, prompts 8, every draft rejected (1 token a step). Step k >= 1 starts at
    # 8 + k - 1 computed and needs ceil((8 + k - 1 + 4) / 8) blocks: 2 from step 1 (both: 1 free left), 3 at step
    # 6: A takes the last block and B, the newest, is preempted. B resumes at step 7 with its prompt and 6 outputs
    # (14 tokens, 2 blocks free) and holds no drafts (vLLM's _preempt_request clears them).
    two = [Request(x, 0.0, 8, 20, accept=(0,)) for x in "AB"]
    r = spec_run(two, max_num_batched_tokens=32, block_size=8, num_gpu_blocks=6)
    assert (r.steps[6].preempted, tokens(r)[7]) == (("B",), [("A", 4), ("B", 14)])
    b7 = next(e for step, e in entries(r, "B") if step == 7)
    assert (b7.resumed, b7.drafts_before, b7.num_spec_tokens) == (True, 0, 0)


def test_mixed_batch_a_chunked_prefill_beside_a_drafting_decode():
    # Budget 16, K = 3: A decodes 1 + 3 = 4 a step; B (prompt 30, arriving at step 1) gets what is left, 12, 12,
    # then its last 6; its first decode (step 4) has 3 drafts like A's.
    a, b = Request("A", 0.0, 4, 20, accept=(0,)), Request("B", 1.0, 30, 5, accept=(0,))
    r = spec_run([a, b], max_num_batched_tokens=16)
    assert tokens(r)[:5] == [[("A", 4)], [("A", 4), ("B", 12)], [("A", 4), ("B", 12)], [("A", 4), ("B", 6)],
                             [("A", 4), ("B", 4)]]
    assert [e.num_spec_tokens for _, e in entries(r, "B")][:4] == [0, 0, 0, 3]


def test_s9_async_schedules_1_plus_k_before_the_acceptance_is_known():
    # Prompt 8, output 9, K = 3, every draft accepted: synchronously 1 + 4 + 4 = 9 tokens in 3 steps. Async, step
    # 2's 4 tokens finish it, but schedule(3) runs before its output is processed: vLLM sees 16 computed with 4
    # in flight, 16 + 2 - 4 = 14 < 8 + 9, so it schedules 1 + 3 once more, discarded.
    a = Request("A", 0.0, 8, 9, accept=(3,))
    assert tokens(spec_run([a], max_num_batched_tokens=32)) == [[("A", 8)], [("A", 4)], [("A", 4)]]
    r = spec_run([a], max_num_batched_tokens=32, async_scheduling=True)
    assert tokens(r) == [[("A", 8)], [("A", 4)], [("A", 4)], [("A", 4)]]
    assert (r.steps[2].finished, r.steps[3].finished_observed) == (("A",), ("A",))
    # every draft rejected: step 8 samples the last token; at schedule(9) vLLM sees 8 + 8 x 4 - 0 + ... = 19
    # computed (its rollbacks not made) with 4 in flight: 19 + 2 - 4 = 17 >= 17, sure to be done: skipped, and
    # step 9 only releases it
    r = spec_run([replace(a, accept=(0,))], max_num_batched_tokens=32, async_scheduling=True)
    assert tokens(r) == [[("A", 8)]] + [[("A", 4)]] * 8 + [[]]


def test_acceptance_draws_are_seeded_per_request_and_step():
    # rate 0.5 at every position, K = 3: the expected drafts accepted is 0.5 + 0.25 + 0.125 = 0.875
    acc = Acceptance((0.5,), seed=7)
    assert acc.mean_accepted(3) == 0.875
    draws = [acc.draw(i, j, 3) for i in range(200) for j in range(100)]
    assert abs(sum(draws) / len(draws) - 0.875) < 0.03
    assert draws == [Acceptance((0.5,), seed=7).draw(i, j, 3) for i in range(200) for j in range(100)]
    assert draws != [Acceptance((0.5,), seed=8).draw(i, j, 3) for i in range(200) for j in range(100)]


def test_speculation_refusals_are_one_line_naming_the_field():
    a = Request("A", 0.0, 8, 4)
    with pytest.raises(ConfigError, match="request 'A' has no acceptance"):
        spec_run([a])
    with pytest.raises(ConfigError, match="speculative_config.method 'suffix': not modelled"):
        spec_run([a], {"method": "suffix", "num_speculative_tokens": 3}, acceptance_rate=0.5)
    with pytest.raises(ConfigError, match="speculative_config.disable_padded_drafter_batch"):
        spec_run([a], {**NGRAM3, "disable_padded_drafter_batch": True}, acceptance_rate=0.5)
    with pytest.raises(ConfigError, match="speculative_config.num_speculatve_tokens: not an option"):
        spec_run([a], {"method": "ngram", "num_speculatve_tokens": 3}, acceptance_rate=0.5)
    with pytest.raises(ConfigError, match="V1 model runner refuses"):
        spec_run([a], acceptance_rate=0.5, async_scheduling=True, use_v2_model_runner=False)
    with pytest.raises(ConfigError, match="acceptance_rate .* has no effect without speculative_config"):
        run([a], acceptance_rate=0.5)
    for policy in ("sglang", "vllm-v0", "continuous"):
        with pytest.raises(ConfigError, match="speculative_config"):
            simulate([a], EngineConfig(speculative_config=NGRAM3, acceptance_rate=0.5), policy, "unit")


def test_accepted_drafts_blocks_are_cached_after_the_step():
    # Blocks of 4, prefix caching, A's ids covering prompt and answer (hash_scope "sequence": 4 + 5 tokens, 3 ids).
    # Step 0 prefills A's 4 tokens (block 0 cached when scheduled). Step 1 verifies 3 drafts, all accepted: 4
    # tokens, its last, and 8 computed; vLLM caches the blocks of the computed tokens after the step (block 1,
    # tokens 4-7) before freeing A, so block 1 goes back to the free queue hashed. B (step 2, prompt 12 = A's two
    # blocks and one of its own) hits both: 8 cached tokens (at most floor(11 / 4) = 2 blocks).
    a = Request("A", 0.0, 4, 5, hash_ids=(1, 2, 3), hash_scope="sequence", accept=(3,))
    b = Request("B", 2.0, 12, 1, hash_ids=(1, 2, 9), accept=(0,))
    r = spec_run([a, b], max_num_batched_tokens=32, block_size=4, num_gpu_blocks=20)
    assert r.steps[1].finished == ("A",)
    (_, entry), = entries(r, "B")
    assert (entry.num_cached_tokens, entry.num_scheduled_tokens) == (8, 4)
