"""The path outside the engine core (`servesim.engine.frontend`): a request reaches the engine the front end's time
after its send, every metric counts from the send, and a closed loop's next send waits for the client to see a
completion. On the toy cost (0.1 ms a prompt token, 1 ms a decoding request a step), so every time is by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fastpath import same_timelines
from test_properties import scenarios

from servesim.engine import simulate
from servesim.engine.frontend import FRONTENDS, frontend
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError

FRONT = EngineConfig(frontend_latency=0.005, frontend_latency_per_token=1e-5)  # 5 ms + 10 us a prompt token


def test_a_request_reaches_the_engine_after_the_front_end():
    # 100 tokens: 5 + 1 = 6 ms to the engine, a 10 ms prefill: first token at 16 ms, done at 18 ms (two 1 ms
    # decodes); TTFT 16 ms from the send at 0, the engine's part 10 ms
    t = simulate([Request("a", 0.0, 100, 3)], FRONT, "vllm", "toy", record="summary").timelines
    assert t.arrival_time.tolist() == [0.0]  # the send
    assert t.first_scheduled_time.tolist() == pytest.approx([0.006])
    assert (t.first_token_time() - t.arrival_time).tolist() == pytest.approx([0.016])
    assert t.finish_time.tolist() == pytest.approx([0.018])


def test_a_closed_loop_waits_for_the_front_end_each_round():
    # a cap of 1: b is sent when the client sees a done (18 ms), and reaches the engine 6 ms later: its first
    # token at 34 ms, done at 36; each TTFT 16 ms
    t = simulate([Request("a", 0.0, 100, 3), Request("b", 0.0, 100, 3)], replace(FRONT, max_concurrency=1),
                 "vllm", "toy", record="summary").timelines
    assert t.arrival_time.tolist() == pytest.approx([0.0, 0.018])
    assert (t.first_token_time() - t.arrival_time).tolist() == pytest.approx([0.016, 0.016])
    assert t.finish_time.tolist() == pytest.approx([0.018, 0.036])


def test_a_conversations_next_turn_is_sent_after_the_answer_is_seen():
    # turn 2 (50 tokens, 1 s think time) is sent 1 s after turn 1's last token (18 ms): at 1.018 s, at the
    # engine 5 + 0.5 ms later; its 5 ms prefill: TTFT 10.5 ms
    reqs = [Request("t1", 0.0, 100, 3), Request("t2", 0.0, 50, 2, after="t1", think_time=1.0)]
    t = simulate(reqs, FRONT, "vllm", "toy", record="summary").timelines
    assert t.arrival_time.tolist() == pytest.approx([0.0, 1.018])
    assert (t.first_token_time() - t.arrival_time).tolist() == pytest.approx([0.016, 0.0105])


def test_the_presets_and_the_command_line(monkeypatch, capsys, tmp_path):
    assert frontend("vllm").latency == pytest.approx(10.82e-3 + 0.3e-3 + 0.1e-3)  # the docstring's arithmetic
    assert FRONTENDS["none"].latency == 0.0
    out = {}
    for name, extra in (("none", []), ("vllm", ["--frontend", "vllm"]), ("set", ["--frontend", "vllm",
                                                                             "--frontend-latency-ms", "2"])):
        code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--num-prompts", "1",
                           "--random-input-len", "100", "--random-output-len", "3", "--cost", "toy", *extra,
                           "--json", str(tmp_path / f"{name}.json"))
        assert code == 0, err
        out[name] = json.loads((tmp_path / f"{name}.json").read_text())["mean_ttft_ms"]
    # alone: 10 ms at the engine; + 11.22 ms + 100 x 1 us; + 2 ms + 0.1 ms with the override
    assert out["none"] == pytest.approx(10.0)
    assert out["vllm"] == pytest.approx(10.0 + 11.22 + 0.1)
    assert out["set"] == pytest.approx(10.0 + 2.0 + 0.1)


@pytest.mark.parametrize("args, words", [
    (["--frontend", "nginx"], "--frontend 'nginx': expected one of none, vllm, sglang"),
    (["--frontend-latency-ms", "-1"], "--frontend-latency-ms -1: expected a finite number >= 0"),
])
def test_refusals(monkeypatch, capsys, args, words):
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "seed", *args)
    assert code == 2 and words in err


def test_config_checks():
    with pytest.raises(ConfigError, match="frontend_latency must be a finite number of seconds >= 0"):
        EngineConfig(frontend_latency=-1.0)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.floats(0, 0.05), st.floats(0, 1e-4), st.sampled_from([None, 1, 3]))
def test_fast_path_is_step_by_step_with_a_front_end(scenario, latency, per_token, cap):
    requests, config, policy = scenario
    config = replace(config, frontend_latency=latency, frontend_latency_per_token=per_token, max_concurrency=cap)
    fast = simulate(requests, config, policy, "toy", record="summary", fast=True)
    slow = simulate(requests, config, policy, "toy", record="summary", fast=False)
    same_timelines(fast, slow)
    t = fast.timelines
    assert (t.arrival_time >= 0).all() and (t.first_scheduled_time[t.finished] >= t.arrival_time[t.finished]).all()


def test_fit_frontend_by_hand():
    from servesim.engine.frontend import fit_frontend

    # 5 = a + 100 b and 7 = a + 200 b: b = 0.02, a = 3
    assert fit_frontend([5.0, 7.0], [100, 200]) == pytest.approx((3.0, 0.02))
    # gaps that fall with the prompt: the per-token part held at 0, the rest the mean
    assert fit_frontend([7.0, 5.0], [100, 200]) == pytest.approx((6.0, 0.0))
    assert fit_frontend([-1.0, -1.0], [100, 200]) == (0.0, 0.0)  # servesim already slower: no front end


def test_diff_fits_a_front_end_back(monkeypatch, capsys, tmp_path):
    # a run made with 3 ms + 20 us a token, at 2 req/s with prompts of 100 to 1900 tokens (they queue behind each
    # other): fitted back from its TTFT gaps, refit on what is left, to the digits
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--num-prompts", "30",
                       "--random-input-len", "1000", "--random-range-ratio", "0.9", "--random-output-len", "4",
                       "--request-rate", "2", "--cost", "toy", "--frontend-latency-ms", "3",
                       "--frontend-latency-per-token-us", "20", "--save-result", "--save-detailed", "--result-dir",
                       str(tmp_path), "--result-filename", "f.json")
    assert code == 0, err
    code, out, err = cli(monkeypatch, capsys, "diff", str(tmp_path / "f.json"), "--cost", "toy", "--fit-frontend",
                         "--json", str(tmp_path / "d.json"))
    assert code == 0, err
    fit = json.loads((tmp_path / "d.json").read_text())["frontend_fit"]
    assert fit["frontend_latency_ms"] == pytest.approx(3.0, rel=1e-6)
    assert fit["frontend_latency_per_token_us"] == pytest.approx(20.0, rel=1e-6)
    assert fit["mean_abs_ttft_gap_ms"]["with_frontend"] == pytest.approx(0.0, abs=1e-6)
    code, _, err = cli(monkeypatch, capsys, "diff", str(tmp_path / "f.json"), "--cost", "toy", "--fit-frontend",
                       "--frontend", "vllm")
    assert code == 2 and "--fit-frontend fits the whole path" in err


def test_explain_and_the_breakdown_count_the_queue_at_the_engine():
    from servesim.analysis.breakdown import request_breakdown
    from servesim.analysis.explain import explain_request

    # b is sent at 1 ms, reaches the engine at 7 ms (5 + 1 ms), and waits for a's prefill step (6 to 16 ms): 9 ms
    # queued at the engine; its TTFT 16 + 11 (b's prefill beside a's decode) - 1 = 26 ms = 6 + 9 + 11
    res = simulate([Request("a", 0.0, 100, 3), Request("b", 0.001, 100, 3)], FRONT, "vllm", "toy")
    assert request_breakdown(res).queue == pytest.approx([0.0, 0.009])
    text = " ".join(explain_request(res, "b"))
    assert "b was sent at 1 ms, reached the engine at 7 ms through the front end (6 ms)" in text
    assert "TTFT 26 ms = 6 ms front end + 9 ms queued + 11 ms from first scheduled to first token" in text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.floats(0, 0.05), st.floats(0, 1e-4), st.sampled_from([None, 2]))
def test_one_replica_is_the_plain_engine_with_a_front_end(scenario, latency, per_token, cap):
    from servesim.cluster import Pool, simulate_cluster

    requests, config, policy = scenario
    config = replace(config, frontend_latency=latency, frontend_latency_per_token=per_token, max_concurrency=cap)
    plain = simulate(requests, config, policy, "toy", record="summary")
    one = simulate_cluster(requests, [Pool(1, config, policy, "toy")], record="summary")
    same_timelines(plain, one.cluster)
    assert plain.timelines.arrival_time.tolist() == pytest.approx(one.cluster.timelines.arrival_time.tolist())


def test_a_front_end_sits_before_the_router(monkeypatch, capsys, tmp_path):
    # two replicas, round-robin, each request alone: TTFT 10 ms at the engine + the front end's 6 ms
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--num-prompts", "2",
                       "--random-input-len", "100", "--random-output-len", "3", "--cost", "toy", "--num-replicas",
                       "2", "--frontend-latency-ms", "5", "--frontend-latency-per-token-us", "10", "--json",
                       str(tmp_path / "c.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "c.json").read_text())["mean_ttft_ms"] == pytest.approx(16.0)


def test_a_capped_request_reaches_the_engine_its_front_ends_time_after_its_slot_frees():
    # client cap 2, front end 50 us a prompt token, toy cost (0.1 ms a prefill token), one seat. r0 and r1 (1
    # token) reach the engine at 50 us; r0 runs 50-150, r1 150-250. r2 and r3 (2 tokens) are due at 0 but both slots
    # are taken: r2 is sent when r0 finishes (150), reaching the engine 100 us later (250), and runs 250-450; r3 is
    # sent at r1's finish (250) and runs 450-650. Arrivals count from the sends: 0, 0, 150, 250 us. A cluster of
    # one replica frees r0's slot at 150 too, though its replica's step was run when r2 was due (at 100).
    from servesim.cluster import Pool, simulate_cluster

    reqs = [Request("r0", 0.0, 1, 1), Request("r1", 0.0, 1, 1), Request("r2", 0.0, 2, 1), Request("r3", 0.0, 2, 1)]
    cfg = EngineConfig(max_num_batched_tokens=8, max_num_seqs=1, enable_chunked_prefill=False,
                       frontend_latency_per_token=50e-6, max_concurrency=2)
    plain = simulate(reqs, cfg, "continuous", "toy")
    one = simulate_cluster(reqs, [Pool(1, cfg, "continuous", "toy")]).cluster
    for r in (plain, one):
        assert [round(t.arrival_time * 1e6, 6) for t in r.requests] == [0, 0, 150, 250]
        assert [round(t.token_times[0] * 1e6, 6) for t in r.requests] == [150, 250, 450, 650]


def test_the_client_queue_keeps_its_order_whatever_each_front_ends_time():
    # client cap 2, front end 100 us a prompt token, toy cost, one seat; all four due at 0. The client queues r2
    # (3 tokens) before r3 (1 token), though r3 would reach the engine sooner: r0 and r1 (1 token) reach it at 100
    # and run 100-200 and 200-300; r2 takes r0's slot at 200 and reaches the engine at 200 + 300 = 500; r3 takes
    # r1's at 300, reaches it at 400 and runs 400-500; r2 runs 500-800. Sends: 0, 0, 200, 300 us.
    from servesim.cluster import Pool, simulate_cluster

    reqs = [Request("r0", 0.0, 1, 1), Request("r1", 0.0, 1, 1), Request("r2", 0.0, 3, 1), Request("r3", 0.0, 1, 1)]
    cfg = EngineConfig(max_num_batched_tokens=8, max_num_seqs=1, enable_chunked_prefill=False,
                       frontend_latency_per_token=100e-6, max_concurrency=2)
    plain = simulate(reqs, cfg, "continuous", "toy")
    one = simulate_cluster(reqs, [Pool(1, cfg, "continuous", "toy")]).cluster
    for r in (plain, one):
        assert [round(t.arrival_time * 1e6, 6) for t in r.requests] == [0, 0, 200, 300]
        assert [round(t.token_times[0] * 1e6, 6) for t in r.requests] == [200, 300, 800, 500]
