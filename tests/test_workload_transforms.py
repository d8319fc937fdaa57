"""Transforms and statistics on tiny tables whose answers are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesim.errors import WorkloadError
from servesim.workloads import RequestTable, cap_lengths, sample, scale_rate, time_window, workload_stats


def table() -> RequestTable:
    return RequestTable.from_columns([0.0, 1.0, 2.0, 4.0, 8.0], [10, 20, 30, 40, 50], [1, 2, 3, 4, 100])


def test_time_window_keeps_start_inclusive_end_exclusive_and_rebases():
    t = time_window(table(), 1.0, 4.0)
    assert t.arrival_time.tolist() == [0.0, 1.0]
    assert t.request_ids == ["1", "2"]  # ids stay the source rows
    assert t.notes == ("window 1-4 s kept 2 of 5 requests",)
    with pytest.raises(WorkloadError, match="no requests arrive in it"):
        time_window(table(), 8.5, 9.0)


def test_rate_scale_divides_times():
    assert scale_rate(table(), 2.0).arrival_time.tolist() == [0.0, 0.5, 1.0, 2.0, 4.0]
    with pytest.raises(WorkloadError):
        scale_rate(table(), 0.0)


def test_sample_is_seeded_and_keeps_arrival_order():
    a = sample(table(), 3, np.random.default_rng(0))
    b = sample(table(), 3, np.random.default_rng(0))
    assert a.request_ids == b.request_ids and len(a) == 3
    assert np.all(np.diff(a.arrival_time) >= 0)
    assert sample(table(), 9, np.random.default_rng(0)).notes == (
        "asked for 9 requests, the workload has 5: using all",
    )


def test_cap_at_max_model_len_counts_requests_changed():
    t = cap_lengths(table(), 45)
    # (40, 4) fits exactly 44 <= 45; (30, 3) fits; (50, 100) -> prompt 44, output 1
    assert t.prompt_len.tolist() == [10, 20, 30, 40, 44]
    assert t.output_len.tolist() == [1, 2, 3, 4, 1]
    assert t.notes == ("capped 1 requests to max_model_len 45 (prompt + output tokens)",)
    assert cap_lengths(table(), 150).notes == ()


def test_stats_by_hand():
    s = workload_stats(table())
    assert s["count"] == 5 and s["duration_s"] == 8.0
    # gaps 1, 1, 2, 4: mean 2, population std sqrt(((1)+(1)+0+4)/4) = sqrt(1.5)
    assert s["mean_rate"] == 0.5
    assert s["burstiness_cv"] == pytest.approx(math.sqrt(1.5) / 2)
    assert s["equivalent_burstiness"] == pytest.approx(4 / 1.5)  # the gamma shape with that CV: 1 / CV^2
    assert (s["mean_prompt_len"], s["p50_prompt_len"], s["max_prompt_len"]) == (30.0, 30.0, 50)
    assert s["p90_prompt_len"] == pytest.approx(46.0)  # linear: 40 + 0.6 * (50 - 40)
    assert s["prompt_output_ratio"] == pytest.approx(150 / 110)  # 10 + ... + 50 over 1 + 2 + 3 + 4 + 100


def test_stats_undefined_values_are_none():
    s = workload_stats(RequestTable.from_columns([0.0, 0.0], [1, 1], [1, 1]))
    assert s["mean_rate"] is None and s["burstiness_cv"] is None and s["duration_s"] == 0.0


def test_plot_writes_an_image(tmp_path):
    pytest.importorskip("matplotlib")
    from servesim.workloads.stats import plot_workload

    out = tmp_path / "w.png"
    plot_workload(table(), out, "t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
