"""vLLM v0's default scheduler (`vllm-v0`): one tiny scenario per rule, numbers by hand on the unit step clock."""

import pytest
from helpers import reqs, run, tokens
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.analysis.metrics import worst_gap
from servesim.engine import simulate
from servesim.engine.records import Reason
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.workloads import load_workload

MS = 1e-3


def reasons(result, step):
    return {w.id: w.reason for w in result.steps[step].waiting}


def test_a_prompt_arriving_mid_decode_gets_a_prefill_step_of_its_own():
    # step 0: A's prompt alone; step 1: B arrived, so a prefill step (A stalls); step 2: both decode (B's last);
    # step 3: A's third and last token
    r = run(reqs(("A", 0, 4, 3), ("B", 1, 4, 2)), sched="vllm-v0")
    assert tokens(r) == [[("A", 4)], [("B", 4)], [("A", 1), ("B", 1)], [("A", 1)]]


def test_admission_stops_at_the_first_prompt_over_the_budget_left():
    # budget 8: A 4 + B 3 = 7, C's 2 > 1 left; D (1 token) would fit but waits behind C (no skipping).
    # step 1: C and D are admitted (a prefill step: A does not decode); step 2: A's last token
    r = run(reqs(("A", 0, 4, 2), ("B", 0, 3, 1), ("C", 0, 2, 1), ("D", 0, 1, 1)), sched="vllm-v0",
            max_num_batched_tokens=8)
    assert tokens(r) == [[("A", 4), ("B", 3)], [("C", 2), ("D", 1)], [("A", 1)]]
    assert reasons(r, 0) == {"C": Reason.TOKEN_BUDGET, "D": Reason.BLOCKED_BEHIND_HEAD}


def test_max_num_seqs_makes_the_step_a_decode_step():
    # 2 seats: C waits while A and B decode (steps 1-2); A and B finish in step 2, C's prompt runs in step 3
    r = run(reqs(("A", 0, 2, 3), ("B", 0, 2, 3), ("C", 0, 2, 1)), sched="vllm-v0", max_num_seqs=2)
    assert tokens(r) == [[("A", 2), ("B", 2)], [("A", 1), ("B", 1)], [("A", 1), ("B", 1)], [("C", 2)]]
    assert reasons(r, 0) == {"C": Reason.MAX_NUM_SEQS}
    (w,) = r.steps[1].waiting
    assert w.reason is Reason.MAX_NUM_SEQS and w.detail.startswith("prefill could not run")


def test_the_watermark_holds_back_a_prompt_that_would_fill_the_pool():
    # block 4, 11 blocks (10 usable), watermark 0.1 -> 1 block once anything runs. A takes 4 (nothing ran yet);
    # B needs 6 of the 6 free, leaving 0 < 1: it waits; A decodes (its 5th block) and finishes; then B
    cfg = dict(sched="vllm-v0", block_size=4, num_gpu_blocks=11)
    r = run(reqs(("A", 0, 16, 2), ("B", 0, 24, 1)), watermark=0.1, **cfg)
    assert tokens(r) == [[("A", 16)], [("A", 1)], [("B", 24)]]
    (w,) = r.steps[0].waiting
    assert (w.reason, w.detail) == (Reason.KV_BLOCKS, "needs 6 blocks + 1 watermark, 6 free")
    assert r.steps[1].waiting[0].detail == "prefill could not run: needs 6 blocks + 1 watermark, 6 free"
    assert tokens(run(reqs(("A", 0, 16, 2), ("B", 0, 24, 1)), **cfg))[0] == [("A", 16), ("B", 24)]  # no watermark


def pair(**cfg):
    # block 4, 5 blocks (4 usable): two 8-token prompts fill the pool; A's first decode needs a 3rd block
    return run(reqs(("A", 0, 8, 5), ("B", 0, 8, 5)), sched="vllm-v0", block_size=4, num_gpu_blocks=5, **cfg)


def test_a_decode_short_of_a_block_preempts_the_newest_and_it_recomputes():
    r = pair()
    # step 1: B (newest) preempted, A takes 1 of its 2 blocks; steps 2-4: B needs 3 blocks (9 tokens), 1 free;
    # A finishes in step 4 (5 outputs); step 5: B recomputes prompt + its 1 output = 9 tokens, then 3 decodes
    assert tokens(r) == [[("A", 8), ("B", 8)], [("A", 1)], [("A", 1)], [("A", 1)], [("A", 1)],
                         [("B", 9)], [("B", 1)], [("B", 1)], [("B", 1)]]
    (p,) = r.preemptions
    assert (p.step, p.id, p.mode, p.tokens_discarded, p.blocks_freed) == (1, "B", "recompute", 8, 2)
    assert r.steps[1].free_blocks_after_schedule == 1
    w = r.steps[2].waiting[0]
    assert (w.reason, w.detail) == (Reason.KV_BLOCKS, "prefill could not run: needs 3 blocks + 0 watermark, 1 free")
    e = r.steps[5].scheduled[0]
    assert (e.resumed, e.kind.value, e.samples_token) == (True, "prefill", True)
    assert len(r.request("B").token_times) == 5


def test_swap_moves_the_victim_out_and_back_in_as_a_decode():
    r = pair(preemption_mode="swap")
    # step 1: B's 2 blocks go to the host; steps 2-4: B needs 3 blocks (9 tokens) and 1 is free; A finishes in
    # step 4; step 5: B swaps back in (2 blocks) and decodes, nothing recomputed
    assert tokens(r) == [[("A", 8), ("B", 8)], [("A", 1)], [("A", 1)], [("A", 1)], [("A", 1)],
                         [("B", 1)], [("B", 1)], [("B", 1)], [("B", 1)]]
    assert (r.steps[1].swap_out_blocks, r.steps[5].swap_in_blocks) == (2, 2)
    assert reasons(r, 1) == {"B": Reason.ADMISSION_FROZEN}
    assert reasons(r, 2) == {"B": Reason.KV_BLOCKS}
    assert r.steps[5].scheduled[0].kind.value == "decode" and r.recomputed_tokens == 0


def test_swapped_requests_block_new_prefills():
    # as above, with C arriving at step 2: while B is swapped no prefill is tried, so C waits for B
    r = run(reqs(("A", 0, 8, 5), ("B", 0, 8, 5), ("C", 2, 1, 1)), sched="vllm-v0", block_size=4,
            num_gpu_blocks=5, preemption_mode="swap")
    assert reasons(r, 2) == {"B": Reason.KV_BLOCKS, "C": Reason.BLOCKED_BEHIND_HEAD}
    assert tokens(r)[5] == [("B", 1)] and tokens(r)[6] == [("C", 1)]  # B back in step 5; C's prompt in step 6


def test_the_budget_defaults_to_max_of_max_model_len_and_2048():
    assert run(reqs(("a", 0, 3000, 2)), sched="vllm-v0").config.max_num_batched_tokens == 3002
    assert run(reqs(("a", 0, 30, 2)), sched="vllm-v0").config.max_num_batched_tokens == 2048


def test_seed_the_decodes_stall_for_the_whole_prompt():
    # toy cost: 1 ms a decode, 0.1 ms a prefill token. Step 0: 4 x 32 prompt tokens, 12.8 ms; steps 1-2: 4 decodes,
    # 4 ms each, ending at 20.8 ms. L (arrived at 20 ms) then gets a prefill step alone: 2000 x 0.1 = 200 ms, ending
    # at 220.8 ms with L's first token: TTFT 200.8 ms. Step 4 decodes all 5 (5 ms, to 225.8 ms): each d's gap is
    # 225.8 - 20.8 = 205 ms.
    r = simulate(load_workload("seed"), EngineConfig(max_num_seqs=8), "vllm-v0", "toy", fast=False)
    t = tokens(r)
    assert t[3] == [("L", 2000)]
    assert r.steps[3].start_time == pytest.approx(20.8 * MS)
    assert r.steps[3].duration == pytest.approx(200 * MS)
    assert r.request("L").ttft == pytest.approx(200.8 * MS)
    assert t[4] == [(f"d{i}", 1) for i in range(4)] + [("L", 1)]
    assert worst_gap(r).seconds == pytest.approx(205 * MS)


# -- fast vs step by step ---------------------------------------------------------------------------------------

@st.composite
def workloads(draw):
    n = draw(st.integers(1, 8))
    reqs_ = [Request(f"r{i}", draw(st.sampled_from([0.0, 0.001, 0.005, 0.02, 0.05])), draw(st.integers(1, 40)),
                     draw(st.integers(1, 30))) for i in range(n)]
    cfg = EngineConfig(max_num_seqs=draw(st.integers(1, 4)), block_size=4,
                       num_gpu_blocks=(blocks := draw(st.sampled_from([None, 20, 30, 60]))),
                       watermark=draw(st.sampled_from([0.0, 0.1])) if blocks else 0.0,  # (refused with no pool)
                       preemption_mode=(mode := draw(st.sampled_from(["recompute", "swap"]))),
                       num_cpu_blocks=draw(st.sampled_from([None, 8])) if mode == "swap" else None)
    return reqs_, cfg


SETTINGS = settings(max_examples=150, deadline=None)


@SETTINGS
@given(workloads())
def test_fast_path_gives_what_step_by_step_gives(w):
    # the fast path brings its decode cohort up to date while a request waits (Scheduler.decodes_ahead = False)
    requests, cfg = w
    fast = simulate(requests, cfg, "vllm-v0", "toy", record="full", fast=True)
    slow = simulate(requests, cfg, "vllm-v0", "toy", record="full", fast=False)
    assert [x.id for x in fast.requests] == [x.id for x in slow.requests]
    for a, b in zip(fast.requests, slow.requests, strict=True):
        assert a.token_times == pytest.approx(b.token_times, rel=1e-12, abs=1e-12)
        assert a.num_preemptions == b.num_preemptions
    assert [tuple(s.scheduled) for s in fast.steps] == [tuple(s.scheduled) for s in slow.steps]
    assert [s.waiting for s in fast.steps] == [s.waiting for s in slow.steps]
    assert fast.preemptions == slow.preemptions


@SETTINGS
@given(workloads())
def test_invariants_and_one_phase_per_step(w):
    requests, cfg = w
    r = simulate(requests, cfg, "vllm-v0", "toy", check_invariants=True)
    for s in r.steps:  # a step with a prompt runs no decode
        kinds = {e.kind.value for e in s.scheduled}
        assert kinds != {"prefill", "decode"}, f"step {s.step} mixes prefills and decodes"
    assert all(len(x.token_times) == x.output_len for x in r.requests)
