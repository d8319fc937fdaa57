"""`vllm bench serve` metrics of the seed scenario, by hand (issue 6)."""

import numpy as np
import pytest
from helpers import reqs, run
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import scenarios

from servesim.analysis.benchmark import (
    Summary,
    benchmark_metrics,
    format_result,
    parse_goodput,
    parse_percentiles,
    request_arrays,
    to_json,
)
from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError
from servesim.workloads import load_workload

MS = 1e-3


@pytest.fixture(scope="module")
def seed():
    return simulate(load_workload("seed"), EngineConfig(max_num_batched_tokens=256, max_num_seqs=8), "vllm", "toy")


def test_seed_per_request_latencies(seed):
    a = request_arrays(seed)
    assert a.ids == ("d0", "d1", "d2", "d3", "L")
    assert a.ttft == pytest.approx([12.8 * MS] * 4 + [232.8 * MS])
    assert a.e2el == pytest.approx([372.8 * MS] * 4 + [252.8 * MS])
    # TPOT = (E2EL - TTFT) / (output - 1): (372.8 - 12.8) / 39 and (252.8 - 232.8) / 4
    assert a.tpot == pytest.approx([360 / 39 * MS] * 4 + [5.0 * MS])
    assert a.pooled_itl().size == 4 * 39 + 4  # every gap, pooled
    assert a.pooled_itl().max() == pytest.approx(29.2 * MS)
    assert a.itl_weights.sum() == 4 * 39 + 4


def test_seed_summaries_match_vllm_definitions(seed):
    m = benchmark_metrics(seed)
    assert m["ttft"].mean == pytest.approx(56.8)  # (4 x 12.8 + 232.8) / 5
    assert m["ttft"].median == pytest.approx(12.8)
    assert m["ttft"].percentile(90) == pytest.approx(12.8 + 0.6 * 220)  # linear: rank 3.6 of [12.8 x 4, 232.8]
    assert m["tpot"].mean == pytest.approx((4 * 360 / 39 + 5) / 5)
    assert m["itl"].mean == pytest.approx((4 * 360 + 20) / 160)  # all gaps sum to E2EL - TTFT
    assert m["itl"].percentile(99) == pytest.approx(29.2)
    assert m["e2el"].mean == pytest.approx((4 * 372.8 + 252.8) / 5)
    assert m["ttft"].std == pytest.approx(88.0)  # population std: sqrt((4 x 44^2 + 176^2) / 5)


def test_seed_throughput_is_over_first_arrival_to_last_finish(seed):
    m = benchmark_metrics(seed)
    assert m.duration == pytest.approx(372.8 * MS) == pytest.approx(seed.makespan)
    assert (m.completed, m.total_input, m.total_output) == (5, 4 * 32 + 2000, 4 * 40 + 5)
    assert m.request_throughput == pytest.approx(5 / 0.3728)
    assert m.output_throughput == pytest.approx(165 / 0.3728)
    assert m.total_token_throughput == pytest.approx(2293 / 0.3728)  # 2128 input + 165 output tokens
    assert m.request_goodput is None


@pytest.mark.parametrize("slo, good", [
    ({"ttft": 100}, 4),  # L's 232.8 ms misses
    ({"tpot": 9}, 1),  # only L's 5 ms meets it
    ({"e2el": 300}, 1),
    ({"ttft": 233, "e2el": 373}, 5),
    ({"ttft": 100, "tpot": 9}, 0),  # every target must be met
])
def test_goodput_counts_requests_meeting_every_slo(seed, slo, good):
    assert benchmark_metrics(seed, goodput=slo).request_goodput == pytest.approx(good / 0.3728)


def test_one_token_outputs_have_no_tpot_or_itl_and_count_tpot_zero_for_goodput():
    r = run(reqs(("a", 0, 4, 1), ("b", 0, 4, 1)))  # unit cost: one step of 1 s
    m = benchmark_metrics(r, goodput={"tpot": 0})
    assert (m["tpot"].count, m["itl"].count) == (0, 0)
    assert m["tpot"].mean == m["itl"].mean == 0.0  # vLLM reports 0 for an empty list
    assert m.request_goodput == pytest.approx(2 / 1.0)


def test_warmup_excludes_early_arrivals_and_shortens_the_duration(seed):
    m = benchmark_metrics(seed, warmup=0.010)  # d0-d3 arrive at 0: only L (arrives 20 ms) is kept
    assert m.completed == 1
    assert m.duration == pytest.approx((272.8 - 20) * MS)
    assert m["ttft"].mean == pytest.approx(232.8)
    with pytest.raises(ConfigError, match="exclude every request"):
        benchmark_metrics(seed, warmup=0.010, cooldown=0.015)


def test_json_uses_vllm_key_names(seed):
    d = to_json(benchmark_metrics(seed, percentiles=(50, 99.9), goodput={"ttft": 100}))
    for key in ("duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
                "request_goodput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_tpot_ms",
                "std_itl_ms", "p50_e2el_ms", "p99.9_ttft_ms"):
        assert key in d
    assert d["median_ttft_ms"] == pytest.approx(12.8)
    assert "p99_ttft_ms" not in d


def test_result_block_has_vllm_labels_and_columns(seed):
    # vLLM prints "{:<40} {:<10}" (vllm/benchmarks/serve.py), trailing spaces included
    lines = format_result(benchmark_metrics(seed)).splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[-1] == "=" * 50
    assert "Successful requests:                     5         " in lines
    assert "Benchmark duration (s):                  0.37      " in lines
    assert "---------------Time to First Token----------------" in lines
    assert "-----Time per Output Token (excl. 1st token)------" in lines
    assert "Mean TTFT (ms):                          56.80     " in lines
    assert "P99 ITL (ms):                            29.20     " in lines
    assert "Median TPOT (ms):                        9.23      " in lines
    assert all(len(line) == 51 for line in lines[1:-1] if not line.startswith("-"))


def test_parsers_reject_bad_input():
    assert parse_goodput(["ttft:300 tpot:50", "e2el:1000"]) == {"ttft": 300.0, "tpot": 50.0, "e2el": 1000.0}
    assert parse_percentiles("50,90,99.9") == (50.0, 90.0, 99.9)
    for bad in (["itl:5"], ["ttft"], ["ttft:abc"], ["ttft:-1"]):
        with pytest.raises(ConfigError):
            parse_goodput(bad)
    for bad in ("", "0", "101", "x"):
        with pytest.raises(ConfigError):
            parse_percentiles(bad)


def test_itl_pools_gaps_without_crossing_requests():
    # unit cost: a finishes at 1, 2, 3 s; b arrives at 10 s, tokens at 11, 12 s: no 8 s "gap" between a and b
    a = request_arrays(run(reqs(("a", 0, 1, 3), ("b", 10, 1, 2))))
    assert a.pooled_itl().tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_peak_output_throughput_and_concurrency_as_vllm_computes_them():
    # unit cost: a and c (prompt 1, output 2) give tokens at 1 s and 2 s and finish at 2 s; b arrives at 2 s and
    # gets its one token at 3 s. Buckets from the first arrival: [1, 2) 2 tokens, [2, 3) 2, [3, 4) 1 -> peak 2.
    # Concurrency over half-open [arrival, finish): a and c end at 2 as b starts -> peak 2, not 3.
    m = benchmark_metrics(run(reqs(("a", 0, 1, 2), ("c", 0, 1, 2), ("b", 2, 1, 1))))
    assert m.max_output_tokens_per_s == 2.0
    assert m.max_concurrent_requests == 2
    d = to_json(m)
    assert (d["max_output_tokens_per_s"], d["max_concurrent_requests"]) == (2.0, 2)


def test_seed_peaks(seed):
    m = benchmark_metrics(seed)
    assert m.max_output_tokens_per_s == 165  # the whole run fits in the first 1-second bucket
    assert m.max_concurrent_requests == 5  # L arrives at 20 ms while d0-d3 run until 372.8 ms
    assert m.percentiles == (50.0, 90.0, 99.0)


def test_result_block_lines_come_in_vllms_order(seed):
    lines = format_result(benchmark_metrics(seed, goodput={"ttft": 100}), request_rate=4.0).splitlines()
    labels = [line[:40].rstrip() for line in lines[1:14]]
    assert labels == [  # vllm/benchmarks/serve.py, `benchmark()`: the print statements in order
        "Successful requests:", "Failed requests:", "Request rate configured (RPS):", "Benchmark duration (s):",
        "Total input tokens:", "Total generated tokens:", "Request throughput (req/s):", "Request goodput (req/s):",
        "Output token throughput (tok/s):", "Peak output token throughput (tok/s):", "Peak concurrent requests:",
        "Total token throughput (tok/s):", "---------------Time to First Token----------------"[:40]]
    assert "Peak concurrent requests:                5.00      " in lines  # vLLM formats it with .2f
    assert "Request rate configured (RPS):           4.00      " in lines
    assert "Request rate configured (RPS):" not in format_result(benchmark_metrics(seed), request_rate=float("inf"))


def test_percentile_metrics_select_sections(seed):
    text = format_result(benchmark_metrics(seed, percentiles=(25, 75)), metrics=("ttft", "tpot", "itl"))
    assert "End-to-end Latency" not in text
    assert "P25 TTFT (ms):                           12.80     " in text.splitlines()
    assert "P75 TTFT (ms):                           12.80     " in text.splitlines()  # rank 3 of [12.8 x 4, 232.8]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5, allow_nan=False), st.integers(0, 4)), min_size=1, max_size=30),
       st.lists(st.floats(0.1, 100), min_size=1, max_size=4))
def test_weighted_statistics_equal_numpys_on_the_repeated_values(pairs, ps):
    x = np.array([v for v, _ in pairs])
    w = np.array([c for _, c in pairs])
    got = Summary.of(x, ps, weights=w)
    want = Summary.of(np.repeat(x, w), ps)
    assert got.count == want.count
    if want.count:
        assert got.mean == pytest.approx(want.mean, rel=1e-9, abs=1e-9)
        assert got.std == pytest.approx(want.std, rel=1e-6, abs=1e-6)
        assert got.median == pytest.approx(want.median, rel=1e-9, abs=1e-9)
        assert [v for _, v in got.percentiles] == pytest.approx([v for _, v in want.percentiles], rel=1e-9, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_itl_from_token_runs_equals_every_gap_of_every_request(scenario):
    requests, config, policy = scenario
    r = simulate(requests, config, policy, "toy", record="summary")
    a = request_arrays(r)
    gaps = np.sort(np.concatenate([np.diff(t.token_times) for t in r.requests] + [np.zeros(0)]))
    assert a.pooled_itl() == pytest.approx(gaps, rel=1e-12, abs=1e-15)
    tokens = sum(len(t.token_times) for t in r.requests)
    assert a.step_tokens.sum() == tokens


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_worst_gap_is_the_largest_gap_between_any_requests_consecutive_tokens(scenario):
    from servesim.analysis.metrics import worst_gap

    requests, config, policy = scenario
    r = simulate(requests, config, policy, "toy", record="summary")
    # by hand: every request's consecutive token times, workload order, the first of the largest (up to rounding)
    gaps = [(b - a, x.id, b) for x in r.requests for a, b in zip(x.token_times, x.token_times[1:])]
    got = worst_gap(r)
    if not gaps:
        assert got is None
        return
    top = max(g for g, _, _ in gaps)
    seconds, rid, later = next(g for g in gaps if g[0] >= top - 1e-12 * max(1.0, abs(top)))
    assert (got.seconds, got.request_id) == (seconds, rid)
    assert r.step_log.end_time[got.step] == later  # the step that produced the later token
