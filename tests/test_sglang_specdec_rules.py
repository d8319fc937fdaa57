"""SGLang 0.5.23's speculative decoding (chains, `speculative_eagle_topk` 1), one tiny scenario per rule on the unit
step clock, each named by the source function it follows, every number derived by hand in a comment (rules G1-G6
of `servesim.engines.sglang.speculative`; docs/speculative.md). No recorded SGLang speculative schedule exists:
these follow the source only.

Common arithmetic: num_steps K = 3, so a verification is K + 1 = 4 tokens (num_draft_tokens) and a decode step
allocates up to kv_committed_len + 2 x 4 = committed + 8 slots (get_alloc_reserve_per_decode); after a prefill
committed = allocated = the prompt; a verification that accepts a drafts commits a + 1 tokens."""

from dataclasses import replace

import pytest
from helpers import cli

from servesim.engine import simulate
from servesim.engine.records import Reason
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.engines.sglang.config import resolve_sglang
from servesim.engines.sglang.server_args import SGLangConfig
from servesim.errors import ConfigError

EAGLE = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1}
DECAY = (0.7 - 0.098) / 600  # new_token_ratio's decay per decode step (test_sglang_rules S5)


def sg_run(requests, overlap=False, rate=None, **sg):
    c = {"max_total_num_tokens": 1000, "chunked_prefill_size": 64, "max_running_requests": 8,
         "disable_radix_cache": True, "disable_overlap_schedule": not overlap, **EAGLE} | sg
    return simulate(requests, EngineConfig(sglang=SGLangConfig(**c), acceptance_rate=rate), "sglang", "unit",
                    fast=False, check_invariants=True)


def rows(result, k):
    return [(e.id, e.num_scheduled_tokens, e.num_spec_tokens) for e in result.steps[k].scheduled]


def free(result, n, when="free_blocks_after_schedule"):
    return [getattr(s, when) for s in result.steps[:n]]


def test_handle_eagle_family_rewrites_at_start_up():
    # _handle_eagle_family: max_running_requests 48 when not given (an explicit one stays), num_draft_tokens =
    # num_steps + 1 with topk 1 whatever was given (10 -> 4), mixed chunks off for STANDALONE (no
    # supports_mixed_chunk) but kept for EAGLE3, the overlap schedule left on; _auto_choose_speculative_params:
    # STANDALONE without num_steps takes (3, 1, 4); the name upper-cased as SGLang does
    def resolved(**sg):
        return resolve_sglang(EngineConfig(sglang=SGLangConfig(**sg), acceptance_rate=0.5)).sglang

    sg = resolved(speculative_algorithm="eagle3", speculative_num_steps=3, speculative_eagle_topk=1,
                  speculative_num_draft_tokens=10, enable_mixed_chunk=True)
    assert (sg.speculative_algorithm, sg.speculative_num_draft_tokens, sg.max_running_requests) == ("EAGLE3", 4, 48)
    assert sg.enable_mixed_chunk and not sg.disable_overlap_schedule
    sg = resolved(speculative_algorithm="STANDALONE", speculative_draft_model_path="llama-3.2-1b",
                  enable_mixed_chunk=True, max_running_requests=7)
    assert (sg.speculative_num_steps, sg.speculative_eagle_topk, sg.speculative_num_draft_tokens) == (3, 1, 4)
    assert (sg.enable_mixed_chunk, sg.max_running_requests) == (False, 7)
    # without speculation the default stays servesim's 1024
    assert resolve_sglang(EngineConfig(sglang=SGLangConfig())).sglang.max_running_requests == 1024


@pytest.mark.parametrize("sg, field", [
    ({"speculative_algorithm": "NGRAM"}, "speculative_algorithm NGRAM"),  # a tree (topk = max BFS breadth)
    ({"speculative_algorithm": "DFLASH"}, "speculative_algorithm DFLASH"),
    ({"speculative_algorithm": "MEDUSA"}, "speculative_algorithm 'MEDUSA'"),
    ({"speculative_algorithm": "EAGLE"}, "speculative_num_steps"),  # chosen by architecture: not read
    ({"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 1}, "speculative_eagle_topk without"),  # assert
    ({"speculative_algorithm": "EAGLE", "speculative_num_steps": 3}, "speculative_eagle_topk"),  # None > 1 fails
    ({**EAGLE, "speculative_eagle_topk": 4}, "speculative_eagle_topk 4"),  # tree drafting
    ({**EAGLE, "speculative_num_steps": 0}, "speculative_num_steps"),
    ({"speculative_algorithm": "STANDALONE"}, "speculative_draft_model_path"),
    ({"speculative_num_steps": 3}, "speculative_num_steps has no effect"),
])
def test_start_up_refusals_are_one_line_naming_the_field(sg, field):
    with pytest.raises(ConfigError) as exc:
        SGLangConfig(**sg)
    assert f"sglang.{field}" in str(exc.value) and "\n" not in str(exc.value)


def test_flags_refused_across_engines_and_without_an_acceptance(monkeypatch, capsys):
    flags = ("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "azure-conv-sample", *flags, "--acceptance-rate",
                       "0.8")
    assert code == 2 and "--speculative-algorithm is an SGLang server option" in err and "Traceback" not in err
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "azure-conv-sample", "--policy", "sglang",
                       "--speculative-config", '{"method": "eagle", "num_speculative_tokens": 3}',
                       "--acceptance-rate", "0.8")
    assert code == 2 and "speculative_config is a vLLM knob" in err and "--speculative-algorithm" in err
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "azure-conv-sample", "--policy", "sglang", *flags)
    assert code == 2 and "has no acceptance" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "azure-conv-sample", "--policy", "sglang",
                       "--acceptance-rate", "0.8")
    assert code == 2 and "acceptance_rate" in err and "--speculative-algorithm" in err


def test_eagle_verify_input_output_101_num_steps_3():
    # prompt 64, output 101: the prefill samples the first token; each decode step verifies 3 drafts (4 tokens):
    # all accepted, 4 tokens a step, ceil(100 / 4) = 25 decode steps; none accepted, one a step, 100
    for rate, decode_steps in ((1.0, 25), (0.0, 100)):
        r = sg_run([Request("A", 0.0, 64, 101)], rate=rate)
        assert len(r.steps) == 1 + decode_steps
        assert rows(r, 0) == [("A", 64, 0)] and {tuple(rows(r, k)) for k in range(1, 1 + decode_steps)} == {
            (("A", 4, 3),)}
        stats = r.spec_decoding  # SpecDecodingStats: 25 verifications of 3 drafts, 75 accepted; 100, 0
        assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (
            decode_steps, 3 * decode_steps, 75 if rate else 0)
    # the overlap loop: the 101st token still comes at step 25 (its end: 26.0 on the unit clock), but at step 26's
    # schedule its result is in flight and it had 100 - 96 = 4 left before it, not one (G6): it is decoded once
    # more, that work discarded, no verification counted
    r = sg_run([Request("A", 0.0, 64, 101)], overlap=True, rate=1.0)
    assert r.request("A").finish_time == 26.0 and len(r.steps) == 27
    assert rows(r, 26) == [("A", 4, 0)] and r.spec_decoding.num_drafts == 25


def test_eagle_prepare_for_decode_allocates_committed_plus_twice_the_width():
    # pool 1000, prompt 10. Step 0: committed = allocated = 10, free 990. Step 1: allocated to 10 + 8 = 18, free
    # 982. All accepted (a = 3): committed 14, 18, ...: each step allocates 4 more (978, 974). None accepted:
    # committed 11, 12: 19, 20, one more a step (981, 980): rejected drafts' slots are reused, never freed
    assert free(sg_run([Request("A", 0.0, 10, 30, accept=(3,))]), 4) == [990, 982, 978, 974]
    assert free(sg_run([Request("A", 0.0, 10, 30, accept=(0,))]), 4) == [990, 982, 981, 980]


def test_prefill_adder_on_a_small_pool_reads_the_draft_slots():
    # SGLang's reservation on a small pool (40 tokens). A: prompt 10, output 20, all accepted. Step 0: A's 10 (free
    # 30). Step 1: A allocated to 10 + 8 = 18 (free 22); 1 + 4 = 5 outputs. Step 2: B (prompt 6, output 6) needs
    # 6 + 6 + 1 page = 13; A's reserve is (20 - 5) x (0.7 - decay) = 10.485, so 22 - 10.485 = 11.515 are left:
    # 13 >= 11.515, no token. (Allocated committed + 4, one width, A would leave 26 - 10.485 = 15.5: B admitted.)
    # The batch is then full until A finishes (5 outputs + 4 x 4 > 20 at step 5): B prefills at step 6.
    r = sg_run([Request("A", 0.0, 10, 20, accept=(3,)), Request("B", 2.0, 6, 6, accept=(3,))],
               max_total_num_tokens=40)
    assert free(r, 2) == [30, 22]
    assert {w.id: w.reason for w in r.steps[2].waiting} == {"B": Reason.NO_TOKEN}
    assert r.steps[2].new_token_ratio == pytest.approx(0.7 - 2 * DECAY)
    assert r.steps[5].finished == ("A",) and rows(r, 6) == [("B", 6, 0)]


def test_new_tokens_required_next_decode_spec_v2_retracts():
    # pool 43, prompts 4, outputs 20, all accepted. A prefills at step 0; B at step 1 (4 + 20 + 1 = 25 < 43 - 4 -
    # 19 x 0.7 = 25.7). Step 2: both allocate 4 + 8 = 12 (free 35 - 16 = 19); step 3: 16 each (+4 each, 11);
    # step 4: 20 each (3). Step 5 needs 4 + 4 = 8 > 3: retract_decode sorts (outputs 13, -prompt -4) alike, so B
    # (last) goes, freeing its 20 (23), A takes 4 (19); the ratio becomes min(1, (13 + 20) / (20 + 1)) = 1.
    # Without the draft slots (a page a decode) nobody would be retracted.
    r = sg_run([Request("A", 0.0, 4, 20, accept=(3,)), Request("B", 1.0, 4, 20, accept=(3,))],
               max_total_num_tokens=43)
    assert free(r, 6) == [39, 35, 19, 11, 3, 19]
    assert r.steps[5].preempted == ("B",) and rows(r, 5) == [("A", 4, 3)] and r.steps[5].new_token_ratio == 1.0
    # B keeps its 13 outputs and re-prefills 4 + 13 = 17 once A is gone (A: 17 + 4 > 20 at step 6)
    assert r.steps[6].finished == ("A",) and rows(r, 7) == [("B", 17, 0)]


def test_owned_kv_len_keeps_the_committed_tokens_and_frees_the_overallocation():
    # radix cache on, pool 100, prompt 8 (token ids), output 6, all accepted. Step 0: 8 (free 92), committed 8.
    # Step 1: allocated 16 (84); 5 outputs, committed 12. Step 2: allocated 20 (80); it needs 1 more token: the
    # verification commits 4 (committed 16), the output is cut at 6. owned_kv_len = min(16, 8 + 6) = 14 tokens go
    # into the tree, the 6 past them are freed: 80 + 6 = 86 free (the computed tokens, 13, would leave 87)
    r = sg_run([Request("A", 0.0, 8, 6, accept=(3,), hash_ids=tuple(range(1, 9)), hash_block_size=1)],
               max_total_num_tokens=100, disable_radix_cache=False)
    assert free(r, 3) == [92, 84, 80] and r.steps[2].finished == ("A",)
    assert r.steps[2].free_blocks_after_step == 86


def test_overlap_prepare_for_decode_reads_the_committed_length_a_step_late():
    # the overlap loop processes step n's result after step n + 1 is scheduled: at step 2 committed is still the
    # prompt's 10 (step 1's 4 tokens in flight), so nothing more is allocated (18 >= 10 + 8); at step 3 it is 14:
    # 22. Without overlap: 990, 982, 978, 974 (test above)
    r = sg_run([Request("A", 0.0, 10, 30, accept=(3,))], overlap=True)
    assert free(r, 5) == [990, 982, 982, 978, 974]


def test_reqs_finishing_inflight_only_when_one_token_was_left():
    # overlap loop, A (prompt 4) beside B. Output 6: 1 + 4 after step 1, its last token at step 2 (one left before
    # it): at step 3 it is finishing by length and sits out. Output 5: 1 + 4 = 5 at step 1, with 4 left before it:
    # SGLang cannot tell, and A is decoded at step 2 again (no drafts counted), freed at that step's end
    six = sg_run([Request("A", 0.0, 4, 6, accept=(3,)), Request("B", 0.0, 4, 30, accept=(3,))], overlap=True)
    assert six.steps[2].finished == ("A",) and rows(six, 3) == [("B", 4, 3)]
    five = sg_run([Request("A", 0.0, 4, 5, accept=(3,)), Request("B", 0.0, 4, 30, accept=(3,))], overlap=True)
    assert five.steps[1].finished == ("A",) and rows(five, 2) == [("A", 4, 0), ("B", 4, 3)]
    assert rows(five, 3) == [("B", 4, 3)]


def test_mix_with_running_degrades_decodes_to_one_token():
    # EAGLE keeps mixed chunks (supports_mixed_chunk): d (prompt 4) decodes beside L's chunks of 8 - 1 = 7, 7, 6
    # with one token and no drafts; then both verify 3 drafts. STANDALONE turns mixed chunks off: d waits.
    r = sg_run([Request("d", 0.0, 4, 20, accept=(3,)), Request("L", 1.0, 20, 3, accept=(3,))],
               chunked_prefill_size=8, enable_mixed_chunk=True)
    assert [rows(r, k) for k in range(1, 5)] == [[("L", 7, 0), ("d", 1, 0)], [("L", 7, 0), ("d", 1, 0)],
                                                 [("L", 6, 0), ("d", 1, 0)], [("L", 4, 3), ("d", 4, 3)]]
    # d's slots: committed 4 -> allocated 12 at step 1; each mixed decode commits 1 (5, 6): 13, 14 (+1 a step)
    assert [r.steps[k].free_blocks_after_schedule for k in (1, 2, 3)] == [1000 - 12 - 7, 1000 - 13 - 14,
                                                                          1000 - 14 - 20]
    standalone = {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": "llama-3.2-1b"}
    r = sg_run([Request("d", 0.0, 4, 20, accept=(3,)), Request("L", 1.0, 20, 3, accept=(3,))],
               chunked_prefill_size=8, enable_mixed_chunk=True, **standalone)
    assert rows(r, 1) == [("L", 8, 0)]


def test_a_request_too_long_for_its_last_drafts_fails_on_arrival():
    # servesim's guard: prompt + output - 2 committed + 8 slots must fit the pool alone: 30 + 2 - 8 = 24 tokens at
    # most in a pool of 30; a request of 25 is refused on arrival, one of 24 runs
    r = sg_run([Request("A", 0.0, 10, 15, accept=(3,)), Request("B", 0.0, 10, 14, accept=(3,))],
               max_total_num_tokens=30)
    assert [t.id for t in r.requests if t.finish_time is not None] == ["B"]


def test_speculation_is_deterministic_and_fills_the_stats():
    reqs = [Request(f"r{i}", i / 2, 5 + i, 12 + i) for i in range(6)]
    a, b = (sg_run(reqs, overlap=True, rate=(0.9, 0.6, 0.3), max_total_num_tokens=120) for _ in range(2))
    assert [s.scheduled for s in a.steps] == [s.scheduled for s in b.steps] and a.spec_decoding == b.spec_decoding
    s = a.spec_decoding
    assert s.num_draft_tokens == 3 * s.num_drafts and 0 < s.num_accepted_tokens < s.num_draft_tokens
    assert sum(t.num_tokens for t in a.requests) == sum(r.output_len for r in reqs)
    sg = replace(a.config.sglang, max_running_requests=8)
    other = simulate(reqs, EngineConfig(sglang=sg, acceptance_rate=(0.9, 0.6, 0.3), acceptance_seed=7), "sglang",
                     "unit", fast=False)
    assert other.spec_decoding != s  # (another seed, other draws)


def test_overlap_reserve_reads_output_ids_without_the_verification_in_flight():
    # _get_running_request_total_token_offset under the overlap loop (pool 40). Step 0: A (prompt 10, output 20)
    # prefills; step 1: its first verification, allocated 18 (free 22). At step 2's schedule its output_ids hold
    # the prefill's token only (step 1's 4 tokens are in flight): the reserve is (20 - 1) x (0.7 - decay) =
    # 13.281, leaving 8.719; B (prompt 4, output 5) needs 4 + 5 + 1 = 10: no token. (Taking one token in flight,
    # as without speculation, would leave 22 - 16 x 0.699 = 10.816 and admit B.)
    r = sg_run([Request("A", 0.0, 10, 20, accept=(3,)), Request("B", 2.0, 4, 5, accept=(3,))], overlap=True,
               max_total_num_tokens=40)
    assert free(r, 2) == [30, 22]
    assert {w.id: w.reason for w in r.steps[2].waiting} == {"B": Reason.NO_TOKEN}


def test_retract_decode_under_overlap_drops_the_verification_in_flight():
    # pool 78, prompts 4, outputs 40, all accepted, the overlap loop. A prefills at step 0; B at step 1 (A's
    # output_ids still empty: reserve 40 x 0.7 = 28, 78 - 4 - 28 = 46 > 4 + 40 + 1). From step 2 both verify:
    # allocated 12 each (free 70 - 16 = 54); step 3 reads committed 4 still (nothing more, 54); then +4 each a
    # step: 46, 38, 30, 22, 14, 6 at steps 4-9. Step 10 needs 8 > 6: both show 1 + 7 x 4 = 29 outputs (step 9's
    # 4 in flight), so B, last, is retracted: it frees its 36 (42) and A takes 4 (38); its 4 tokens in flight are
    # dropped (batch_result_processor skips a retracted request's result): it keeps 29 and re-prefills 4 + 29 = 33
    # once A is done (A: 37 + 4 > 40 at step 11, processed at step 12's end), at step 13
    r = sg_run([Request("A", 0.0, 4, 40, accept=(3,)), Request("B", 1.0, 4, 40, accept=(3,))], overlap=True,
               max_total_num_tokens=78)
    assert free(r, 11) == [74, 70, 54, 54, 46, 38, 30, 22, 14, 6, 38]
    assert r.steps[10].preempted == ("B",) and r.steps[10].new_token_ratio == 1.0
    assert r.steps[11].finished == ("A",) and rows(r, 13) == [("B", 33, 0)]


def test_explain_names_sglangs_algorithm_and_reruns_without_it():
    # the toy cost: a decode step 1 ms whatever it verifies, the 64-token prefill 6.4 ms. Output 101, one of 3
    # drafts accepted a verification: 100 tokens in 50 verify steps against 100 plain ones, TPOT 0.5 ms against
    # 1.0, 101 tokens over 56.4 ms (1,791 tok/s) against 106.4 ms (949 tok/s): vLLM's numbers (test_spec_cost)
    from servesim.analysis.speculation import speculation_sentences
    from servesim.engines.sglang.config import unspeculative_config

    sg = SGLangConfig(chunked_prefill_size=256, disable_overlap_schedule=True, **EAGLE)
    spec_run = simulate([Request("A", 0.0, 64, 101, accept=(1,))], EngineConfig(sglang=sg), "sglang", "toy")
    plain = simulate([Request("A", 0.0, 64, 101)], unspeculative_config(spec_run.config), "sglang", "toy")
    assert plain.spec_decoding is None and plain.config.sglang.max_running_requests == 48  # (the same sizes)
    assert speculation_sentences(spec_run, plain)[:2] == [
        "Speculation (EAGLE, K = 3) accepted 1.00 of 3 drafts per verification (33.3% of 150 drafted tokens; 2.00 "
        "tokens a step per request); 100 drafted tokens were rejected, computed for nothing.",
        "Against the same run without it: TPOT 1.0 -> 0.5 ms, ITL (per streamed chunk) 1.0 -> 1.0 ms, output "
        "throughput 949 -> 1,791 tok/s."]
    assert unspeculative_config(plain.config) is None
