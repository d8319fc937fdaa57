"""Synthetic arrivals (vllm bench serve's definition), length distributions, and the closed loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesim.errors import WorkloadError
from servesim.workloads import ClosedLoop, RequestTable, arrival_times, make_closed_loop, make_table, parse_length


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_rate_inf_sends_everything_at_once():
    assert arrival_times(4, math.inf, 1.0, rng()).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_burstiness_inf_is_a_fixed_interval():
    assert arrival_times(4, 2.0, math.inf, rng()).tolist() == [0.5, 1.0, 1.5, 2.0]


def test_last_request_goes_out_at_n_over_rate_like_vllm():
    # vLLM rescales the cumulative gamma delays so the last one is exactly total_requests / request_rate
    for burstiness in (0.25, 1.0, 4.0):
        t = arrival_times(50, 10.0, burstiness, rng())
        assert t[-1] == pytest.approx(5.0, rel=1e-12)
        assert np.all(np.diff(t) >= 0) and t[0] > 0


def test_gamma_gaps_have_cv_one_over_sqrt_burstiness():
    # gamma(shape k) has CV 1/sqrt(k): 2 for k = 0.25, 1 (Poisson) for k = 1, 0.5 for k = 4.
    # 200,000 gaps: the sample CV's standard error is at most 0.34% (k = 0.25, the heaviest tail; measured over 200
    # seeds), so 3% is ~9 standard errors, while a wrong shape (CV 1 instead of 2 or 0.5) is off by 50% or more.
    for k, cv in ((0.25, 2.0), (1.0, 1.0), (4.0, 0.5)):
        gaps = np.diff(arrival_times(200_000, 5.0, k, rng(1)))
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.03)


def test_same_seed_same_arrivals_and_different_seed_different():
    assert arrival_times(10, 3.0, 1.0, rng(7)).tolist() == arrival_times(10, 3.0, 1.0, rng(7)).tolist()
    assert arrival_times(10, 3.0, 1.0, rng(7)).tolist() != arrival_times(10, 3.0, 1.0, rng(8)).tolist()


@pytest.mark.parametrize(
    ("spec", "low", "high"), [("uniform:5:7", 5, 7), ("normal:100:500:10:200", 10, 200), ("lognormal:50:2:1:60", 1, 60)]
)
def test_lengths_stay_within_their_bounds(spec, low, high):
    x = parse_length(spec).sample(5000, rng())
    assert x.dtype == np.int64 and x.min() == low and x.max() == high  # 5000 draws hit both clips / ends


def test_fixed_length_and_lognormal_mean():
    assert parse_length("128").sample(3, rng()).tolist() == [128, 128, 128]
    # lognormal:MEAN:SIGMA is parameterised by the distribution's mean: mu = ln(MEAN) - SIGMA^2 / 2
    x = parse_length("lognormal:1000:0.5").sample(200_000, rng())
    assert x.mean() == pytest.approx(1000, rel=0.01)


@pytest.mark.parametrize("bad", ["0", "uniform:9:3", "normal:5", "pareto:1:2", "", "lognormal:-1:1", "nan"])
def test_bad_length_specs(bad):
    with pytest.raises(WorkloadError, match="expected"):
        parse_length(bad)


def test_random_workload_defaults_follow_vllm_bench_serve():
    t = make_table("random", request_rate=4.0)
    assert len(t) == 1000  # --num-prompts default
    # --random-input-len 1024, --random-output-len 128 (vllm bench serve's defaults; range ratio 0: fixed lengths)
    assert set(t.prompt_len.tolist()) == {1024} and set(t.output_len.tolist()) == {128}
    assert t.arrival_time[-1] == pytest.approx(250.0)  # 1000 / 4


def test_empirical_lengths_draw_whole_rows_from_the_trace():
    t = make_table(
        "random", num_requests=300, prompt_len="trace:azure-conv-sample", output_len="trace:azure-conv-sample"
    )
    from servesim.workloads import builtin_table

    src = builtin_table("azure-conv-sample")
    pairs = set(zip(src.prompt_len.tolist(), src.output_len.tolist(), strict=True))
    assert set(zip(t.prompt_len.tolist(), t.output_len.tolist(), strict=True)) <= pairs


def run_closed_loop(loop: ClosedLoop, service_time: float) -> list[tuple[str, float]]:
    """A toy engine: every request takes `service_time` seconds from its arrival (no queueing)."""
    sent, pending, log = 0, [], []
    for r in loop.initial_requests():
        sent += 1
        pending.append(r)
    while pending:
        pending.sort(key=lambda r: (r.arrival_time, r.request_id))
        r = pending.pop(0)
        log.append((r.request_id, r.arrival_time))
        nxt = loop.next_request(sent, r.arrival_time + service_time)
        if nxt is not None:
            sent += 1
            pending.append(nxt)
    return log


def test_closed_loop_arrivals_follow_completions():
    table = RequestTable.from_columns([0] * 5, [10] * 5, [5] * 5)
    loop = ClosedLoop(num_users=2, think_time=0.5, requests=table)
    # two users start at 0; each response takes 1 s, then 0.5 s of thinking: next sends at 1.5, 1.5, 3.0
    assert run_closed_loop(loop, 1.0) == [("0", 0.0), ("1", 0.0), ("2", 1.5), ("3", 1.5), ("4", 3.0)]
    # a slower engine delays the arrivals: an open-loop schedule could not do this
    assert run_closed_loop(loop, 2.0)[-1] == ("4", 5.0)


def test_closed_loop_from_options():
    loop = make_closed_loop("random", users=3, think_time=1.0, num_requests=10, prompt_len="64")
    assert (loop.num_users, len(loop)) == (3, 10)
    assert [r.arrival_time for r in loop.initial_requests()] == [0.0, 0.0, 0.0]
    with pytest.raises(WorkloadError, match="closed loop"):
        make_closed_loop("random", users=3, request_rate=1.0)
    with pytest.raises(WorkloadError, match="--users"):
        make_closed_loop("random", users=0)


@pytest.mark.parametrize("spec", ["normal:1:9e99", "uniform:1:9e99", "normal:9e99:1", "lognormal:100:1:1:1e12"])
def test_lengths_beyond_any_context_window_are_a_clear_error(spec):
    with pytest.raises(WorkloadError, match="expected token counts up to 2,147,483,647"):
        parse_length(spec)


def test_a_wide_normal_is_clipped_not_overflowed():
    # std 2e9 around 100: about half the draws fall below 1 (clipped to 1), the rest stay <= 2**31 - 1
    x = parse_length("normal:100:2e9").sample(1000, np.random.default_rng(0))
    assert x.min() == 1 and x.max() <= 2**31 - 1


def test_a_tables_requests_equal_the_checked_constructor():
    from servesim.engine.request import Request

    table = RequestTable.from_columns([0.0, 0.5, 2.25], [10, 1, 300], [1, 7, 20])
    got = table.to_requests()
    want = [Request(rid, t, p, o) for rid, t, p, o in
            zip(table.request_ids, [0.0, 0.5, 2.25], [10, 1, 300], [1, 7, 20])]
    assert got == want
    assert [type(r.prompt_len) for r in got] == [int] * 3  # plain Python values, as Request() would hold
    with pytest.raises(ValueError, match="finite number of seconds"):
        RequestTable.from_columns([0.0, float("inf")], [1, 1], [1, 1]).to_requests()


def test_the_engine_drives_a_closed_loop():
    # the loop above through the real engine (unit step clock, 1 s a step): both users' 10-token prompts prefill in
    # step 0 and decode 4 more tokens: done at 5 s; after 0.5 s of thinking requests 2 and 3 go at 5.5 s, done at
    # 10.5 s; request 4 at 11 s
    from servesim import simulate

    table = RequestTable.from_columns([0] * 5, [10] * 5, [5] * 5)
    loop = ClosedLoop(num_users=2, think_time=0.5, requests=table)
    r = simulate(loop.to_requests(), loop.config(), "vllm", "unit")
    assert [(t.id, t.arrival_time) for t in r.requests] == [("0", 0.0), ("1", 0.0), ("2", 5.5), ("3", 5.5),
                                                            ("4", 11.0)]
