"""`vllm bench serve --ramp-up-strategy` (vLLM 0.33.0, vllm/benchmarks/serve.py): request i of n goes out at rate
start + (end - start) * i / (n - 1) (linear) or start * (end / start) ** (i / (n - 1)) (exponential), one gap of
mean 1 / that rate after the one before, not rescaled. Every number below is worked by hand from those rules."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import cli
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.errors import WorkloadError
from servesim.workloads import make_table
from servesim.workloads.synthetic import RampUp, ramp_up_arrival_times


def times(strategy: str, start: float, end: float, n: int, burstiness: float = math.inf) -> list[float]:
    return ramp_up_arrival_times(n, RampUp(strategy, start, end), burstiness, np.random.default_rng(0)).tolist()


def test_linear_rates_step_evenly_from_start_to_end():
    # rates 1, 2, 3 requests/s: gaps 1, 1/2, 1/3 s
    assert times("linear", 1, 3, 3) == pytest.approx([1.0, 1.5, 1.5 + 1 / 3])
    assert RampUp("linear", 2, 10).rates(5).tolist() == [2.0, 4.0, 6.0, 8.0, 10.0]


def test_exponential_rates_grow_by_a_constant_ratio():
    # rates 1, 2, 4 requests/s: gaps 1, 1/2, 1/4 s
    assert times("exponential", 1, 4, 3) == pytest.approx([1.0, 1.5, 1.75])


def test_one_request_goes_at_the_start_rate():
    # vLLM's progress is i / max(n - 1, 1): 0 for the only request
    assert times("linear", 4, 8, 1) == [0.25]


def test_gamma_gaps_have_each_requests_mean_and_are_not_rescaled():
    # burstiness 1 (Poisson): the gap before request i has mean 1 / rate_i; with the rate fixed (start = end)
    # 20,000 gaps at 5 requests/s sum to about 4,000 s, not exactly (vLLM rescales only without ramp-up).
    t = times("linear", 5, 5, 20_000, burstiness=1.0)
    assert t[-1] == pytest.approx(4000, rel=0.03) and t[-1] != 4000
    assert all(b > a for a, b in zip(t, t[1:]))


@pytest.mark.parametrize("args, message", [
    (("linear", 0, 2), "0 < start <= end"),  # vLLM: its first request gets rate 0 and fails its assertion
    (("exponential", 0, 2), "0 < start <= end"),
    (("linear", 3, 2), "0 < start <= end"),
    (("quadratic", 1, 2), "expected linear or exponential"),
])
def test_bad_ramps_are_refused(args, message):
    with pytest.raises(WorkloadError, match=message):
        RampUp(*args)


def test_ramp_up_replaces_a_traces_arrivals_and_refuses_a_rate():
    table = make_table("random", num_requests=3, prompt_len="8", output_len="2", ramp_up=RampUp("linear", 1, 3),
                       burstiness=math.inf)
    assert table.arrival_time.tolist() == pytest.approx([1.0, 1.5, 1.5 + 1 / 3])
    with pytest.raises(WorkloadError, match="drop --request-rate"):
        make_table("random", num_requests=3, request_rate=2.0, ramp_up=RampUp("linear", 1, 3))
    # --request-rate inf is vLLM's default, which ramp-up requires
    inf = make_table("random", num_requests=3, request_rate=math.inf, ramp_up=RampUp("linear", 1, 3),
                     burstiness=math.inf)
    assert inf.arrival_time.tolist() == table.arrival_time.tolist()


RAMP = ("--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "4")


def test_run_sends_on_the_ramp_and_saves_vllms_keys_and_filename(tmp_path, monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--num-prompts", "3", "--random-input-len",
                       "10", "--random-output-len", "2", "--burstiness", "inf", *RAMP, "--save-result",
                       "--save-detailed", "--result-dir", str(tmp_path))
    assert code == 0, err
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("servesim-ramp-up-exponential-1qps-4qps-")
    data = json.loads(path.read_text())
    assert (data["request_rate"], data["ramp_up_strategy"], data["ramp_up_start_rps"], data["ramp_up_end_rps"]) == (
        "inf", "exponential", 1, 4)
    # sent at 1, 1.5 and 1.75 s; each alone on the engine, so the three TTFTs are equal
    assert len(set(round(t, 12) for t in data["ttfts"])) == 1


def test_the_concurrency_cap_is_in_the_default_filename(tmp_path, monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--num-prompts", "3", "--request-rate",
                       "2", "--max-concurrency", "2", "--save-result", "--result-dir", str(tmp_path))
    assert code == 0, err
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("servesim-2qps-concurrency2-")


@pytest.mark.parametrize("args, message", [
    (("--request-rate", "3", *RAMP), "--request-rate 3 and --ramp-up-strategy exponential"),
    (("--ramp-up-start-rps", "1"), "--ramp-up-start-rps: a rate of vllm bench serve's ramp-up; add "
                                   "--ramp-up-strategy"),
    (("--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"), "expected --ramp-up-end-rps as well"),
])
def test_run_refuses_a_ramp_it_cannot_honour(monkeypatch, capsys, args, message):
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--num-prompts", "3", *args)
    assert code == 2 and message in err and "Traceback" not in err, err


def test_another_client_multi_turn_and_capacity_refuse_the_ramp(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "run", "--client", "aiperf", *RAMP)
    assert code == 2 and "--ramp-up-strategy: not an option of --client aiperf" in err, err
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "multi-turn", *RAMP)
    assert code == 2 and "--ramp-up-strategy: --workload multi-turn" in err, err
    code, _, err = cli(monkeypatch, capsys, "capacity", "--workload", "random", "--num-prompts", "3",
                       "--goodput", "ttft:500", *RAMP)
    assert code == 2 and "capacity searches a steady request rate" in err, err


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["linear", "exponential"]), st.integers(1, 50), st.integers(0, 50), st.integers(1, 300),
       st.sampled_from([0.5, 1.0, 4.0, math.inf]), st.integers(0, 2**32 - 1))
def test_every_rate_lies_on_the_ramp_and_sends_go_in_order(strategy, start, extra, n, burstiness, seed):
    ramp = RampUp(strategy, start, start + extra)
    rates = ramp.rates(n)
    assert rates[0] == start and (n == 1 or rates[-1] == pytest.approx(start + extra, rel=1e-12))
    assert all(start - 1e-9 <= r <= start + extra + 1e-9 for r in rates) and all(np.diff(rates) >= -1e-9)
    t = ramp_up_arrival_times(n, ramp, burstiness, np.random.default_rng(seed))
    assert len(t) == n and t[0] > 0 and all(np.diff(t) >= 0)
