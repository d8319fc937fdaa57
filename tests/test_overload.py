"""The OVERLOADED verdict when the backlog sits in the running set (issue: saturated runs read as stable), by hand.

The toy engine of known capacity: every request has a 10-token prompt and 10 output tokens. The toy cost is 1 ms per
decoding request plus 0.1 ms per prefill token, so a request's prefill step costs 1 ms (and yields its first token)
and its 9 decodes 1 ms each: 10 ms of work, and steps run one at a time, so at most 1 / 10 ms = 100 req/s complete.
With 1024 seats, a 16384-token budget and unlimited KV every arrival is admitted at once: the waiting queue (the old
rule's only evidence) stays empty and the backlog sits in the running set. In every step each running request
costs 1 ms (a decode, or its 10-token prefill), so a step lasts its batch in ms: TPOT is the batch.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import servesim
from servesim import EngineConfig, Request, simulate
from servesim.analysis.breakdown import step_log
from servesim.analysis.overload import detect_overload

SEATS = EngineConfig(max_num_seqs=1024, max_num_batched_tokens=16384)
CAPACITY = 100.0  # req/s, the toy engine's (module docstring)


def toy(load: float, n: int = 500):
    """n requests evenly spaced at `load` x CAPACITY."""
    gap = 1 / (load * CAPACITY)
    return simulate([Request(f"r{i}", i * gap, 10, 10) for i in range(n)], SEATS, "vllm", "toy")


def test_below_capacity_each_request_is_served_alone_and_the_run_is_stable():
    # 0.9 x: arrivals 11.1 ms apart, each request done 10 ms after it arrives (1 ms prefill + 9 x 1 ms decodes),
    # so it has left before the next arrives: never more than one request in the system
    r = toy(0.9)
    t = r.timelines
    assert (t.finish_time - t.arrival_time).tolist() == pytest.approx([0.010] * 500)
    o = detect_overload(r)
    assert not o.overloaded and o.evidence == ()
    # window 0-499/90 s; its second half (2.772, 5.544] s holds arrivals 250-499 and the completions of 249-498
    assert (o.steady_arrivals, o.steady_completions) == (250, 250)
    assert o.in_system_start == o.in_system_end == 1
    assert o.sentence().startswith("Stable: requests arrived at 90 req/s")


@pytest.mark.parametrize("load", [1.1, 2.0])
def test_above_capacity_the_backlog_in_the_running_set_is_overloaded(load):
    r = toy(load)
    o = detect_overload(r)
    span = 499 / (load * CAPACITY)
    # the second half of the window holds arrivals 250-499; 100 req/s would complete ~227 in it at 1.1 x (~124 at
    # 2 x), and the batch's requests, all served a token a step, complete fewer while the batch grows
    assert o.steady_arrivals == 250
    assert o.steady_completions <= CAPACITY * span / 2
    assert o.steady_arrivals > 1.05 * o.steady_completions
    assert o.steady_arrivals - o.steady_completions >= 2 * np.sqrt(250)  # 31.6: more than chance
    # requests in the system: arrived, not finished, so they gain exactly what arrived and did not complete
    assert o.in_system_end - o.in_system_start == o.steady_arrivals - o.steady_completions
    # the old rule's evidence never moved: the scheduler held no request back
    assert step_log(r).num_waiting_after.max() == 0 and o.queue_start == o.queue_end == 0
    # a step lasts its batch in ms, so TPOT grows exactly with the batch
    assert [x * 1000 for x in o.tpot] == pytest.approx(list(o.batch))
    assert o.batch[1] >= 1.1 * o.batch[0]
    assert o.evidence == ("arrivals_outpace", "in_system_growth", "tpot_inflation")
    assert o.overloaded
    s = o.sentence()
    assert s.startswith(f"OVERLOADED: requests arrived at {load * CAPACITY:g} req/s")
    assert "TPOT inflated with the batch" in s and "by more than 5 %" in s


def test_the_measured_figures_at_1_1x():
    # pinned, to see what the rule reads: 250 arrivals against 209 completions (41 more, over 2 sqrt(250) = 31.6),
    # 43 -> 84 in the system, the batch (and TPOT, ms) 50.2 -> 70.3
    o = detect_overload(toy(1.1))
    assert (o.steady_arrivals, o.steady_completions, o.in_system_start, o.in_system_end) == (250, 209, 43, 84)
    assert o.batch == pytest.approx((50.2, 70.3), abs=0.05)


def test_a_mild_overload_over_few_arrivals_is_within_chance():
    # 1.1 x again, 100 arrivals: the window's second half holds 50 and 41 complete, 22 % more arrive; but a
    # difference of 9 is under 2 sqrt(50) = 14.1, what a Poisson count of 50 strays by: too few to call
    reqs = [Request(f"r{i}", i / (1.1 * CAPACITY), 10, 10) for i in range(100)]
    o = detect_overload(simulate(reqs, SEATS, "vllm", "toy"))
    assert (o.steady_arrivals, o.steady_completions) == (50, 41)
    assert not o.overloaded and "arrivals_outpace" not in o.evidence
    assert o.sentence().endswith("but by 9, within chance (under 2 x sqrt(50) = 14.14): too few to tell a backlog "
                                 "from noise.")


def test_a_short_stable_run_that_only_fills_its_running_set_reads_stable():
    # The unit cost: every step 1 s, whatever it holds. 20 requests 1 s apart, each 100 output tokens: a request
    # holds a seat for 100 steps, so 1024 seats serve 10.24 req/s and 1 req/s is a tenth of that; but the window
    # (0-19 s) ends before anything completes. Over its second half (9.5-19 s) 10 arrive (r10-r19), none complete,
    # and requests in the system go from 10 to 20: the rate and the growth fire. The step that starts at i holds
    # r0-ri: the part's first half overlaps the steps that start at 9-14 (batches 10-15, mean 12.5), its second
    # those at 14-19 (15-20, mean 17.5), each 1 s: the batch grew 40 % and TPOT not at all. No queue, no KV bound.
    reqs = [Request(f"r{i}", float(i), 10, 100) for i in range(20)]
    o = detect_overload(simulate(reqs, SEATS, "vllm", "unit"))
    assert (o.steady_arrivals, o.steady_completions, o.in_system_start, o.in_system_end) == (10, 0, 10, 20)
    assert o.batch == (12.5, 17.5) and o.tpot == (1.0, 1.0)
    assert o.evidence == ("arrivals_outpace", "in_system_growth")
    assert not o.overloaded
    assert o.sentence().startswith("Stable: ") and o.sentence().endswith("the running set is filling.")


def test_seats_hold_the_backlog_in_the_queue():
    # unit cost, one seat, 2 output tokens: a request holds the seat 2 steps (2 s), so 0.5 req/s; arrivals 1/s.
    # Second half of 0-39 s: arrivals r20-r39 (20), at most one completion every 2 s (<= 10); the batch stays 1
    reqs = [Request(f"r{i}", float(i), 1, 2) for i in range(40)]
    o = detect_overload(simulate(reqs, EngineConfig(max_num_seqs=1), "vllm", "unit"))
    assert o.steady_arrivals == 20 and o.steady_completions <= 10
    assert o.batch == (1.0, 1.0)
    assert o.evidence == ("arrivals_outpace", "in_system_growth", "queue_growth") and o.overloaded
    assert f"the waiting queue grew by as much ({o.steady_queue_start} to {o.steady_queue_end})" in o.sentence()


def test_a_full_kv_pool_is_evidence():
    # unit cost, 10 usable blocks of 16 tokens; 15-token prompts and 2 outputs fit one block each, so at most 10
    # requests run and each takes 2 steps: 5 req/s, against 10/s arriving. The pool stays full (no block free
    # after any schedule)
    reqs = [Request(f"r{i}", i * 0.1, 15, 2) for i in range(100)]
    r = simulate(reqs, EngineConfig(max_num_seqs=1024, block_size=16, num_gpu_blocks=11), "vllm", "unit")
    o = detect_overload(r)
    assert o.kv_full == 1.0
    assert o.evidence == ("arrivals_outpace", "in_system_growth", "queue_growth", "kv_full") and o.overloaded
    assert "the KV pool was pinned full (100 % of the steps had at most 5 % of its blocks free)" in o.sentence()


def test_a_pinned_token_budget_is_evidence():
    # unit cost, a 100-token budget: each 100-token prompt takes a whole step, 1 req/s, against 2/s arriving
    reqs = [Request(f"r{i}", i * 0.5, 100, 1) for i in range(40)]
    o = detect_overload(simulate(reqs, EngineConfig(max_num_seqs=64, max_num_batched_tokens=100), "vllm", "unit"))
    assert o.budget_full == 1.0
    assert o.evidence == ("arrivals_outpace", "in_system_growth", "queue_growth", "budget_full") and o.overloaded


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 200), st.integers(1, 40), st.floats(0.01, 20.0)), min_size=10,
                max_size=60))
def test_requests_that_each_leave_before_the_next_arrives_never_read_overloaded(specs):
    # Each request's toy work is 0.1 ms x prompt + 1 ms x (outputs - 1); the next arrives that long after it, plus
    # some slack: each is served alone, so the system never holds two and cannot grow by the 2 the rule needs
    reqs, t = [], 0.0
    for i, (prompt, output, slack_ms) in enumerate(specs):
        reqs.append(Request(f"r{i}", t, prompt, output))
        t += (0.1 * prompt + (output - 1) + slack_ms) / 1000
    o = detect_overload(simulate(reqs, SEATS, "vllm", "toy", record="summary"))
    assert not o.overloaded
    assert "in_system_growth" not in o.evidence and max(o.in_system_start, o.in_system_end) <= 1


# The planners, on the built-in `mixed` workload (200 requests) with the toy cost: a request's mean work is
# 0.1 ms x 1582.5 prompt tokens + 1 ms x 353.3 decodes = 0.511 s, so about 1.96 req/s complete at most. With SLOs
# no run can miss, attainment is 100 % at every rate: only the overload verdict can fail a rate.
LOOSE = {"ttft": 1e9, "tpot": 1e9}


def test_capacity_never_reports_an_overloaded_rate():
    cap = servesim.capacity("mixed", goodput=LOOSE, cost="toy", rate_tolerance=0.1, workers=1)
    points = cap.configs[0]["points"]
    assert all(p["slo_attainment"] == 100.0 for p in points)
    assert all(p["passed"] == (not p["overloaded"]) for p in points)
    assert any(p["overloaded"] for p in points)  # 100 % attainment, and failed: the rule before passed them
    best = next(p for p in points if p["request_rate"] == cap.max_request_rate)
    assert best["passed"] and not best["overloaded"]
    assert cap.max_request_rate < min(p["request_rate"] for p in points if p["overloaded"])
    assert cap.max_request_rate <= 2.5  # near the derived 1.96 req/s, not the search's 10,000 req/s ceiling


def test_target_rate_never_counts_replicas_whose_runs_are_overloaded():
    # 5 req/s round-robin over 2 replicas: 2.5 req/s each, 28 % past 1.96; over 3, 1.67 each
    cap = servesim.capacity("mixed", goodput=LOOSE, cost="toy", rate_tolerance=0.1, target_rate=5.0, workers=1)
    tried = cap.configs[0]["target"]["tried"]
    assert all(t["passed"] == (not t["overloaded"]) for t in tried)
    two = next(t for t in tried if t["num_replicas"] == 2)
    assert two["overloaded"] and two["slo_attainment"] == 100.0 and not two["passed"]
    assert cap.configs[0]["target"]["num_replicas"] == 3


def test_overloaded_sweep_points_never_sit_on_the_pareto_front():
    rows = servesim.sweep("mixed", request_rates=[0.5, 1, 2, 4, 8], cost="toy", workers=1).to_dicts()
    over = [r for r in rows if r["overloaded"]]
    front = [r for r in rows if r["pareto"]]
    assert [r["request_rate"] for r in over] == [4.0, 8.0] and front
    assert not any(r["overloaded"] for r in front)
    # 4 req/s would be on the front if it competed: no point beats its throughput per GPU
    assert over[0]["output_throughput_per_gpu"] > max(r["output_throughput_per_gpu"] for r in front)


def test_every_record_level_reads_the_same_evidence():
    reqs = [Request(f"r{i}", i / 110, 10, 10) for i in range(500)]
    runs = [detect_overload(simulate(reqs, SEATS, "vllm", "toy", record=rec)) for rec in ("full", "summary")]
    assert runs[0] == runs[1] and runs[0].overloaded


def test_growth_is_capped_by_the_range_the_counts_covered():
    # a step-weighted line through counts that never left [0, 1]: two dense clusters on either side of a jump
    # tilt it steeply, but the count gained at most 1
    from servesim.analysis.overload import growth

    t = np.concatenate(([0.0], np.linspace(0.49, 0.4999, 50), np.linspace(0.5001, 0.51, 50), [1.0]))
    y = np.concatenate(([0.0], np.zeros(50), np.ones(50), [0.0]))
    assert growth(t, y, 0.0, 1.0) <= 1.0
