"""SGLang 0.5.23's scheduling rules S1-S10 (../shared/conformance/sglang/README.md), each on a tiny scenario whose
numbers are derived by hand in the test, on the step clock (every step costs 1.0)."""

from dataclasses import replace

import pytest
from helpers import sglang_speculation
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from servesim.engine import simulate
from servesim.engine.records import Reason
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.engines.sglang.conformance import run_scenario, to_trace
from servesim.engines.sglang.radix_cache import RadixCache, TokenRun
from servesim.engines.sglang.server_args import SGLangConfig
from servesim.errors import ConfigError, EngineOutOfMemory

DECAY = (0.7 - 0.098) / 600  # S5: init 0.7, min 0.7 x 0.14, over 600 decode steps


def scenario(requests, **config):
    c = {"max_total_num_tokens": 1000, "page_size": 1, "chunked_prefill_size": 8, "max_prefill_tokens": 16384,
         "max_running_requests": 16, "policy": "fcfs", "schedule_conservativeness": 1.0,
         "enable_mixed_chunk": False, "radix_cache": False} | config
    reqs = [{"id": r[0], "arrival_step": r[1], "prompt_len": r[2], "output_len": r[3]} | (
        {"segments": r[4]} if len(r) > 4 else {}) for r in requests]
    return {"name": "t", "config": c, "requests": reqs}


def steps(sc, record="full"):
    result = run_scenario(sc, record=record)
    return result, to_trace(sc, result)["steps"]


def rows(step):
    return [(e["id"], e["num_scheduled_tokens"]) for e in step["scheduled"]]


def test_s1_prefill_first_freezes_the_decodes():
    # a, b decode; L (20 tokens) arrives at step 2 and prefills in chunks of 8, 8, 4 while a, b wait
    result, t = steps(scenario([("a", 0, 4, 10), ("b", 0, 4, 10), ("L", 2, 20, 2)]))
    assert [s["forward_mode"] for s in t[:6]] == ["prefill", "decode", "prefill", "prefill", "prefill", "decode"]
    assert [rows(s) for s in t[2:6]] == [[("L", 8)], [("L", 8)], [("L", 4)], [("a", 1), ("b", 1), ("L", 1)]]
    assert [s["chunked_req_after_schedule"] for s in t[2:5]] == ["L", "L", None]
    waits = [w for w in result.steps[3].waiting if w.id == "a"]
    assert waits[0].reason is Reason.PREFILL_FIRST


def test_s2_admission_arithmetic_on_a_small_pool():
    # pool 100. Step 0: a needs 10 + 20 + 1 (page) = 31 < 100. Step 1: 90 free, a reserves min(20 - 1, 4096) x 0.7
    # = 13.3, so 76.7 remain; b needs 30 + 46 + 1 = 77 >= 76.7: no token, and c (small) waits behind it (no
    # skipping); the batch is marked full until a finishes at step 19. Step 20: b (77 < 100) then c (5 < 24).
    result, t = steps(scenario([("a", 0, 10, 20), ("b", 1, 30, 46), ("c", 1, 2, 2)],
                               max_total_num_tokens=100, chunked_prefill_size=64))
    assert t[1]["forward_mode"] == "decode"
    assert {w.id: w.reason for w in result.steps[1].waiting} == {"b": Reason.NO_TOKEN,
                                                                  "c": Reason.BLOCKED_BEHIND_HEAD}
    assert {w.reason for w in result.steps[2].waiting} == {Reason.BATCH_FULL}
    assert t[19]["finished"] == ["a"]
    assert rows(t[20]) == [("b", 30), ("c", 2)]


def test_s3_one_chunked_request_goes_first():
    # chunk 8: A takes 8 and spends the chunk (B waits on the chunk budget), then 8, then its last 4 + B's first 4
    result, t = steps(scenario([("A", 0, 20, 3), ("B", 0, 20, 3)]))
    assert [rows(s) for s in t[:5]] == [[("A", 8)], [("A", 8)], [("A", 4), ("B", 4)], [("B", 8)], [("B", 8)]]
    assert [s["chunked_req_after_schedule"] for s in t[:5]] == ["A", "A", "B", "B", None]
    assert result.steps[0].waiting[0].reason is Reason.CHUNK_BUDGET


def test_s4_mixed_chunk_shrinks_the_budget_by_the_decodes():
    # one decode rides along: chunks of 8 - 1 = 7, 7, 6; then L decodes before d (the mixed batch's order);
    # mixed steps do not decay the ratio, the first decode step does
    _, t = steps(scenario([("d", 0, 4, 10), ("L", 1, 20, 3)], enable_mixed_chunk=True))
    assert [s["forward_mode"] for s in t[:5]] == ["prefill", "mixed", "mixed", "mixed", "decode"]
    assert [rows(s) for s in t[1:5]] == [[("L", 7), ("d", 1)], [("L", 7), ("d", 1)], [("L", 6), ("d", 1)],
                                         [("L", 1), ("d", 1)]]
    assert t[3]["new_token_ratio_at_schedule"] == 0.7
    assert t[4]["new_token_ratio_at_schedule"] == pytest.approx(0.7 - DECAY)


@pytest.mark.parametrize("conservativeness", [1.0, 0.5])
def test_s5_ratio_decays_per_decode_step(conservativeness):
    init = min(0.7 * conservativeness, 1.0)
    decay = (init - init * 0.14) / 600
    _, t = steps(scenario([("a", 0, 4, 6)], schedule_conservativeness=conservativeness))
    assert t[0]["new_token_ratio_at_schedule"] == init  # the prefill step: no decay
    for k in range(1, 6):
        assert t[k]["new_token_ratio_at_schedule"] == pytest.approx(init - k * decay)


def test_s6_retraction_order_and_outputs_kept():
    # pool 72: A at step 0; B, C (6 + 20 + 1 = 27 each, and each charged that: rule F) admitted at step 1 with A's
    # reserve 19 x 0.7 = 13.3 (68 - 13.3 - 27 = 27.7 > 27). 16 tokens held, 56 free; 3 per decode step from step
    # 2, so after step 19 two are free. Step 20 needs 3: all have 19 outputs; sorted by (outputs, -prompt)
    # descending A, B, C; C (longest prompt, then latest) goes; the ratio becomes min(1, (19 + 19 + 20 x 2) /
    # (40 + 1)) = 1. C re-prefills its 6 prompt tokens and 19 outputs at step 21 and samples its 20th token.
    result, t = steps(scenario([("A", 0, 4, 20), ("B", 1, 6, 20), ("C", 1, 6, 20)], max_total_num_tokens=72,
                               chunked_prefill_size=64))
    assert rows(t[1]) == [("B", 6), ("C", 6)]
    assert t[19]["free_tokens_after_step"] == 2
    assert t[20]["retracted"] == ["C"] and rows(t[20]) == [("A", 1), ("B", 1)]
    assert t[20]["new_token_ratio_at_schedule"] == 1.0
    assert rows(t[21]) == [("C", 25)]
    assert t[21]["scheduled"][0]["resumed"] and t[21]["finished"] == ["C"]
    assert result.request("C").num_tokens == 20 and result.request("C").num_preemptions == 1


def test_s7_max_running_requests_counts_the_chunked_row():
    # max 2: d runs; L's first chunk spends the chunk budget at step 1, its second at step 2 before s is read (a
    # spent budget stops the scan ahead of the first candidate); at step 3 its last 4 leave room, but L (chunked)
    # holds the other row, then L runs (3 outputs: done at step 5), so s waits for a row until step 6
    result, t = steps(scenario([("d", 0, 4, 10), ("L", 1, 20, 3), ("s", 1, 2, 2)], max_running_requests=2))
    assert [rows(s) for s in t[1:4]] == [[("L", 8)], [("L", 8)], [("L", 4)]]
    reasons = [{w.id: w.reason for w in result.steps[k].waiting}["s"] for k in (1, 2, 3)]
    assert reasons == [Reason.CHUNK_BUDGET, Reason.CHUNK_BUDGET, Reason.MAX_RUNNING_REQUESTS]
    assert t[4]["forward_mode"] == "decode" and t[5]["finished"] == ["L"]
    assert rows(t[6]) == [("s", 2)]


@pytest.mark.parametrize("policy, order", [("fcfs", ["y1", "y2", "u", "x1"]), ("lpm", ["x1", "y1", "u", "y2"])])
def test_s8_lpm_longest_match_first_and_in_batch_prefix_last(policy, order):
    # w0 caches X (40 tokens). lpm: x1 (match 40) first; y2 shares 40 tokens with the earlier y1 and matches
    # nothing cached, so it goes last; ties keep queue order. x1 hits 40 tokens under fcfs too.
    x, y = [[1, 40]], [[9, 40]]
    _, t = steps(scenario([("w0", 0, 44, 1, x + [[2, 4]]), ("y1", 1, 44, 1, y + [[3, 4]]),
                           ("y2", 1, 44, 1, y + [[4, 4]]), ("u", 1, 44, 1), ("x1", 1, 44, 1, x + [[5, 4]])],
                          chunked_prefill_size=1024, radix_cache=True, policy=policy))
    assert [e["id"] for e in t[1]["scheduled"]] == order
    assert {e["id"]: e["cached_tokens"] for e in t[1]["scheduled"]}["x1"] == 40


def test_dfs_weight_heaviest_subtree_first():
    # w0 and w1 cache X and Y (40 tokens each) and finish at step 0. At step 1 the queue is u, y1, x1, y2: y1 and
    # y2 end their match at Y's node (weight 2), x1 at X's (weight 1), u (no tokens) at the root. Depth first,
    # heavier subtree first: Y's requests, X's, then the root's own; fcfs keeps the queue; lpm sorts by match
    # (40, 40, 40, 0), stably.
    x, y = [[1, 40]], [[9, 40]]
    orders = {}
    for policy in ("fcfs", "lpm", "dfs-weight"):
        _, t = steps(scenario([("w0", 0, 44, 1, x + [[2, 4]]), ("w1", 0, 44, 1, y + [[6, 4]]), ("u", 1, 44, 1),
                               ("y1", 1, 44, 1, y + [[3, 4]]), ("x1", 1, 44, 1, x + [[5, 4]]),
                               ("y2", 1, 44, 1, y + [[4, 4]])],
                              chunked_prefill_size=1024, radix_cache=True, policy=policy))
        assert t[0]["finished"] == ["w0", "w1"]
        orders[policy] = [e["id"] for e in t[1]["scheduled"]]
    assert orders == {"fcfs": ["u", "y1", "x1", "y2"], "lpm": ["y1", "x1", "y2", "u"],
                      "dfs-weight": ["y1", "y2", "x1", "u"]}


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_random_policy_shuffles_the_queue_with_its_seed(seed):
    # four requests wait at step 0: the batch takes them in the order random.Random(seed).shuffle gives the queue
    reqs = [Request(n, 0.0, 4, 2) for n in "abcd"]
    sg = SGLangConfig(schedule_policy="random", random_seed=seed, max_total_num_tokens=1000)
    result = simulate(reqs, EngineConfig(sglang=sg), "sglang", "unit")
    expected = list("abcd")
    import random

    random.Random(seed).shuffle(expected)
    assert [e.id for e in result.steps[0].scheduled] == expected
    assert result.steps == simulate(reqs, EngineConfig(sglang=sg), "sglang", "unit").steps  # same seed, same run


@pytest.mark.parametrize("a_eos, radix, admitted", [(True, False, 40), (False, False, 1), (True, True, 40)])
def test_ignore_eos_admission_runs_everyone_to_the_end(a_eos, radix, admitted):
    # pool 100, b (10 + 40, ignore_eos) arrives at step 1 beside a (10 + 40, decoding: at step 1 it holds 10 slots
    # and has 1 output; 90 free). Radix cache off, ignore_eos: b must fit now (10 <= 90) and the pool must last if
    # both ran to the end, least left first: a has 40 x 1.0 - 1 = 39 left (ignore_eos: ratio 1), b 40; with b's
    # 10 taken, 80 - 2 x 39 = 2 <= 1 x 2 (SGLang's reserve per request): no token, the batch is full, and b waits
    # for a's last token (step 39): admitted at step 40. If a is not ignore_eos its 40 x 0.7 - 1 = 27 leaves
    # 80 - 54 = 26, then 80 + 11 - 40 = 51: admitted at step 1. With the radix cache on, b takes the usual path,
    # where a (ignore_eos) is reserved at ratio 1.0 too (round 2's rule D): 10 + 40 + 1 = 51 is not below
    # 90 - 39 = 51, and each decode of a takes one slot and one token of its reserve, so b waits for a's end too.
    sc = scenario([("a", 0, 10, 40), ("b", 1, 10, 40)], max_total_num_tokens=100, chunked_prefill_size=64,
                  radix_cache=radix)
    sc["requests"][0]["ignore_eos"] = a_eos
    sc["requests"][1]["ignore_eos"] = True
    result, t = steps(sc)
    first = {e["id"]: s["step"] for s in t for e in s["scheduled"] if e["kind"] == "prefill"}
    assert first["b"] == admitted
    if admitted == 40:
        assert {w.id: w.reason for w in result.steps[1].waiting} == {"b": Reason.NO_TOKEN}
        assert t[39]["finished"] == ["a"]


@pytest.mark.parametrize("page, free_after_a, tree, cached_c, free_c", [(4, 92, 8, 8, 88), (1, 89, 11, 10, 87)])
def test_paged_radix_cache_holds_and_hits_whole_pages(page, free_after_a, tree, cached_c, free_c):
    # pool 100. a (10 tokens of 1, 2 outputs) finishes at step 1 holding 11 tokens. Pages of 4: its 3 pages hold
    # 11; the tree takes the 2 whole pages (8 tokens), the part page is freed: 92 free. c (10 tokens of 1, then 2
    # of 6) arrives at step 2: its match stops at the last whole page, 8 cached; its 4 new tokens take 1 page: 88.
    # Pages of 1: the tree takes all 11 (89 free), c hits 10 and takes 2: 87.
    result, t = steps(scenario([("a", 0, 10, 2, [[1, 10]]), ("c", 2, 12, 1, [[1, 10], [6, 2]])],
                               max_total_num_tokens=100, page_size=page, chunked_prefill_size=64, radix_cache=True))
    assert t[0]["free_tokens_after_schedule"] == 100 - (12 if page == 4 else 10)
    assert t[1]["finished"] == ["a"] and t[1]["free_tokens_after_step"] == free_after_a
    assert 100 - t[1]["free_tokens_after_step"] == tree  # nobody runs: what is not free is the tree's
    assert t[2]["scheduled"][0]["cached_tokens"] == cached_c
    assert t[2]["free_tokens_after_schedule"] == free_c


def test_a_chunk_that_ends_inside_a_page_leaves_room_in_it():
    # pages of 4, a 100-token pool, chunks of 8 less the mixed batch's one decode: 7. a (4 + 20) decodes from
    # step 1. L (12) arrives at step 1: a new chunk is page-aligned, 4 tokens (1 page; a's decode takes its 2nd
    # page: 88 free). Step 2: the chunked request takes 7 (tokens 4-10), its pages 1 -> 3: 80. Step 3: its last
    # token, 11, fits in its third page: no new page, still 80 (as alloc_extend counts: ceil(12/4) - ceil(11/4)).
    _, t = steps(scenario([("a", 0, 4, 20), ("L", 1, 12, 2)], max_total_num_tokens=100, page_size=4,
                          chunked_prefill_size=8, enable_mixed_chunk=True))
    assert [rows(s) for s in t[1:4]] == [[("L", 4), ("a", 1)], [("L", 7), ("a", 1)], [("L", 1), ("a", 1)]]
    assert [s["free_tokens_after_schedule"] for s in t[1:4]] == [88, 80, 80]


def test_s9_radix_hits_by_token_dedup_and_evictable():
    # a (10 tokens) finishes at step 1: its 10 + 1 tokens stay in the tree (evictable, not free): 89 free.
    # b shares a's 10 tokens: a 10-token hit (no block rule), 5 computed: 84. c1, c2 (same 10 tokens, one batch)
    # take 20 (64 free); on insert c2's copy is a duplicate and is freed: 74.
    result, t = steps(scenario([("a", 0, 10, 2, [[1, 10]]), ("b", 2, 15, 1, [[1, 10], [5, 5]]),
                                ("c1", 3, 10, 1, [[4, 10]]), ("c2", 3, 10, 1, [[4, 10]])],
                               max_total_num_tokens=100, chunked_prefill_size=64, radix_cache=True))
    assert t[1]["free_tokens_after_step"] == 89
    assert t[2]["scheduled"][0]["cached_tokens"] == 10 and rows(t[2]) == [("b", 5)]
    assert t[2]["free_tokens_after_schedule"] == 84
    assert (t[3]["free_tokens_after_schedule"], t[3]["free_tokens_after_step"]) == (64, 74)
    assert result.request("b").num_cached_tokens == 10


def test_a_page_aligned_truncation_ends_the_batch():
    """Pages of 4, chunks of 8, mixed: at step 1 a's decode leaves 7 of the chunk budget, b's 8-token prompt is cut
    to whole pages (4) and becomes the chunked request; the 3 tokens left go to nobody (c, ignore_eos with the radix
    cache off, would be cut too and replace b as the chunked request). Step 2: b's last 4, then c's first 4."""
    reqs = [Request("a", 0.0, 8, 2), Request("b", 0.0, 8, 1), Request("c", 0.0, 8, 1, ignore_eos=True)]
    sg = SGLangConfig(max_total_num_tokens=80, page_size=4, chunked_prefill_size=8, enable_mixed_chunk=True,
                      disable_radix_cache=True)
    steps = simulate(reqs, EngineConfig(sglang=sg), "sglang", "unit", check_invariants=True).steps
    assert [[(e.id, e.num_scheduled_tokens) for e in s.scheduled] for s in steps[:3]] == [
        [("a", 8)], [("b", 4), ("a", 1)], [("b", 4), ("c", 4)]]
    assert [s.chunked_request for s in steps[:3]] == [None, "b", "c"]
    assert [(w.id, w.reason) for w in steps[1].waiting] == [("c", Reason.CHUNK_BUDGET)]


def test_s10_kv_per_request():
    # prompt 5, 4 outputs: 5 slots at prefill, one per decode; it holds 5 + 4 - 1 = 8 when it finishes
    _, t = steps(scenario([("a", 0, 5, 4)], max_total_num_tokens=50))
    assert [s["free_tokens_after_schedule"] for s in t] == [45, 44, 43, 42]
    assert t[3]["finished"] == ["a"] and t[3]["free_tokens_after_step"] == 50


def test_vllm_only_knobs_are_refused():
    reqs = [Request("a", 0.0, 4, 2)]
    with pytest.raises(ConfigError, match="max_num_seqs is a vLLM knob"):
        simulate(reqs, EngineConfig(max_num_seqs=4), "sglang", "unit")
    with pytest.raises(ConfigError, match="sglang section"):
        simulate(reqs, EngineConfig(sglang=SGLangConfig()), "vllm", "unit")
    with pytest.raises(ConfigError, match="schedule_policy"):
        SGLangConfig(schedule_policy="dfs")


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 12))
    reqs = []
    for i in range(n):
        seg = draw(st.sampled_from([None, [[1, 8]], [[1, 8], [2, 4]], [[3, 12]]]))
        p = sum(k for _, k in seg) if seg else draw(st.integers(1, 40))
        reqs.append(Request(f"r{i}", float(draw(st.integers(0, 6))), p, draw(st.integers(1, 30)),
                            hash_ids=tuple(t for t, k in seg for _ in range(k)) if seg else None,
                            hash_block_size=1 if seg else None, ignore_eos=draw(st.booleans()),
                            priority=draw(st.sampled_from([0, 5, 20, 40]))))
    sg = SGLangConfig(max_total_num_tokens=draw(st.integers(80, 300)), page_size=draw(st.sampled_from([1, 1, 4])),
                      chunked_prefill_size=(chunk := draw(st.sampled_from([None, 8, 16, 64]))),
                      max_prefill_tokens=draw(st.sampled_from([16, 64, 16384])),
                      max_running_requests=draw(st.integers(1, 6)),
                      enable_mixed_chunk=chunk is not None and draw(st.booleans()),
                      disable_radix_cache=draw(st.booleans()),
                      schedule_policy=draw(st.sampled_from(["fcfs", "lpm", "lof", "random", "dfs-weight"])),
                      random_seed=draw(st.integers(0, 3)), enable_priority_scheduling=draw(st.booleans()),
                      schedule_low_priority_values_first=draw(st.booleans()),
                      disable_overlap_schedule=draw(st.booleans()))
    return reqs, sg


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_invariants(case):
    """Token pool never over-allocated (the engine's per-step check: free >= 0, free + held + tree = pool), at most
    one chunked request, running + chunked <= max_running_requests, retraction keeps outputs, all finish."""
    reqs, sg = case
    result = simulate(reqs, EngineConfig(sglang=sg), "sglang", "unit", check_invariants=True)
    for s in result.steps:
        chunks = [e for e in s.scheduled if e.kind.value == "prefill" and not e.samples_token]
        assert len(chunks) <= 1
        assert s.num_running_after + (s.chunked_request is not None) <= sg.max_running_requests
        for e in s.scheduled:
            if e.resumed:  # a retracted request re-prefills its prompt and the outputs it kept (under the
                # overlap loop less its in-flight token, O4: the prompt alone when that was its first)
                r = result.request(e.id)
                assert e.num_tokens_before >= r.prompt_len + sg.disable_overlap_schedule
    served = [r for r in result.requests if r.id not in result.rejected]
    assert all(r.finish_time is not None and r.num_tokens == r.output_len for r in served)
    assert {r.id for r in served} | set(result.rejected) == {r.request_id for r in reqs}


@st.composite
def speculative_workloads(draw):
    reqs, sg = draw(workloads())
    return sglang_speculation(draw, reqs, sg)


@settings(max_examples=100, deadline=None)
@given(speculative_workloads())
def test_invariants_with_speculation(case):
    """With SGLang's speculative decoding drawn: the pool's books after every step (its draft slots included), the
    rows, every verification 1 + num_steps tokens, every served request finishing with all its tokens."""
    reqs, sg, rates = case
    try:
        result = simulate(reqs, EngineConfig(sglang=sg, acceptance_rate=rates), "sglang", "unit",
                          check_invariants=True)
    except EngineOutOfMemory:  # SGLang's own "Prefill out of memory" (test_a_forced_chunk_*): no run to check
        reject()
    for s in result.steps:
        assert s.num_running_after + (s.chunked_request is not None) <= sg.max_running_requests
        assert all(e.num_scheduled_tokens == sg.speculative_num_steps + 1 for e in s.scheduled if e.num_spec_tokens)
    served = [r for r in result.requests if r.id not in result.rejected]
    assert all(r.finish_time is not None and r.num_tokens == r.output_len for r in served)
    assert {r.id for r in served} | set(result.rejected) == {r.request_id for r in reqs}
    stats = result.spec_decoding
    assert stats.num_draft_tokens == sg.speculative_num_steps * stats.num_drafts


def test_a_forced_chunk_the_drafts_slots_left_no_room_for_stops_as_sglang_does():
    """Found by Hypothesis (test_invariants_with_speculation): SGLang adds the chunked request whatever memory says
    (add_chunked_req) and its alloc_extend raises "Prefill out of memory" when the pool cannot hold the chunk; here
    the running requests' EAGLE slots, allocated two verifications ahead (G3), took the pool of 80 while r7's
    17-token prompt went in chunks. servesim stops the same way, in one line, naming the request."""
    same = dict(hash_ids=(1,) * 8, hash_block_size=1)
    reqs = [Request("r0", 2.0, 12, 12, hash_ids=(1,) * 8 + (2,) * 4, hash_block_size=1),
            Request("r1", 1.0, 8, 24, ignore_eos=True, **same), Request("r2", 1.0, 8, 13, **same),
            Request("r3", 1.0, 8, 1, **same), Request("r4", 2.0, 8, 10, **same), Request("r5", 2.0, 8, 4, **same),
            Request("r6", 1.0, 8, 1, **same), Request("r7", 2.0, 17, 1)]
    sg = SGLangConfig(max_total_num_tokens=80, page_size=4, chunked_prefill_size=8, max_prefill_tokens=16,
                      max_running_requests=4, enable_mixed_chunk=True, disable_radix_cache=True,
                      speculative_algorithm="EAGLE", speculative_num_steps=1, speculative_eagle_topk=1)
    with pytest.raises(EngineOutOfMemory, match="Prefill out of memory.*chunked request r7"):
        simulate(reqs, EngineConfig(sglang=sg, acceptance_rate=(0.0,)), "sglang", "unit")
    # the same without speculation runs to the end: the drafts' slots were what the pool lacked
    plain = replace(sg, speculative_algorithm=None, speculative_num_steps=None, speculative_eagle_topk=None)
    assert all(r.finish_time is not None for r in simulate(reqs, EngineConfig(sglang=plain), "sglang", "unit").requests)


def test_token_run_reads_as_its_tuple():
    """A request with no spelled tokens: ("u", 0) x 3 then the output token 7 x 2, sliced and indexed as a tuple."""
    run, spelled = TokenRun(("u", 0), 3, 7, 2), (("u", 0),) * 3 + (7,) * 2
    assert len(run) == 5 and tuple(run) == spelled and run == spelled and spelled == run
    assert [run[i] for i in range(-5, 5)] == [spelled[i] for i in range(-5, 5)]
    for i in range(6):
        for j in range(6):
            assert tuple(run[i:j]) == spelled[i:j] and run[i:j] == spelled[i:j]
    assert run[:3] == TokenRun(("u", 0), 2, ("u", 0), 1) and run[:4] != run[1:5]
    with pytest.raises(IndexError):
        run[5]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 6), st.integers(0, 6), st.integers(0, 12),
                          st.booleans()), min_size=1, max_size=12), st.integers(0, 20))
def test_radix_tree_of_runs_is_the_tree_of_their_tuples(ops, evict):
    """Inserts and matches of prefixes of runs (three requests' keys) give the same counts, whole or spelled out."""
    trees = RadixCache(), RadixCache()
    for who, prompt, output, end, locked in ops:
        run = TokenRun(("u", who), prompt, 7, output)
        end = min(end, len(run))
        got = []
        for tree, key in zip(trees, (run, tuple(run))):
            n, node = tree.insert_and_match(key, end) if locked else (tree.insert(key, end), None)
            if node is not None:
                tree.lock(node)
            got.append((n, tree.match(key, end)[0], tree.evictable, tree.protected))
        assert got[0] == got[1]
    assert trees[0].evict(evict) == trees[1].evict(evict) and trees[0].size == trees[1].size


def _paths(tree: RadixCache) -> set:
    """Every node of the tree as the tokens from the root to its end, with its lock count."""
    out, stack = set(), [((), tree.root)]
    while stack:
        path, node = stack.pop()
        for child in node.children.values():
            p = path + tuple(child.key)
            out.add((p, child.lock))
            stack.append((p, child))
    return out


def _evict_from_all_leaves(tree: RadixCache, num_tokens: int) -> int:
    """The eviction as SGLang writes it: a heap of every evictable leaf, built at the call."""
    import heapq

    heap = [(n.last_access, i, n) for i, n in enumerate(tree.leaves()) if n.lock == 0]
    heapq.heapify(heap)
    freed, seq = 0, len(heap)
    while freed < num_tokens and heap:
        leaf = heapq.heappop(heap)[2]
        parent = leaf.parent
        del parent.children[leaf.key[0]]
        freed += len(leaf.key)
        if parent is not tree.root and not parent.children and parent.lock == 0:
            seq += 1
            heapq.heappush(heap, (parent.last_access, seq, parent))
    return freed


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["insert", "lock", "unlock", "match", "evict"]),
                          st.lists(st.integers(0, 2), min_size=1, max_size=6), st.integers(0, 12)),
                min_size=1, max_size=30))
def test_radix_eviction_heap_kept_across_calls_is_the_heap_of_all_leaves(ops):
    """The heap kept across evictions evicts what a heap of every evictable leaf, built at each call, would."""
    import copy

    tree, held = RadixCache(), []
    for op, key, n in ops:
        key = tuple(key)
        if op == "insert":
            tree.insert(key)
        elif op == "lock":
            node = tree.match(key)[1]
            tree.lock(node)
            held.append(node)
        elif op == "unlock" and held:
            tree.unlock(held.pop(n % len(held)))
        elif op == "match":
            tree.match(key)
        elif op == "evict":
            reference = copy.deepcopy(tree)
            expected = _evict_from_all_leaves(reference, n)
            assert tree.evict(n) == expected
            assert _paths(tree) == _paths(reference)
            held = [h for h in held if h.parent is not None]  # (a held node is locked: never evicted)


@settings(max_examples=100, deadline=None)
@given(workloads())
def test_requests_without_tokens_skip_the_tree_only_where_that_changes_nothing(case):
    """In an unlimited pool a request with no token ids keeps its tokens out of the tree (`private`): the same run
    as with every request in the tree, records and timelines alike (mixed with requests whose tokens can hit)."""
    from dataclasses import replace

    from servesim.engines.sglang.scheduler import SGLangScheduler

    reqs, sg = case
    sg = replace(sg, max_total_num_tokens=None)
    shortcut = simulate(reqs, EngineConfig(sglang=sg), "sglang", "unit", fast=False)
    original = SGLangScheduler.private
    SGLangScheduler.private = lambda self, s: False
    try:
        full = simulate(reqs, EngineConfig(sglang=sg), "sglang", "unit", fast=False)
    finally:
        SGLangScheduler.private = original
    assert shortcut.steps == full.steps and shortcut.requests == full.requests


@pytest.mark.parametrize("ratio, times", [(0.7, 0), (0.7, 1), (0.7, 599), (0.7, 600), (0.7, 5000), (0.5, 7),
                                          (0.05, 3), (1.0, 10)])
def test_decay_looked_up_on_the_path_is_the_step_by_step_decay(ratio, times):
    """The ratio after `times` decode steps, looked up on the path down from init, is the one-subtraction-a-step
    float (S5), off the path (after a retraction: 0.5, below the floor: 0.05) as well."""
    from servesim.engines.sglang.ratio import decay_path, decayed

    sg = SGLangConfig()
    expected = ratio
    for _ in range(times):
        expected = max(expected - sg.ratio_decay, sg.ratio_min)
    assert decayed(ratio, times, decay_path(sg)) == expected


def test_a_survivors_of_a_retraction_keep_the_retraction_order():
    # test_s6's case with A's prompt 6, B's 4, C's 7 and pool 73: 17 prompt tokens held, 56 free after step 1, 3 per
    # decode step from step 2, so 2 are free after step 19 and step 20 (needing 3) retracts. All have 19 outputs,
    # so the order by -prompt descending is B (-4), A (-6), C (-7); C goes, and the batch
    # then runs B before A (filter_batch(keep_indices=sorted_indices)), not in admission order A, B.
    _, t = steps(scenario([("A", 0, 6, 20), ("B", 1, 4, 20), ("C", 1, 7, 20)], max_total_num_tokens=73,
                          chunked_prefill_size=64))
    k = 20
    assert t[19]["free_tokens_after_step"] == 2 and not t[19]["retracted"]
    assert rows(t[k - 1]) == [("A", 1), ("B", 1), ("C", 1)]
    assert t[k]["retracted"] == ["C"] and rows(t[k]) == [("B", 1), ("A", 1)]


def _with_ignore_eos(sc, *ids):
    for r in sc["requests"]:
        r["ignore_eos"] = r["id"] in ids
    return sc


@pytest.mark.parametrize("a_ignores_eos", [True, False])
def test_d_a_running_ignore_eos_request_is_reserved_at_ratio_one(a_ignores_eos):
    # Pool 100. Step 0 prefills A (prompt 10, output 50): 90 free, A has 49 outputs to go. B (prompt 30, output 10,
    # not ignore_eos) arrives at step 1 and needs 30 + 10 + 1 (a page) = 41. A ignore_eos is reserved at ratio
    # 1.0: 90 - 49 = 41 left, not more than 41, so B waits (a decode step); otherwise A is reserved at
    # new_token_ratio (0.7, less the decay: about 34.3), 55.7 left, and B is admitted at once.
    sc = _with_ignore_eos(scenario([("A", 0, 10, 50), ("B", 1, 30, 10)], max_total_num_tokens=100,
                                   chunked_prefill_size=64), *(["A"] if a_ignores_eos else []))
    _, t = steps(sc)
    # (free after schedule: the decode step allocates A's next token; the prefill step B's 30)
    assert t[1]["free_tokens_after_schedule"] == (89 if a_ignores_eos else 60)
    assert (t[1]["forward_mode"], rows(t[1])) == (("decode", [("A", 1)]) if a_ignores_eos else ("prefill", [("B", 30)]))


def test_i_after_a_mixed_step_the_batch_is_not_full():
    # Mixed chunks, pool 60. Step 0 prefills A (prompt 8, output 20); B (prompt 8, output 4) arrives at 1 and is
    # admitted in a mixed step with A's decode; C (prompt 30, output 2) arrives at 1 too and needs 30 + 2 + 1 = 33
    # where 60 - 17 held - reserves leave less: refused, the batch is marked full. Rule I: the mixed step leaves
    # the running batch not full, so step 2 tries C again (refused again: the reason is memory, not a full batch).
    sc = scenario([("A", 0, 8, 20), ("B", 1, 8, 4), ("C", 1, 30, 2)], max_total_num_tokens=60,
                  chunked_prefill_size=64, enable_mixed_chunk=True)
    result, t = steps(sc)
    assert t[1]["forward_mode"] == "mixed" and rows(t[1]) == [("B", 8), ("A", 1)]
    reasons = {w.id: w.reason for w in result.steps[2].waiting}
    assert reasons["C"] is Reason.NO_TOKEN


def test_b_a_retraction_evicts_the_tree_until_20_tokens_per_request_left_are_free():
    # Rule A's case with the radix cache on (distinct prompts). Step 20 retracts C, which holds its 7 prompt
    # tokens (in the tree) and 18 written outputs: 2 + 18 = 20 free, its prompt now evictable. Rule B: with 2
    # requests left, release_req evicts until 20 x 2 = 40 are free: the gap of 20 takes all 7 evictable tokens,
    # 27 free, less A's and B's decode tokens: 25 after schedule (18 without the rule: the prompt kept cached).
    sc = scenario([("A", 0, 6, 20), ("B", 1, 4, 20), ("C", 1, 7, 20)], max_total_num_tokens=73,
                  chunked_prefill_size=64, radix_cache=True)
    for r, seg in zip(sc["requests"], ([[1, 6]], [[2, 4]], [[3, 7]]), strict=True):
        r["segments"] = seg
    _, t = steps(sc)
    assert t[19]["free_tokens_after_step"] == 2
    assert t[20]["retracted"] == ["C"] and t[20]["free_tokens_after_schedule"] == 25


def _priorities(sc, low_values_first=False, **priority):
    for r in sc["requests"]:
        if r["id"] in priority:
            r["priority"] = priority[r["id"]]
    sc["config"] |= {"enable_priority_scheduling": True, "schedule_low_priority_values_first": low_values_first}
    return sc


@pytest.mark.parametrize("enabled, order", [(True, ["y", "z", "x"]), (False, ["x", "y", "z"])])
def test_p1_the_waiting_queue_by_priority_then_arrival(enabled, order):
    # chunk budget 8 and prompts of 8: one admission a step. Priority on (larger values first): y and z (5,
    # in arrival order) before x (0); off: arrival order
    sc = scenario([("x", 0, 8, 4), ("y", 0, 8, 4), ("z", 0, 8, 4)])
    if enabled:
        sc = _priorities(sc, x=0, y=5, z=5)
    _, t = steps(sc)
    assert [rows(s)[0][0] for s in t[:3]] == order and all(rows(s)[0][1] == 8 for s in t[:3])


@pytest.mark.parametrize("b, preempted", [(20, True), (10, False)])
def test_p2_a_request_refused_a_row_preempts_one_more_than_the_threshold_below(b, preempted):
    # one row: A (priority 0, prompt 4, output 10) runs from step 0; B (prompt 6, output 3) arrives at step 1.
    # B at 20 is more than the threshold 10 above A: A goes back to the queue, B runs steps 1-3, A re-prefills
    # its 4 prompt tokens and 1 output at step 4. B at 10 (not more than 10 above) waits for A (done at step 9).
    sc = _priorities(scenario([("A", 0, 4, 10), ("B", 1, 6, 3)], max_running_requests=1, chunked_prefill_size=64),
                     A=0, B=b)
    result, t = steps(sc)
    if preempted:
        assert t[1]["preempted"] == ["A"] and rows(t[1]) == [("B", 6)] and not t[1]["retracted"]
        assert t[3]["finished"] == ["B"] and rows(t[4]) == [("A", 5)] and t[4]["scheduled"][0]["resumed"]
        assert result.request("A").num_preemptions == 1
    else:
        assert not any(s["preempted"] for s in t) and t[9]["finished"] == ["A"] and rows(t[10]) == [("B", 6)]


@pytest.mark.parametrize("max_running, preempted", [(16, []), (1, ["A"])])
def test_p2_only_a_refused_row_preempts_never_a_refused_memory(max_running, preempted):
    # pool 60: A (priority 0, prompt 4, output 40) holds 4 + 1 and reserves about 39 x 0.7; B (priority 20, prompt
    # 30, output 10) needs 30 + 10 + 1 > 55 - 27: refused for memory, and with rows free that never preempts.
    # With one row, B is refused the row first and preempts A (then fits).
    sc = _priorities(scenario([("A", 0, 4, 40), ("B", 1, 30, 10)], max_total_num_tokens=60,
                              max_running_requests=max_running, chunked_prefill_size=64), A=0, B=20)
    result, t = steps(sc)
    assert t[1]["preempted"] == preempted
    if not preempted:
        assert {w.id: w.reason for w in result.steps[1].waiting}["B"] is Reason.NO_TOKEN


@pytest.mark.parametrize("low_first, a, c, b, victim", [
    (False, 0, 0, 20, "C"),     # equals: the latest to join the queue goes
    (False, 0, 5, 20, "A"),     # the lowest priority goes
    (False, 12, 15, 20, None),  # neither more than 10 below B
    (True, 30, 25, 0, "A"),     # smaller values first: 30 is the lowest
])
def test_p3_the_victim_is_the_lowest_priority_latest_to_join(low_first, a, c, b, victim):
    # two rows, A and C (prompt 4, output 20) running from step 0; B (prompt 6, output 3) arrives at step 1
    sc = _priorities(scenario([("A", 0, 4, 20), ("C", 0, 4, 20), ("B", 1, 6, 3)], max_running_requests=2,
                              chunked_prefill_size=64), low_first, A=a, C=c, B=b)
    _, t = steps(sc)
    assert t[1]["preempted"] == ([victim] if victim else [])
    assert ("B", 6) in rows(t[1]) if victim else sorted(rows(t[1])) == [("A", 1), ("C", 1)]


def test_p3_a_victim_rejoins_the_queue_after_the_batch_as_a_new_entry():
    # two rows, A and C (priority 0, prompt 4, output 20) from step 0; B (20, prompt 6, output 3) and E (0, prompt
    # 6, output 3) at step 1: B preempts C (the latest), E is refused a row (no victim more than 10 below it), then C
    # rejoins the queue behind E. B is done at step 3; E takes its row at step 4 and is done at 6; C re-prefills its
    # 4 prompt tokens and 1 output at step 7 (had it kept its first entry, it would have gone before E at step 4).
    sc = _priorities(scenario([("A", 0, 4, 20), ("C", 0, 4, 20), ("B", 1, 6, 3), ("E", 1, 6, 3)],
                              max_running_requests=2, chunked_prefill_size=64), A=0, C=0, B=20, E=0)
    _, t = steps(sc)
    assert t[1]["preempted"] == ["C"] and t[3]["finished"] == ["B"]
    assert rows(t[4]) == [("E", 6)] and t[6]["finished"] == ["E"]
    assert rows(t[7]) == [("C", 5)] and t[7]["scheduled"][0]["resumed"]


def _loop(sc, overlap):
    sc["config"]["overlap"] = overlap
    return steps(sc)


@pytest.mark.parametrize("overlap", [False, True])
def test_o1_o2_the_overlap_loop_sees_a_finish_a_step_late(overlap):
    # pool 30: A (prompt 4, output 2) and C (4, 10) prefill at step 0 (22 free); B (12, 4) arrives at step 1 and
    # needs 12 + 4 + 1 = 17. Non-overlap: A's last token at step 1 frees its 5 tokens at once (25 free), and step 2
    # admits B (25 - C's 8 left x ~0.7 > 17). Overlap: at step 2's schedule A's last token is still in flight, so
    # A holds its KV (20 free) and B waits (20 - reserves < 17); step 2 decodes C alone (O2: a request finishing in
    # flight leaves the decode batch); A's KV comes back after it (24 free after the step) and B goes in at step 3.
    # The loop ends with one iteration that only processes the last step's result.
    sc = scenario([("A", 0, 4, 2), ("C", 0, 4, 10), ("B", 1, 12, 4)], max_total_num_tokens=30, chunked_prefill_size=64)
    result, t = _loop(sc, overlap)
    assert t[1]["finished"] == ["A"] and rows(t[1]) == [("A", 1), ("C", 1)]
    if overlap:
        assert t[1]["free_tokens_after_step"] == 20  # (A's KV still held)
        assert rows(t[2]) == [("C", 1)] and t[2]["free_tokens_after_step"] == 24 and rows(t[3]) == [("B", 12)]
        assert result.idle_iterations == 1
    else:
        assert t[1]["free_tokens_after_step"] == 25 and rows(t[2]) == [("B", 12)] and result.idle_iterations == 0


def test_o3_no_retraction_while_a_finishing_request_will_free_memory():
    # pool 23, conservativeness 0.1: C and D (4, 6) prefill at step 0 (15 free), A (8, 3) at step 1 (7 free);
    # steps 2 and 3 decode all three (1 free after step 3) and A's token at step 3 ends it. At the next iteration
    # C and D need 2 slots, 1 is free, and A is finishing in flight: instead of retracting D the iteration runs
    # no forward (and the ratio does not decay), A's 10 tokens come back, and step 4 decodes C and D
    # (11 - 2 = 9 free). Idle iterations: that one and the last (processing step 6's result).
    sc = scenario([("C", 0, 4, 6), ("D", 0, 4, 6), ("A", 1, 8, 3)], max_total_num_tokens=23, chunked_prefill_size=64,
                  schedule_conservativeness=0.1)
    result, t = _loop(sc, True)
    assert t[3]["finished"] == ["A"] and t[3]["free_tokens_after_step"] == 1
    assert not any(s["retracted"] for s in t) and result.idle_iterations == 2
    assert rows(t[4]) == [("C", 1), ("D", 1)] and t[4]["free_tokens_after_schedule"] == 9
    assert t[4]["new_token_ratio_at_schedule"] == t[3]["new_token_ratio_at_schedule"]


@pytest.mark.parametrize("overlap, outputs", [(False, 124), (True, 123)])
def test_o4_o5_a_retraction_reads_output_ids_without_the_inflight_token(overlap, outputs):
    # pool 256, conservativeness 0.3: A (4, 200) at step 0, B (6, 200) at step 1 (C waits for memory). A sits out
    # step 1, so after step 124 each has 1 + 123 = 124 outputs; step 125 retracts B (equal outputs, longer prompt).
    # Under the overlap loop step 124's token is in flight: output_ids hold 123. O5: the ratio becomes
    # (A's outputs + 20 x 1) / (200 + 1); O4: B's in-flight token is dropped, so it re-prefills 6 + 123 = 129
    # tokens in chunks of 64 (64, 64, 1) rather than 6 + 124 = 130, and finishes a step later, with 200 outputs.
    sc = scenario([("A", 0, 4, 200), ("B", 1, 6, 200), ("C", 1, 6, 200)], max_total_num_tokens=256,
                  chunked_prefill_size=64, schedule_conservativeness=0.3)
    result, t = _loop(sc, overlap)
    assert t[125]["retracted"] == ["B"] and rows(t[125]) == [("A", 1)]
    assert t[125]["new_token_ratio_at_schedule"] == pytest.approx((outputs + 20) / 201, abs=1e-12)
    assert [rows(s) for s in t[401:404]] == [[("B", 64)], [("B", 64)], [("B", 6 + outputs - 128)]]
    assert t[477 + overlap + 1]["finished"] == ["B"] and result.request("B").num_tokens == 200


@pytest.mark.parametrize("overlap, admitted", [(False, ["B", "C"]), (True, ["B"])])
def test_o1_an_admission_reserves_the_inflight_token_as_still_to_come(overlap, admitted):
    # test_s6's case (pool 72): at step 1 A's first token (from step 0) is in flight under the overlap loop, so
    # its reserve is 20 x 0.7 = 14 rather than 19 x 0.7 = 13.3: after B, 68 - 14 - 27 = 27 is not more than C's 27,
    # and C waits (non-overlap: 27.7 > 27, both go in)
    sc = scenario([("A", 0, 4, 20), ("B", 1, 6, 20), ("C", 1, 6, 20)], max_total_num_tokens=72, chunked_prefill_size=64)
    _, t = _loop(sc, overlap)
    assert [i for i, _ in rows(t[1])] == admitted


def test_e_a_chunks_duplicates_are_freed_at_the_next_schedule():
    # radix cache on, pool 100, chunks of 24: A and B share a 16-token prompt. Step 0 runs A's 16 and B's first 8
    # (76 free after schedule). A's tokens enter the tree after the step; B's chunk would find its 8 there, but
    # it enters the tree at the next iteration's stash_chunked_request (rule E), so its 8 duplicates still count
    # as used after step 0: 76 (84 if freed at once). Step 1 frees them, then runs B's last 8: 84 - 8 = 76.
    sc = scenario([("A", 0, 16, 4, [[1, 16]]), ("B", 0, 16, 4, [[1, 16]])], max_total_num_tokens=100,
                  chunked_prefill_size=24, radix_cache=True)
    _, t = steps(sc)
    assert rows(t[0]) == [("A", 16), ("B", 8)] and t[0]["free_tokens_after_step"] == 76
    assert rows(t[1]) == [("B", 8)] and t[1]["free_tokens_after_schedule"] == 76


@pytest.mark.parametrize("page, both", [(16, False), (1, True)])
def test_f_an_admission_is_charged_its_extra_page_too(page, both):
    # rule F: an admission's budget is charged ceil_page(extend) + page_size + its output (_update_prefill_budget,
    # prefill_budget.py 156-168), not only checked against it. Pool 96, page 16, radix off: A (16 + 16) needs
    # 16 + 16 + 16 = 48 < 96 and is charged 48, so B (the same) needs 48 with 96 - 48 = 48 left and waits (charged
    # 32 it would go in: 64 > 48). At page 1 each is charged 16 + 16 + 1 = 33 (96 - 33 = 63 > 33): both go in.
    sc = scenario([("A", 0, 16, 16), ("B", 0, 16, 16)], max_total_num_tokens=96, page_size=page,
                  chunked_prefill_size=512)
    _, t = steps(sc)
    assert rows(t[0]) == ([("A", 16), ("B", 16)] if both else [("A", 16)])


@pytest.mark.parametrize("arrival, hits", [(1, (8, 0)), (33, (0, 0))])
def test_h_every_32nd_attempt_touches_the_waiting_prefixes_head_last(arrival, hits):
    # rule H (_touch_waiting_prefixes, schedule_policy.py 282-302): fcfs matches nobody while it sorts, so every
    # 32nd prefill attempt (the first one included) walks the first 128 waiting requests' keys, the head last.
    # Pool 280, chunks of 8: P1's prompt X (8 tokens) is cached at step 0, P2's Y at step 1, so X is the older.
    # L (272) takes the whole chunk from step 2 to 35, each step an attempt (step k is attempt k), and B (a prompt
    # of its own) is refused ahead of W1 (X + 2) and W2 (Y + 2): neither is tried, so nobody else reads X or Y.
    # L fills the 264 free tokens by step 34; its last chunk evicts the least recently used 8-token leaf.
    # Waiting since step 1, W2 then W1 are walked at attempt 32 (step 32): X is now the newer, Y goes, and W1 hits
    # X's 8 tokens at step 36 (head first, X would go). Arriving at step 33, after that walk (the next is at
    # attempt 64), X is still the older and goes at step 35: W1 hits nothing (it would hit 8 if every attempt
    # walked the queue); Y goes at step 36 for B's 4 and W1's first 4 (W2 not tried: the chunk is spent).
    sc = scenario([("P1", 0, 8, 1, [[1, 8]]), ("P2", 0, 8, 1, [[2, 8]]), ("L", 1, 272, 1, [[4, 272]]),
                   ("B", arrival, 4, 1, [[5, 4]]), ("W1", arrival, 10, 1, [[1, 8], [3, 2]]),
                   ("W2", arrival, 10, 1, [[2, 8], [6, 2]])],
                  max_total_num_tokens=280, chunked_prefill_size=8, radix_cache=True)
    result, t = steps(sc)
    assert [rows(t[k]) for k in (0, 1, 2, 35)] == [[("P1", 8)], [("P2", 8)], [("L", 8)], [("L", 8)]]
    assert t[34]["free_tokens_after_step"] == 0 and t[35]["free_tokens_after_step"] == 0
    assert (result.request("W1").num_cached_tokens, result.request("W2").num_cached_tokens) == hits


def test_h_a_finished_requests_leaf_is_split_at_its_prompt():
    # rule H (checkpoint_into_tree, unified_radix_cache.py 1255-1283): a request's prompt and outputs enter the
    # tree, then its prompt again, so its outputs are a leaf of their own and can be evicted first. Rule B's
    # case: C is retracted at step 20 (its prompt evicted), re-prefills prompt + 19 outputs as one 26-token node
    # at step 21 (evicting B's 19 outputs) and finishes there; A's 6 + 19 and B's 4 are left, 18 free. E (57
    # tokens) evicts those 29, then C's 19 outputs only: 18 + 48 - 57 = 9 free, and D (C's 7-token prompt + 2)
    # hits 7.
    # Without the split C's 26 go together: 16 free, and D hits nothing.
    sc = scenario([("A", 0, 6, 20), ("B", 1, 4, 20), ("C", 1, 7, 20), ("E", 60, 57, 1), ("D", 70, 9, 1)],
                  max_total_num_tokens=73, chunked_prefill_size=64, radix_cache=True)
    for r, seg in zip(sc["requests"], ([[1, 6]], [[2, 4]], [[3, 7]], [[5, 57]], [[3, 7], [4, 2]]), strict=True):
        r["segments"] = seg
    result, t = steps(sc)
    assert t[20]["retracted"] == ["C"] and rows(t[21]) == [("C", 26)] and t[21]["free_tokens_after_step"] == 18
    assert rows(t[22]) == [("E", 57)] and t[22]["free_tokens_after_step"] == 9
    assert rows(t[23]) == [("D", 2)] and result.request("D").num_cached_tokens == 7


def test_h_lpm_sorts_by_the_match_capped_at_all_but_the_last_token():
    # lpm sorts by num_matched_prefix_tokens, the match capped at len - 1 (_compute_max_prefix_len: the last token
    # is computed for its logits). R0's 8-token prompt X is cached at step 0. R1 is X itself: 8 matched, 7 counted;
    # R2 is X and one token more: 8 counted. R2 goes first though it came later (uncapped, a tie keeps R1 first).
    sc = scenario([("R0", 0, 8, 1, [[1, 8]]), ("R1", 1, 8, 1, [[1, 8]]), ("R2", 1, 9, 1, [[1, 8], [3, 1]])],
                  policy="lpm", radix_cache=True)
    _, t = steps(sc)
    assert rows(t[1]) == [("R2", 1), ("R1", 1)]


def test_h_lpm_walks_the_whole_key_so_a_node_is_not_split_before_its_last_token():
    # lpm matches each waiting request's whole key (match_kv_cache with no cap): R1 (X itself, 8 tokens) touches
    # X's node without splitting it. Pool 31: X cached at step 0 (23 free), L (24) in chunks of 8 from step 1
    # (15, then 7 free); its last chunk needs 8 with 7 free and evicts the only unlocked leaf, X, whole. R1 hits
    # nothing at step 4. (Walking all but its last token would split X at 7: the 1-token leaf would go, and R1
    # would hit 7.)
    sc = scenario([("R0", 0, 8, 1, [[1, 8]]), ("L", 1, 24, 1, [[4, 24]]), ("R1", 2, 8, 1, [[1, 8]])],
                  max_total_num_tokens=31, policy="lpm", radix_cache=True)
    result, t = steps(sc)
    assert [rows(t[k]) for k in (1, 2, 3)] == [[("L", 8)]] * 3
    assert [t[k]["free_tokens_after_step"] for k in (0, 1, 2, 3)] == [23, 15, 7, 7]
    assert rows(t[4]) == [("R1", 8)] and result.request("R1").num_cached_tokens == 0


def test_p3_no_preemption_for_a_candidate_the_input_budget_refuses():
    # found by Hypothesis (a livelock): chunked prefill off, max_prefill_tokens 16, lpm. r3 (33 tokens, priority
    # 20, a higher one with low values first) sits behind a request lpm puts first; it preempted a priority-40
    # request for a row, was then refused for the input budget (the batch started), and the row went to the other
    # priority-40 request, which r3 preempted at the next attempt: r2 and r9 took turns at a one-token prefill and
    # nobody decoded. servesim does not preempt for a candidate add_one_req would refuse whatever the memory.
    spec = [(6, 12, 11, 20, 12, False), (2, 8, 1, 0, 8, False), (3, 7, 16, 40, 0, False), (6, 33, 18, 20, 0, True),
            (1, 12, 14, 40, 12, True), (0, 12, 11, 20, 12, True), (4, 8, 7, 20, 8, True), (4, 40, 24, 5, 0, False),
            (0, 8, 29, 40, 8, True), (1, 8, 21, 40, 8, False), (5, 12, 28, 5, -12, False)]
    reqs = []
    for i, (t, p, o, prio, shared, eos) in enumerate(spec):
        ids = ((3,) * 12 if shared < 0 else (1,) * min(shared, 8) + (2,) * max(shared - 8, 0)) if shared else None
        reqs.append(Request(f"r{i}", float(t), p, o, priority=prio, hash_ids=ids, hash_block_size=1 if ids else None,
                            ignore_eos=eos))
    sg = SGLangConfig(max_total_num_tokens=299, chunked_prefill_size=None, max_prefill_tokens=16,
                      max_running_requests=6, schedule_policy="lpm", random_seed=3, enable_priority_scheduling=True,
                      schedule_low_priority_values_first=True)
    result = simulate(reqs, EngineConfig(sglang=sg), "sglang", "unit", check_invariants=True)
    assert all(r.finish_time is not None and r.num_tokens == r.output_len for r in result.requests)
    assert len(result.steps) < 100  # (49: before, the two took turns for ever)
