"""Benchmark clients (`servesim.clients`): send times and metrics derived by hand on the unit cost (every step
1 s), against the rules read in each client's source (docs/clients.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import cli

from servesim.clients import aiperf, inference_perf, mlperf
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError, ServesimError


def _opts(**given) -> SimpleNamespace:
    base = {f: getattr(aiperf.AIPerfFlags, f) for f in aiperf.OWN} | {"request_rate": None, "seed": 0}
    return SimpleNamespace(**(base | given))


def _sends(result) -> dict[str, float]:
    return {r.id: r.arrival_time for r in result.requests}


def test_aiperf_closed_loop_of_2_with_a_warmup_of_2():
    # 10-token prompts, 3 output tokens, a big budget: a request's prompt step samples its first token, two decode
    # steps its others. Warm-up w0, w1 at 0 finish at 3 s; only then profiling: p0, p1 at 3 s (done at 6 s), p2,
    # p3 when they finish, at 6 s (done at 9 s). Measured: the 4 profiling requests only
    load = aiperf.plan(_opts(concurrency=2, request_count=4, warmup_request_count=2, isl=10, osl=3))
    result, measured = aiperf.run(load, EngineConfig(), "vllm", "unit")
    assert _sends(result) == {"warmup-0": 0.0, "warmup-1": 0.0, "profiling-0": 3.0, "profiling-1": 3.0,
                              "profiling-2": 6.0, "profiling-3": 6.0}
    m = aiperf.metrics(result, measured, streaming=True)
    assert m["request_count"]["avg"] == 4 and m["benchmark_duration"]["avg"] == 6.0  # 3 s to 9 s
    assert m["time_to_first_token"]["avg"] == 1000.0 and m["request_latency"]["avg"] == 3000.0
    assert m["inter_token_latency"]["avg"] == 1000.0  # (3000 - 1000) / (3 - 1)
    assert m["time_to_second_token"]["p50"] == 1000.0
    assert m["output_token_throughput_per_user"]["avg"] == 1.0
    assert m["request_throughput"]["avg"] == pytest.approx(4 / 6) and m["output_token_throughput"]["avg"] == 2.0


def test_aiperf_constant_rate_first_send_at_once_then_a_gap_each():
    # --request-rate 2 constant: sends at 0, 0.5, 1 s. r0 runs alone in step [0, 1]; r1 and r2 in [1, 2]; one
    # output token each, so no ITL (AIPerf skips OSL < 2). Latencies 1, 1.5, 1 s over a 2 s benchmark
    load = aiperf.plan(_opts(request_rate=2.0, request_rate_mode="constant", request_count=3, isl=10, osl=1))
    result, measured = aiperf.run(load, EngineConfig(), "vllm", "unit")
    assert list(_sends(result).values()) == [0.0, 0.5, 1.0]
    m = aiperf.metrics(result, measured, streaming=True)
    assert m["request_latency"]["avg"] == pytest.approx(3500 / 3) and m["request_latency"]["max"] == 1500.0
    assert m["benchmark_duration"]["avg"] == 2.0 and m["request_throughput"]["avg"] == 1.5
    assert m["inter_token_latency"] == {"unit": "ms"}  # no request with two tokens


def test_aiperf_warmup_uses_the_same_generator_and_profiling_waits_for_it():
    # constant gaps of 1 s: the warm-up's one request at 0 is done at 1 s; profiling starts then, its first at
    # once and the next a gap later: 1 s and 2 s
    load = aiperf.plan(_opts(request_rate=1.0, request_rate_mode="constant", request_count=2,
                             warmup_request_count=1, isl=10, osl=1))
    result, measured = aiperf.run(load, EngineConfig(), "vllm", "unit")
    assert _sends(result) == {"warmup-0": 0.0, "profiling-0": 1.0, "profiling-1": 2.0}
    assert measured.tolist() == [False, True, True]


def test_aiperf_rate_with_a_cap_holds_every_later_send_back():
    # --concurrency 1, sends due 2 s apart (rates as AIPerf's constant mode draws them): p0 at 0 runs 3 steps
    # (done at 3 s); p1, due at 2, waits for its slot and goes at 3 (1 token: done at 4). AIPerf sleeps the next
    # gap only after a send, so p2 is due at 3 + 2 = 5, not at its own 4 s as vllm bench serve's cap sends it.
    reqs = (Request("profiling-0", 0.0, 10, 3), Request("profiling-1", 2.0, 10, 1), Request("profiling-2", 4.0, 10, 1))
    paced, _ = aiperf.run(aiperf.Load((), reqs, 1, in_order=True), EngineConfig(), "vllm", "unit")
    assert list(_sends(paced).values()) == [0.0, 3.0, 5.0]
    capped, _ = aiperf.run(aiperf.Load((), reqs, 1), EngineConfig(), "vllm", "unit")
    assert list(_sends(capped).values()) == [0.0, 3.0, 4.0]
    load = aiperf.plan(_opts(request_rate=0.5, request_rate_mode="constant", concurrency=1, request_count=3,
                             isl=10, osl=3))
    assert (load.concurrency, load.in_order) == (1, True)
    # every request takes 3 s alone and the gap is 2 s: each is sent as the one before finishes
    assert list(_sends(aiperf.run(load, EngineConfig(), "vllm", "unit")[0]).values()) == [0.0, 3.0, 6.0]


def test_aiperf_paced_profiling_starts_its_own_clock_after_the_warmup():
    # warm-up w0 (3 s) then profiling at 3 s: p0 at 3 (done 6), p1 due at 5, held to 6; the warm-up's own
    # holds do not shift the profiling phase
    load = aiperf.plan(_opts(request_rate=0.5, request_rate_mode="constant", concurrency=1, request_count=2,
                             warmup_request_count=1, isl=10, osl=3))
    result, measured = aiperf.run(load, EngineConfig(), "vllm", "unit")
    assert _sends(result) == {"profiling-0": 3.0, "profiling-1": 6.0} and measured.all()


def test_aiperf_lengths_round_up_and_stay_positive():
    rng = np.random.default_rng(0)
    assert aiperf._lengths(rng, 10.2, 0.0, 3).tolist() == [11, 11, 11]  # ceil, as AIPerf's sample
    sample = aiperf._lengths(rng, 3.0, 5.0, 2000)  # half the normal's mass below 0 is drawn again
    assert sample.min() >= 1 and np.array_equal(sample, np.ceil(sample))


def test_aiperf_without_streaming_reports_no_token_timing():
    load = aiperf.plan(_opts(concurrency=1, request_count=2, isl=10, osl=3))
    m = aiperf.metrics(*aiperf.run(load, EngineConfig(), "vllm", "unit"), streaming=False)
    assert "time_to_first_token" not in m and "inter_token_latency" not in m and m["request_count"]["avg"] == 2


@pytest.mark.parametrize("given, words", [
    ({"osl": None}, "give --osl"),
    ({"request_count": 0}, "--request-count 0: expected an integer >= 1"),
    ({"isl_stddev": -1.0}, "--isl-stddev -1.0: expected a finite number >= 0"),
])
def test_aiperf_refusals(given, words):
    with pytest.raises(ConfigError, match=words):
        aiperf.plan(_opts(**({"osl": 4} | given)))


def test_run_client_aiperf_from_the_command_line(monkeypatch, capsys, tmp_path):
    code, out, err = cli(monkeypatch, capsys, "run", "--client", "aiperf", "--concurrency", "2", "--request-count",
                         "4", "--warmup-request-count", "2", "--isl", "10", "--osl", "3", "--streaming", "--cost",
                         "unit", "--json", str(tmp_path / "a.json"))
    assert code == 0, err
    assert "NVIDIA AIPerf | LLM Metrics" in out and "Time to First Token (ms)" in out
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["client"] == "aiperf" and data["records"]["time_to_first_token"]["avg"] == 1000.0


@pytest.mark.parametrize("args, words", [
    (["run", "--concurrency", "2"], "--concurrency is an option of the aiperf client: add --client aiperf"),
    (["run", "--client", "aiperf", "--osl", "3", "--max-concurrency", "2"],
     "--max-concurrency: not an option of --client aiperf"),
    (["compare", "--client", "aiperf", "--osl", "3", "--policies", "vllm,sglang"],
     "--client aiperf: its load is simulated by servesim run, trace and explain for now"),
    (["trace", "--client", "guidellm", "--profile", "kind=sweep,rate=3", "--constraint", "kind=max_requests,count=2",
      "--data", "kind=synthetic_text,prompt_tokens=10,output_tokens=2"], "--profile kind=sweep runs 3 benchmarks"),
    (["run", "--client", "aiperf", "--osl", "3", "--request-rate", "2", "--concurrency", "2", "--num-replicas", "2"],
     "--request-rate with --concurrency (AIPerf's paced sends under a cap) on a cluster is not modelled yet"),
    (["run", "--client", "wrk"], "--client 'wrk': expected one of vllm-bench, aiperf"),
])
def test_a_clients_flags_are_refused_under_another(monkeypatch, capsys, args, words):
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_a_closed_loop_of_2_on_two_replicas_by_hand(monkeypatch, capsys, tmp_path):
    # toy cost (0.1 ms a prompt token, 1 ms a decode): AIPerf's closed loop of 2, 4 requests of 100 in, 3 out.
    # One engine: both prompts in one 20 ms step, two decode steps of 2 ms (done at 24), then the next two (48):
    # TTFT 20, latency 24. Two replicas, round-robin: each request alone, 10 ms + 2 x 1 ms (done at 12), the next
    # pair 12 .. 24: TTFT 10, latency 12, 12 output tokens in 24 ms = 500 tokens/s
    out = {}
    for name, extra in (("one", []), ("two", ["--num-replicas", "2"])):
        code, stdout, err = cli(monkeypatch, capsys, "run", "--client", "aiperf", "--concurrency", "2",
                                "--request-count", "4", "--isl", "100", "--osl", "3", "--streaming", "--cost", "toy",
                                *extra, "--json", str(tmp_path / f"{name}.json"))
        assert code == 0, err
        out[name] = json.loads((tmp_path / f"{name}.json").read_text())["records"]
    assert out["one"]["time_to_first_token"]["avg"] == pytest.approx(20.0)
    assert out["one"]["request_latency"]["avg"] == pytest.approx(24.0)
    assert out["two"]["time_to_first_token"]["avg"] == pytest.approx(10.0)
    assert out["two"]["request_latency"]["avg"] == pytest.approx(12.0)
    assert out["two"]["output_token_throughput"]["avg"] == pytest.approx(500.0)
    assert "on 2 replicas (replica-0, replica-1), router round-robin" in stdout


@pytest.mark.parametrize("args", [
    ["--client", "aiperf", "--concurrency", "3", "--request-count", "12", "--warmup-request-count", "3", "--isl", "200",
     "--isl-stddev", "50", "--osl", "20", "--streaming"],
    ["--client", "aiperf", "--request-rate", "40", "--request-count", "12", "--osl", "20", "--streaming"],
    ["--client", "mlperf", "--scenario", "Server", "--target-qps", "50", "--min-query-count", "20",
     "--min-duration-ms", "100", "--workload", "azure-conv-sample"],
    ["--client", "sglang-bench", "--dataset-name", "random", "--num-prompts", "12", "--max-concurrency", "3",
     "--random-input-len", "200",
     "--random-output-len", "20"],
    ["--client", "guidellm", "--profile", "kind=sweep,rate=4", "--constraint", "kind=max_requests,count=8", "--data",
     "kind=synthetic_text,prompt_tokens=100,output_tokens=10"],
    ["--client", "inference-perf", "--stages", "20:1", "--load-type", "poisson", "--workload", "azure-conv-sample"],
])
def test_one_replica_is_the_plain_engine_under_every_client(monkeypatch, capsys, tmp_path, args):
    runs = []
    for extra in ([], ["--num-replicas", "1"]):
        code, _, err = cli(monkeypatch, capsys, "run", *args, "--cost", "toy", *extra, "--json",
                           str(tmp_path / "r.json"))
        assert code == 0, err
        runs.append(json.loads((tmp_path / "r.json").read_text())["records"])
    assert runs[0] == runs[1]


def test_trace_and_explain_a_clients_run(monkeypatch, capsys):
    # AIPerf's closed loop of 2 after a warm-up of 2, 100-token prompts, 3 tokens, toy cost: the warm-up's two
    # prompts in one 20 ms step, two 2 ms decode steps (done at 24 ms); then the profiling phase's first two
    code, out, err = cli(monkeypatch, capsys, "trace", "--client", "aiperf", "--concurrency", "2", "--request-count",
                         "4", "--warmup-request-count", "2", "--isl", "100", "--osl", "3", "--cost", "toy")
    assert code == 0, err
    assert "finished warmup-0,warmup-1" in out and "profiling-0:100 profiling-1:100" in out
    # three rounds of a 20 ms prefill step and two 2 ms decode steps: steps 0-8, starting 0, 20, 22, 24, ... ms
    starts = [float(line.split()[1]) for line in out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert starts == [0.0, 20.0, 22.0, 24.0, 44.0, 46.0, 48.0, 68.0, 70.0]
    code, out, err = cli(monkeypatch, capsys, "explain", "--client", "aiperf", "--concurrency", "2",
                         "--request-count", "4", "--warmup-request-count", "2", "--isl", "100", "--osl", "3",
                         "--cost", "toy", "--request", "profiling-0")
    assert code == 0, err
    assert "profiling-0 arrived at 24 ms" in out and "TTFT 20 ms" in out
    assert "the unchunked counterfactual reruns vllm bench serve's requests" in err


def test_vllm_bench_is_the_default_client(monkeypatch, capsys, tmp_path):
    runs = []
    for extra in ([], ["--client", "vllm-bench"]):
        code, _, _ = cli(monkeypatch, capsys, "run", "--workload", "seed", *extra, "--json", str(tmp_path / "r.json"))
        data = json.loads((tmp_path / "r.json").read_text())
        data.pop("date")
        runs.append((code, data))
    assert runs[0] == runs[1] and runs[0][0] == 0


# -- MLPerf LoadGen -----------------------------------------------------------------------------------------------



def _mlperf(**given) -> SimpleNamespace:
    return SimpleNamespace(**({f: getattr(mlperf.MLPerfFlags, f) for f in mlperf.OWN} | {"seed": 0} | given))


def test_early_stopping_needs_459_queries_with_none_over_the_limit():
    # I_0.99(h, 1) = 0.99^h < 0.01 first at h = 459 (0.99^458 = 0.01004, 0.99^459 = 0.00994)
    assert mlperf.min_passing(0) == 459
    # with t over the limit: the least h with P(at most t failures in h + t trials) < 0.01, by the binomial sum
    def odds(h, t):
        from math import comb
        return sum(comb(h + t, k) * 0.01 ** k * 0.99 ** (h + t - k) for k in range(t + 1))
    for t in (1, 5):
        h = mlperf.min_passing(t)
        assert odds(h, t) < 0.01 <= odds(h - 1, t)


def test_loadgen_percentile_is_the_element_at_floor_n_p():
    assert mlperf.percentile(list(range(1, 101)), 0.99) == 100  # element 99 of 100
    assert mlperf.percentile(list(range(1, 11)), 0.5) == 6  # element 5 of 10, no interpolation


def test_offline_sends_every_sample_at_once_in_whole_passes():
    samples = [Request(f"s{i}", 9.0, 10, 3) for i in range(5)]
    load = mlperf.plan(_mlperf(scenario="Offline", target_qps=10.0, min_duration_ms=1000, min_query_count=7),
                       samples)
    # max(7, floor(1.1 x 1 s x 10)) = 11 samples, rounded up to whole passes of 5: 15, all at 0
    assert len(load.queries) == 15 and {q.arrival_time for q in load.queries} == {0.0}


def test_offline_verdict_on_the_unit_cost():
    # 5 samples of 10 + 3 tokens, all at 0: one prompt step, two decode steps: every query done at 3 s; 15
    # tokens over the 3 s longest latency = 5 tokens/s; VALID with a 2 s minimum, INVALID with 4 s
    samples = [Request(f"s{i}", 0.0, 10, 3) for i in range(5)]
    for minimum, valid in ((2000, True), (4000, False)):
        load = mlperf.plan(_mlperf(scenario="Offline", target_qps=1.0, min_duration_ms=minimum, min_query_count=5),
                           samples)
        m = mlperf.summarize(*mlperf.run(load, EngineConfig(), "vllm", "unit"), load, None)
        assert m["tokens_per_second"] == 5.0 and m["samples_per_second"] == pytest.approx(5 / 3)
        assert m["valid"] is valid and m["min_duration_met"] is valid


def test_server_schedule_and_verdict():
    # one loaded sample, Poisson at 10,000 queries/s until the last scheduled time reaches 0.1 s: ~1,000
    # queries, more than early stopping's 459 with nobody over a generous limit: VALID; a 1 ms TTFT limit
    # (the unit cost's first token takes a 1 s step) breaks the performance constraint and early stopping
    samples = [Request("s", 0.0, 4, 2)]
    load = mlperf.plan(_mlperf(target_qps=10_000.0, min_duration_ms=100, min_query_count=100,
                               ttft_latency=1e9, tpot_latency=1e9), samples)
    times = [q.arrival_time for q in load.queries]
    assert times[0] == 0.0 and times[-1] >= 0.1 > times[-2] and len(times) > 459
    cfg = EngineConfig(max_num_seqs=2048, max_num_batched_tokens=16384)
    m = mlperf.summarize(*mlperf.run(load, cfg, "vllm", "unit"), load, None)
    assert m["valid"] and m["early_stopping_met"] and m["perf_constraints_met"]
    strict = replace(load, settings=load.settings | {"ttft_latency_ms": 1.0})
    m = mlperf.summarize(*mlperf.run(strict, cfg, "vllm", "unit"), strict, None)
    assert not m["valid"] and not m["perf_constraints_met"] and not m["early_stopping_met"]


def test_run_client_mlperf_from_the_command_line(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "run", "--client", "mlperf", "--workload", "azure-conv-sample",
                         "--target-qps", "5", "--min-duration-ms", "60000", "--mlperf-model", "llama3_1-8b")
    assert code == 0, err
    # one pass of the 456 samples reaches 60 s at 5 queries/s; 456 < 459: early stopping cannot pass
    assert "Result is : INVALID" in out and "Early stopping satisfied: NO" in out


# -- inference-perf ------------------------------------------------------------------------------------------------

def _ip(tmp_path, config: str, **given) -> SimpleNamespace:
    path = tmp_path / "config.yml"
    path.write_text(config)
    base = {f: getattr(inference_perf.InferencePerfFlags, f) for f in inference_perf.OWN}
    return SimpleNamespace(**(base | {"config_file": path, "seed": 0} | given))


TWO_STAGES = """
load:
  type: constant
  interval: 1
  stages: [{rate: 1, duration: 1}, {rate: 1, duration: 1}]
data:
  type: random
  input_distribution: {mean: 10, std_dev: 0}
  output_distribution: {min: 1, mean: 2, std_dev: 0}
"""


def test_inference_perf_two_stages_back_to_back(tmp_path):
    # stage 0: one request, its schedule 1 s after the stage starts and its one gap scaled to the 1 s duration:
    # sent at 2 s; unit cost, 10-token prompt, 2 tokens: done at 4 s. inference-perf looks every second from
    # the stage's start (done at its look at 4 s), waits the 1 s interval: stage 1 starts at 5 s, sends at 7 s
    load = inference_perf.plan(_ip(tmp_path, TWO_STAGES), [])
    result, stage_of = inference_perf.run(load, EngineConfig(), "vllm", "unit")
    assert [(r.id, r.arrival_time, r.finish_time) for r in result.requests] == [("s0-0", 2.0, 4.0),
                                                                                ("s1-0", 7.0, 9.0)]
    m = inference_perf.summarize(result, stage_of, load, None)
    s0 = m["stage_0_lifecycle_metrics"]["successes"]
    assert s0["count"] == 1 and s0["latency"]["time_to_first_token"]["median"] == 1.0
    assert s0["latency"]["time_per_output_token"]["mean"] == 1.0  # (last - first token) / (2 - 1)
    assert s0["latency"]["normalized_time_per_output_token"]["mean"] == 1.0  # 2 s over 2 tokens
    assert m["summary_lifecycle_metrics"]["benchmark_time_seconds"] == 7.0  # 2 s to 9 s


def test_inference_perf_poisson_spreads_each_seconds_count_over_it(tmp_path):
    rng = np.random.default_rng(3)
    times = inference_perf._times(rng, "poisson", 5.0, 4.0, 20)
    assert len(times) == 20 and (times > 0).all() and (np.diff(times) > 0).all()
    for second in np.unique(np.ceil(times - 1e-9)):  # each second's last send on its boundary
        assert times[np.ceil(times - 1e-9) == second].max() == pytest.approx(second)


def test_inference_perf_shared_prefix_shares_each_groups_system_prompt(tmp_path):
    config = ("load: {stages: [{rate: 4, duration: 1}]}\n"
              "data: {type: shared_prefix, shared_prefix: {num_groups: 2, num_prompts_per_group: 2, "
              "system_prompt_len: 32, question_len: 16, output_len: 4}}\n")
    load = inference_perf.plan(_ip(tmp_path, config), [])
    assert sorted(r.prompt_len for r in load.data) == [48] * 4
    by_group = {}
    for r in load.data:  # a group's two 16-token system blocks, then the question's own
        by_group.setdefault(r.hash_ids[0][1], []).append(r.hash_ids)
    assert all(a[:2] == b[:2] and a[2] != b[2] for a, b in by_group.values())


@pytest.mark.parametrize("config, words", [
    ("load: {stages: []}", "give --stages"),
    ("load: {type: trace_replay, stages: [{rate: 1, duration: 1}]}", "constant and poisson"),
    ("load: {stages: [{rate: 1, duration: 1}]}\ndata: {type: shareGPT}", "random and shared_prefix"),
])
def test_inference_perf_refusals(tmp_path, config, words):
    with pytest.raises(ConfigError, match=words):
        inference_perf.plan(_ip(tmp_path, config), [])


def test_run_client_inference_perf_from_the_command_line(monkeypatch, capsys, tmp_path):
    (tmp_path / "c.yml").write_text(TWO_STAGES)
    code, out, err = cli(monkeypatch, capsys, "run", "--client", "inference-perf", "--config-file",
                         str(tmp_path / "c.yml"), "--cost", "unit", "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    assert "stage 0" in out and "summary" in out
    data = json.loads((tmp_path / "r.json").read_text())["records"]
    assert data["stage_1_lifecycle_metrics"]["successes"]["count"] == 1


# -- sglang.bench_serving --------------------------------------------------------------------------------------------

def _sgb(**given) -> SimpleNamespace:
    base = {"request_rate": None, "max_concurrency": None, "num_requests": None, "dataset_name": None,
            "random_input_len": None, "random_output_len": None, "random_range_ratio": None, "workload": "seed",
            "warmup_requests": 1, "seed": 0}
    return SimpleNamespace(**(base | given))


def test_sglang_bench_warmup_pause_and_a_loop_of_one():
    # one warm-up (the first prompt, at most 32 tokens: 3) at 0, done at 3 s on the unit cost; a 1 s pause: the
    # benchmark starts at 4; --max-concurrency 1: b0 at 4 (done at 7), b1 sent at 7 (done at 10)
    from servesim.clients import sglang_bench

    samples = [Request("x", 5.0, 10, 3), Request("y", 9.0, 10, 3)]
    load = sglang_bench.plan(_sgb(max_concurrency=1), samples)
    result, measured = sglang_bench.run(load, EngineConfig(), "vllm", "unit")
    assert _sends(result) == {"w0": 0.0, "b0": 4.0, "b1": 7.0}
    m = sglang_bench.summarize(result, measured, load, None)
    assert (m["completed"], m["duration"], m["mean_ttft_ms"], m["mean_e2e_latency_ms"]) == (2, 6.0, 1000.0, 3000.0)
    assert m["mean_tpot_ms"] == 1000.0 and m["mean_itl_ms"] == 1000.0  # (3000 - 1000) / 2; every gap 1 s
    assert m["concurrency"] == 1.0 and m["output_throughput"] == 1.0  # 6 s of E2E over 6 s; 6 tokens over 6 s


def test_sglang_bench_arrivals_and_random_lengths():
    from servesim.clients import sglang_bench

    load = sglang_bench.plan(_sgb(request_rate=2.0, dataset_name="random", num_requests=50, random_input_len=100,
                                  random_output_len=20, random_range_ratio=0.5, warmup_requests=0), [])
    times = [r.arrival_time for r in load.benchmark]
    assert times[0] == 0.0 and all(b > a for a, b in zip(times, times[1:]))  # the first at once, a gap after each
    assert all(50 <= r.prompt_len <= 100 and 10 <= r.output_len <= 20 for r in load.benchmark)  # [int(L r), L]
    flat = sglang_bench.plan(_sgb(dataset_name="random", num_requests=5, random_input_len=7, random_output_len=3,
                                  random_range_ratio=1.0), [])
    assert {(r.prompt_len, r.output_len, r.arrival_time) for r in flat.benchmark} == {(7, 3, 0.0)}  # rate inf


# -- GuideLLM ------------------------------------------------------------------------------------------------------

def _gl(profile: str, count: int = 3, data: str = "kind=synthetic_text,prompt_tokens=10,output_tokens=2"):
    return SimpleNamespace(profile=profile, constraint=f"kind=max_requests,count={count}", data=data, seed=0)


def test_guidellm_synchronous_by_hand():
    # one at a time on the unit cost, 10-token prompts, 2 tokens: done at 2, 4, 6 s; TTFT 1 s, TPOT (the first
    # token included) 2 s / 2 = 1 s, ITL (2 - 1) s / 1 = 1 s; 3 requests over 6 s, one in flight throughout
    from servesim.clients import guidellm

    load = guidellm.plan(_gl("kind=synchronous"))
    results, labels = guidellm.run(load, EngineConfig(), "vllm", "unit")
    (m,) = guidellm.summarize(results, labels, load, None)
    assert [r.arrival_time for r in results[0].requests] == [0.0, 2.0, 4.0]
    assert (m["requests_per_second"], m["output_tokens_per_second"], m["request_concurrency"]) == (0.5, 1.0, 1.0)
    assert m["time_to_first_token_ms"]["mean"] == m["time_per_output_token_ms"]["mean"] == 1000.0
    assert m["inter_token_latency_ms"]["mean"] == 1000.0 and m["request_latency"]["p99"] == 2.0


def test_guidellm_constant_sends_the_first_a_period_after_the_start():
    from servesim.clients import guidellm

    load = guidellm.plan(_gl("kind=constant,rate=2"))
    results, _ = guidellm.run(load, EngineConfig(), "vllm", "unit")
    assert [r.arrival_time for r in results[0].requests] == [0.5, 1.0, 1.5]  # (i + 1) / rate


def test_guidellm_sweep_ends_at_throughputs_rate():
    from servesim.clients import guidellm

    load = guidellm.plan(_gl("kind=sweep,rate=4", count=12))
    results, labels = guidellm.run(load, EngineConfig(), "vllm", "unit")
    rows = guidellm.summarize(results, labels, load, None)
    assert [r["strategy"] for r in rows] == ["synchronous", "throughput", "constant", "constant"]
    # linspace(synchronous, throughput, 4 - 1)[1:]: the midpoint, then throughput's own request rate
    low, high = rows[0]["requests_per_second"], rows[1]["requests_per_second"]
    assert [r["rate"] for r in rows[2:]] == pytest.approx([(low + high) / 2, high])


def test_guidellm_weighted_lower_percentile():
    from servesim.clients import guidellm

    v = np.array([4.0, 1.0, 3.0, 2.0])
    assert guidellm.percentile(v, np.ones(4), 0.5) == 2.0  # cumulative 0.25, 0.5: the value where it reaches 0.5
    assert guidellm.percentile(v, np.array([1.0, 1.0, 1.0, 7.0]), 0.5) == 2.0  # 2 holds 70 % of the weight
    assert guidellm.percentile(v, np.ones(4), 0.99) == 4.0


@pytest.mark.parametrize("profile, constraint, words", [
    ("kind=constant,rate=2,warmup=0.1", "kind=max_requests,count=3", "not modelled yet"),
    ("kind=constant,rate=2", "kind=max_duration,seconds=30", "kind=max_requests"),
    ("kind=concurrent", "kind=max_requests,count=3", "give rate="),
    ("kind=bursty", "kind=max_requests,count=3", "expected one of synchronous"),
])
def test_guidellm_refusals(profile, constraint, words):
    from servesim.clients import guidellm

    with pytest.raises(ConfigError, match=words):
        guidellm.plan(SimpleNamespace(profile=profile, constraint=constraint,
                                      data="kind=synthetic_text,prompt_tokens=10,output_tokens=2", seed=0))


@pytest.mark.parametrize("form", ["pairs", "json", "yaml-file", "json-file"])
def test_guidellm_data_in_each_of_its_forms(tmp_path, form):
    # GuideLLM's --data (guidellm/data/config.py): key=value pairs, a JSON/YAML mapping, or a config file
    from servesim.clients import guidellm

    data = {"pairs": "kind=synthetic_text,prompt_tokens=10,output_tokens=2",
            "json": '{"kind": "synthetic_text", "prompt_tokens": 10, "output_tokens": 2}'}.get(form)
    if form == "yaml-file":
        (tmp_path / "d.yaml").write_text("kind: synthetic_text\nprompt_tokens: 10\noutput_tokens: 2\n")
        data = str(tmp_path / "d.yaml")
    if form == "json-file":
        (tmp_path / "d.json").write_text('{"kind": "synthetic_text", "prompt_tokens": 10, "output_tokens": 2}')
        data = str(tmp_path / "d.json")
    load = guidellm.plan(_gl("kind=synchronous", data=data))
    assert [(r.prompt_len, r.output_len) for r in load.requests] == [(10, 2)] * 3


@pytest.mark.parametrize("data, words", [
    ("kind=synthetic_text,prompt_tokens=10,output_tokens=2,turns=3", "--data turns: not modelled yet"),
    ("missing.yaml", "--data missing.yaml: no such file"),
    ("{kind: [", "--data: not valid JSON or YAML"),
])
def test_guidellm_data_refusals(data, words):
    from servesim.clients import guidellm

    with pytest.raises(ConfigError) as exc:
        guidellm.plan(_gl("kind=synchronous", data=data))
    assert words in str(exc.value)


# -- AIPerf --input-file (mooncake_trace) -------------------------------------------------------------------------

TRACE = ['{"timestamp": 2000, "input_length": 100, "output_length": 3, "hash_ids": [7]}',
         '{"timestamp": 2001, "input_length": 100, "output_length": 3, "hash_ids": [7]}',
         '{"timestamp": 9000, "input_length": 50, "output_length": 2}',
         '{"timestamp": 500, "input_length": 100, "output_length": 3}']


def _trace(tmp_path, lines=TRACE) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_aiperf_fixed_schedule_from_a_mooncake_trace(tmp_path):
    # the start offset 1000 ms drops the entry at 500 and is the schedule's 0: sends at 1.0, 1.001 and 8.0 s, in
    # timestamp order; the hash_ids blocks are 512 tokens (AIPerf's default --isl-block-size)
    load = aiperf.plan(_opts(input_file=_trace(tmp_path), custom_dataset_type="mooncake_trace",
                             fixed_schedule_start_offset=1000))
    assert load.warmup == () and load.concurrency is None
    assert [r.arrival_time for r in load.profiling] == pytest.approx([1.0, 1.001, 8.0])
    assert [r.prompt_len for r in load.profiling] == [100, 100, 50]
    assert load.profiling[0].hash_ids == (7,) and load.profiling[0].hash_block_size == 512
    # auto offset: the first timestamp (500) is 0, and nothing is dropped: 0, 1.5, 1.501, 8.5 s
    auto = aiperf.plan(_opts(input_file=_trace(tmp_path), custom_dataset_type="mooncake_trace",
                             fixed_schedule_auto_offset=True))
    assert [r.arrival_time for r in auto.profiling] == pytest.approx([0.0, 1.5, 1.501, 8.5])


def test_aiperf_fixed_schedule_replayed_by_hand(monkeypatch, capsys, tmp_path):
    # toy cost, a KV pool (so the prefix cache is on): the request at 1.0 s prefills 100 tokens in 10 ms; the
    # one at 1.001 waits for that step, finds 6 of its blocks (96 tokens) cached by the first and prefills 4
    # beside the first's decode: 0.4 + 1 ms, first token at 1.0114 (TTFT 10.4 ms); the 50-token one at 8 s: 5 ms
    code, _, err = cli(monkeypatch, capsys, "run", "--client", "aiperf", "--input-file", _trace(tmp_path),
                       "--custom-dataset-type", "mooncake_trace", "--fixed-schedule-start-offset", "1000",
                       "--streaming", "--cost", "toy", "--num-gpu-blocks", "1000", "--json", str(tmp_path / "a.json"))
    assert code == 0, err
    ttft = json.loads((tmp_path / "a.json").read_text())["records"]["time_to_first_token"]
    assert ttft["min"] == pytest.approx(5.0) and ttft["max"] == pytest.approx(10.4)
    assert ttft["avg"] == pytest.approx((10 + 10.4 + 5) / 3)


def test_aiperf_trace_without_timestamps_is_the_dataset(tmp_path):
    lines = ['{"input_length": 100, "output_length": 3}', '{"input_length": 50, "output_length": 2}']
    load = aiperf.plan(_opts(input_file=_trace(tmp_path, lines), custom_dataset_type="mooncake_trace",
                             concurrency=2))
    # as many requests as entries (AIPerf's count for a mooncake_trace), each an entry picked with replacement
    assert len(load.profiling) == 2 and load.concurrency == 2
    assert all((r.prompt_len, r.output_len) in ((100, 3), (50, 2)) for r in load.profiling)
    assert all(r.arrival_time == 0.0 for r in load.profiling)


@pytest.mark.parametrize("given, lines, words", [
    ({}, TRACE, None),
    ({"custom_dataset_type": None}, TRACE, "--input-file: give --custom-dataset-type"),
    ({"custom_dataset_type": "multi_turn"}, TRACE, "--custom-dataset-type multi_turn: not modelled yet"),
    ({"request_count": 5}, TRACE, "--request-count: an option of AIPerf's synthetic data"),
    ({"concurrency": 2}, TRACE, "--concurrency with a fixed schedule"),
    ({"fixed_schedule_start_offset": 1, "fixed_schedule_auto_offset": True}, TRACE, "give one (AIPerf refuses both)"),
    ({"fixed_schedule_start_offset": 9, "fixed_schedule_end_offset": 1}, TRACE, "expected start <= end"),
    ({"fixed_schedule": True}, ['{"input_length": 10, "output_length": 2}'], "every entry needs a timestamp"),
    ({}, ['{"input_length": 600, "output_length": 2, "hash_ids": [1]}'],
     "trace.jsonl:1: input_length 600 with 1 hash_ids of 512 tokens: the last block would be 600"),
    ({}, ['{"input_length": 10}'], "trace.jsonl:1: output_length: missing"),
    ({}, ['{"session_id": "a", "input_length": 10, "output_length": 2}'], "trace.jsonl:1: session_id: AIPerf's"),
])
def test_aiperf_input_file_refusals(tmp_path, given, lines, words):
    opts = _opts(**({"input_file": _trace(tmp_path, lines), "custom_dataset_type": "mooncake_trace"} | given))
    if words is None:
        assert len(aiperf.plan(opts).profiling) == 4  # (the base case plans)
        return
    with pytest.raises(ServesimError) as exc:
        aiperf.plan(opts)
    assert words in str(exc.value)


def test_aiperf_file_options_need_the_file():
    with pytest.raises(ConfigError, match="--fixed-schedule: an option of an --input-file's dataset"):
        aiperf.plan(_opts(osl=3, fixed_schedule=True))
