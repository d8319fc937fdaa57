"""Server-side breakdowns and overload detection, by hand (issue 6)."""

import numpy as np
import pytest
from helpers import reqs, run

from servesim.analysis.breakdown import Bound, bound_by, request_breakdown, server_metrics, step_arrays
from servesim.analysis.metrics import token_gaps
from servesim.analysis.overload import detect_overload, trend
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.workloads import load_workload

MS = 1e-3


def seed(policy, **cfg):
    return simulate(load_workload("seed"), EngineConfig(max_num_seqs=8, **cfg), policy, "toy")


def test_seed_vllm_queue_and_prefill_time():
    rb = request_breakdown(seed("vllm", max_num_batched_tokens=256))
    assert rb.ids[4] == "L"
    # L arrives at 20 ms during step 2 (16.8-20.8 ms), is first scheduled at 20.8, first token at 252.8
    assert rb.queue.tolist() == pytest.approx([0, 0, 0, 0, 0.8 * MS])
    assert rb.prefill.tolist() == pytest.approx([12.8 * MS] * 4 + [232 * MS])
    assert rb.num_prefill_chunks.tolist() == [1, 1, 1, 1, 8]
    assert rb.preempted.tolist() == [0.0] * 5


def test_seed_vllm_steps_bound_by_the_token_budget_while_l_is_chunked():
    r = seed("vllm", max_num_batched_tokens=256)
    bounds = [bound_by(s) for s in r.steps]
    assert bounds[3:10] == [Bound.TOKEN_BUDGET] * 7  # 4 decodes + 252 of L = 256: the chunk was cut
    assert bounds[10] is Bound.NOTHING  # L's last 236 tokens fit
    m = server_metrics(r)
    assert m.bound == {Bound.NOTHING: 33, Bound.TOKEN_BUDGET: 7}
    # batch sizes: 4 in steps 0-2, 5 in steps 3-14, 4 in steps 15-39
    assert m.batch_size.mean == pytest.approx((3 * 4 + 12 * 5 + 25 * 4) / 40)
    assert m.tokens_per_step.mean == pytest.approx(2288 / 40)
    assert m.slot_utilization == pytest.approx(172 / (8 * 40))  # 3 x 4 + 12 x 5 + 25 x 4 busy of 8 seats x 40 steps
    assert m.kv_used_mean is None  # unlimited KV


def test_static_holds_l_behind_a_closed_batch():
    r = seed("static")
    m = server_metrics(r)
    assert m.bound[Bound.BATCH_CLOSED] == 37
    assert request_breakdown(r).queue[4] == pytest.approx(148.8 * MS)


def preempting():
    # 3 usable blocks of 16: a and b take one block each; at 17 tokens both need a second, b (last) is preempted
    return run(reqs(("a", 0, 16, 20), ("b", 0, 16, 20)), block_size=16, num_gpu_blocks=4)


def test_preemption_time_and_recompute_are_measured():
    r = preempting()
    assert [(p.step, p.id, p.tokens_discarded) for p in r.preemptions] == [(1, "b", 16)]
    rb = request_breakdown(r)
    # b leaves at the start of step 1 (1 s) and comes back at the start of step 20 (20 s)
    assert rb.preempted.tolist() == pytest.approx([0.0, 19.0])
    assert rb.num_preemptions.tolist() == [0, 1]
    assert rb.recomputed_tokens.tolist() == [0, 16]
    assert rb.num_prefill_chunks.tolist() == [1, 2]  # b's prompt, then its recomputation
    m = server_metrics(r)
    assert (m.preemptions, m.preempted_requests, m.recomputed_tokens) == (1, 1, 16)
    assert m.recompute_tax == pytest.approx(16 / r.tokens_processed)
    assert m.bound[Bound.KV_BLOCKS] == 19  # steps 1-19: b preempted, then held for blocks


def test_kv_utilization_is_used_over_usable_blocks():
    sa = step_arrays(preempting())
    assert sa.kv_used[0] == pytest.approx(2 / 3)  # 2 of 3 usable blocks after step 0's allocation
    # a holds 16 + k tokens in step k: its 33rd (step 17) takes the third block, until a finishes in step 19; b
    # resumes in step 20 with 17 tokens and holds 17 + (k - 20): its 33rd (step 36) takes it until step 38, its last
    assert sa.kv_used.tolist() == pytest.approx([2 / 3] * 17 + [1.0] * 3 + [2 / 3] * 16 + [1.0] * 3)


def test_token_gaps_name_the_steps_they_spanned():
    gaps = token_gaps(preempting(), "b")
    assert (gaps[0].seconds, gaps[0].token, gaps[0].first_step, gaps[0].last_step) == (19.0 + 1.0, 2, 1, 20)


def poisson_free(gap_s, n=200):
    # 100-token prompts cost 10 ms of prefill each (toy): capacity about 100 req/s under any budget
    return simulate([Request(f"r{i}", i * gap_s, 100, 2) for i in range(n)],
                    EngineConfig(max_num_batched_tokens=256), "vllm", "toy")


def test_arrivals_faster_than_service_are_overloaded_with_evidence():
    o = detect_overload(poisson_free(0.001))
    assert o.overloaded
    assert o.arrival_rate == pytest.approx(1000)  # 199 intervals in 0.199 s
    # a request is 11 ms of toy work (100 prompt tokens x 0.1 ms + 1 decode x 1 ms) and steps run one at a time,
    # so at most 1 / 0.011 s = 90.9 req/s can complete
    assert o.completion_rate <= 1 / 0.011
    assert o.queue_end > o.queue_start and o.queue_slope > 0
    assert o.sentence().startswith("OVERLOADED: requests arrived at 1000 req/s")


def test_queue_trend_is_the_least_squares_slope():
    # the closed form against numpy's fit: a line with noise, and a step-weighted queue that barely moves
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(3000.0, 3600.0, 5000))
    for q in (2.5 * t + rng.normal(0, 40, t.size), np.round(rng.uniform(0, 3, t.size))):
        assert trend(t, q) == pytest.approx(np.polyfit(t, q, 1)[0], rel=1e-9, abs=1e-15)


def test_arrivals_slower_than_service_are_stable():
    o = detect_overload(poisson_free(0.05))
    assert not o.overloaded
    assert o.arrival_rate == pytest.approx(20)
    assert o.queue_end == 0
    assert o.sentence().startswith("Stable")


def test_a_closed_batch_is_never_called_overloaded():
    assert not detect_overload(preempting()).overloaded


def stable_then_burst():
    # 100 requests 50 ms apart (stable: 10 ms of prefill each), then 200 requests 1 ms apart from 5 s
    return simulate([Request(f"s{i}", i * 0.05, 100, 2) for i in range(100)]
                    + [Request(f"b{i}", 5.0 + i * 0.001, 100, 2) for i in range(200)],
                    EngineConfig(max_num_batched_tokens=256), "vllm", "toy")


def test_cooldown_leaves_a_final_burst_out_of_the_verdict():
    r = stable_then_burst()
    whole = detect_overload(r)
    assert whole.overloaded
    # The burst: b0 alone (10 ms), then 256-token steps of 1, 2, 3, 2, 3, ... decodes beside 255, 254, 253, ...
    # prompt tokens: 26.5, 27.4, 28.3, 27.4, 28.3, ... ms. The window's last step (the 8th of the burst) starts at
    # 5 + 0.010 + 0.0265 + 3 x 0.0274 + 2 x 0.0283 = 5.1753 s: b0-b175 have arrived (one per ms), b0-b18 have
    # started, so 176 - 19 = 157 wait; the queue started the window empty. 157 >= 10 % of the 300 arrivals.
    assert whole.arrivals == 300 and (whole.queue_start, whole.queue_end) == (0, 157)
    calm = detect_overload(r, cooldown=0.25)  # arrivals up to 5.199 - 0.25 s, as the metrics keep them: s0-s98
    assert not calm.overloaded
    assert calm.arrivals == 99 and calm.arrival_rate == pytest.approx(20)  # 98 intervals in 4.9 s
    assert calm.queue_end == 0
    burst = detect_overload(r, warmup=4.99)  # the burst alone: 200 arrivals at 1000 req/s
    assert burst.overloaded and burst.arrival_rate == pytest.approx(1000)


def test_too_few_arrivals_are_not_called_stable():
    o = detect_overload(seed("vllm", max_num_batched_tokens=256))
    assert not o.overloaded
    assert o.sentence() == "Too few arrivals to judge the queue's stability (5 over 0-20 ms; it takes 10)."


def test_a_modest_overload_is_called_overloaded():
    # 100-token prompts with 1 output token: 10 ms of toy prefill each, so at most 100 req/s complete. At 112 req/s
    # (12 % over), at least 1000 - 100 x 8.92 = 108 requests arrive in the 8.92 s window and do not complete; the
    # queue holds most of them, so the run is OVERLOADED though it grew by under 10 % of the arrivals (the rule
    # before, which called it stable)
    reqs = [Request(f"r{i}", i / 112, 100, 1) for i in range(1000)]
    o = detect_overload(simulate(reqs, EngineConfig(), "vllm", "toy", record="summary"))
    assert o.overloaded and o.arrival_rate == pytest.approx(112) and o.completion_rate <= 100
    assert o.queue_start == 0 and 54 <= o.queue_end < 100
