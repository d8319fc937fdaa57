"""Measured runs (`servesim.measured`): vllm bench serve's detailed result file and AIPerf's per-request export
read, replayed request by request (`servesim diff`) and scored (`servesim validate`), on the toy cost so that
every prediction is derived by hand.

The toy cost: a step costs 0.1 ms a prompt token plus 1 ms a decoding request (`servesim.cost.simple`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import cli

import servesim
from servesim.defaults import build_cost
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError
from servesim.measured.read import read_run
from servesim.measured.replay import replay

DATA = Path(servesim.__file__).parent / "data" / "validate"
VLLM = DATA / "vllm-result-sample.json"
AIPERF = DATA / "aiperf-sample"


def test_a_vllm_result_file_is_read():
    run = read_run(VLLM)
    assert run.client == "vllm-bench" and run.model_id == "meta-llama/Llama-3.1-8B-Instruct"
    assert run.deployment == {"gpu": "h100", "engine": "vllm"}  # its --metadata keys
    assert len(run) == 2 and run.failed == 1  # the third request has an error: left out
    assert run.send.tolist() == [1005.0, 1005.0]  # start_times, on the client's clock
    assert run.ttft.tolist() == [0.025, 0.020]
    assert run.e2el == pytest.approx([0.029, 0.025])  # TTFT + the ITLs: vLLM's latency
    assert run.means == {"ttft_ms": 22.5, "tpot_ms": 2.25, "itl_ms": 2.25, "e2el_ms": 27.0}


def test_the_vllm_run_replayed_by_hand():
    # both 100-token prompts at 0 in one 20 ms step (first tokens at 20 ms), then two decode steps of 2 ms:
    # TTFT 20 ms, decode 4 ms, E2EL 24 ms each; TPOT = ITL = 2 ms
    rep = replay(read_run(VLLM), EngineConfig(), "vllm", build_cost("toy"))
    assert rep.sends == "measured"
    assert rep.ttft == pytest.approx([0.020, 0.020]) and rep.e2el == pytest.approx([0.024, 0.024])
    assert rep.queue.tolist() == [0.0, 0.0] and rep.prefill == pytest.approx([0.020, 0.020])
    assert rep.means == pytest.approx({"ttft_ms": 20.0, "tpot_ms": 2.0, "itl_ms": 2.0, "e2el_ms": 24.0,
                                       "output_throughput": 6 / 0.024})


def test_an_aiperf_export_is_read_in_send_order():
    run = read_run(AIPERF)  # the artifacts folder: profile_export.jsonl, and the load from the summary beside it
    assert run.client == "aiperf" and run.model_id == "meta-llama/Llama-3.1-8B-Instruct"
    assert len(run) == 2 and run.failed == 1  # one error record; the warm-up record is not profiling: skipped
    assert run.send == pytest.approx([0.0, 0.001])  # written as they completed (1 ms first): back in send order
    assert run.ttft == pytest.approx([0.025, 0.021]) and run.e2el == pytest.approx([0.029, 0.026])
    assert run.load == {"request_rate": 1000.0, "request_count": 3}
    # AIPerf's means: TTFT (25 + 21) / 2, latency (29 + 26) / 2, ITL ((29 - 25) / 2 + (26 - 21) / 2) / 2, and
    # 6 output tokens over the first send (0) to the last response (29 ms)
    assert run.means == pytest.approx({"ttft_ms": 23.0, "e2el_ms": 27.5, "itl_ms": 2.25, "tpot_ms": 2.25,
                                       "output_throughput": 6 / 0.029})


def test_the_aiperf_run_replayed_by_hand():
    # A at 0: its prompt is a 10 ms step (first token at 10). B, sent at 1 ms, waits for that step; the next
    # step is A's decode and B's prompt, 1 + 10 = 11 ms (A's 2nd and B's 1st token at 21); then both decode
    # (2 ms: A done at 23) and B alone (1 ms: done at 24). A: TTFT 10, E2EL 23; B: TTFT 20, queue 9, E2EL 23
    rep = replay(read_run(AIPERF), EngineConfig(), "vllm", build_cost("toy"))
    assert rep.ttft == pytest.approx([0.010, 0.020]) and rep.e2el == pytest.approx([0.023, 0.023])
    assert rep.queue == pytest.approx([0.0, 0.009])
    # AIPerf's definitions: ITL (23 - 10) / 2 = 6.5 and (23 - 20) / 2 = 1.5; 6 tokens over 0 .. 24 ms
    assert rep.means == pytest.approx({"ttft_ms": 15.0, "e2el_ms": 23.0, "itl_ms": 4.0, "tpot_ms": 4.0,
                                       "output_throughput": 250.0})


def test_diff_shows_where_each_request_parts(monkeypatch, capsys, tmp_path):
    code, out, err = cli(monkeypatch, capsys, "diff", str(VLLM), "--cost", "toy", "--json", str(tmp_path / "d.json"))
    assert code == 0, err
    assert "2 requests (1 failed, left out), vllm-bench, sent at the file's send times" in out
    assert "from vllm-result-sample.json's metadata: engine vllm" in out  # (the toy cost needs no model or GPU)
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["means"]["ttft_ms"] == pytest.approx({"measured": 22.5, "predicted": 20.0, "error_pct": -100 / 9})
    first, second = doc["requests"]
    # request 0: TTFT 25 measured, 20 predicted; decode 4 and 4: TTFT is what parts; E2EL (24 - 29) / 29
    assert first["diverges_in"] == "ttft" and first["e2el_error_pct"] == pytest.approx(-5 / 29 * 100)
    # request 1: TTFT 20 and 20; decode 5 measured, 4 predicted
    assert second["diverges_in"] == "decode" and second["decode_ms"] == pytest.approx(5.0)


def test_a_self_replay_is_exact(monkeypatch, capsys, tmp_path):
    # servesim's own detailed result file (with its start_times) replayed through the same engine: no difference
    path = tmp_path / "r.json"
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--num-prompts", "30", "--request-rate",
                       "8", "--max-concurrency", "3", "--cost", "toy", "--save-result", "--save-detailed",
                       "--result-dir", str(tmp_path), "--result-filename", "r.json")
    assert code == 0, err
    run = read_run(path)
    rep = replay(run, EngineConfig(), "vllm", build_cost("toy"))
    assert np.allclose(rep.ttft, run.ttft, atol=1e-12) and np.allclose(rep.e2el, run.e2el, atol=1e-12)
    # validate redraws the sends with the file's load (rate 8, cap 3, seed 0): the same run again
    client = replay(run, EngineConfig(), "vllm", build_cost("toy"), sends="client")
    assert client.sends == "client" and {m: client.means[m] for m in run.means} == pytest.approx(run.means)


def test_validate_scores_run_files(monkeypatch, capsys, tmp_path):
    code, out, err = cli(monkeypatch, capsys, "validate", str(VLLM), str(AIPERF), "--set", "cost=toy", "--set",
                         "engine=vllm", "--json", str(tmp_path / "v.json"))
    assert code == 0, err
    assert "2 rows: 2 predicted, 0 out of reach" in out
    doc = json.loads((tmp_path / "v.json").read_text())
    # TTFT: vLLM's (20 - 22.5) / 22.5 = -11.1 %, AIPerf's (15 - 23) / 23 = -34.8 %
    errs = [p["error_pct"]["ttft_ms"] for p in doc["points"]]
    assert errs == pytest.approx([-100 / 9, -8 / 23 * 100])
    assert doc["ttft_mape"] == pytest.approx((100 / 9 + 800 / 23) / 2)


def test_validate_names_what_a_run_file_lacks(monkeypatch, capsys, tmp_path):
    data = json.loads(VLLM.read_text())
    del data["gpu"]
    (tmp_path / "a.json").write_text(json.dumps(data))
    data["model_id"] = "mystery/Model-1B"
    (tmp_path / "b.json").write_text(json.dumps(data))
    code, out, err = cli(monkeypatch, capsys, "validate", str(tmp_path))  # a folder: both files
    assert code == 0, err
    assert "2 rows: 0 predicted, 2 out of reach" in out
    assert "a.json: out of reach: no gpu recorded: run vllm bench serve with --metadata gpu=..." in out
    assert "b.json: out of reach: model 'mystery/Model-1B' is not a servesim model" in out


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(ttfts=[0.1]), "ttfts: 1 entries, input_lens has 3"),
    (lambda d: d.update(ttfts=[0.025, -1, 0.0]), "ttfts[1]: expected seconds > 0, got -1"),
    (lambda d: d.update(burstiness="x"), "burstiness: expected a gamma shape > 0"),
    (lambda d: d.update(errors=["a", "b", "c"]), "no successful request"),
])
def test_a_bad_vllm_file_is_one_line(tmp_path, edit, words):
    data = json.loads(VLLM.read_text())
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")) as exc:
        read_run(path)
    assert str(path) in str(exc.value)


@pytest.mark.parametrize("line, words", [
    ("{not json", "bad.jsonl:2: not valid JSON"),
    ('{"metadata": {"request_start_ns": 5, "request_end_ns": 1}, "metrics": {}, "error": null}',
     "bad.jsonl:2: metadata.request_start_ns, request_end_ns: expected epoch nanoseconds, end >= start"),
    ('{"metadata": {"request_start_ns": 1, "request_end_ns": 5}, "metrics": {"input_sequence_length": '
     '{"value": 3, "unit": "tokens"}}, "error": null}', "bad.jsonl:2: metrics.output_sequence_length: missing"),
])
def test_a_bad_aiperf_export_names_its_line(tmp_path, line, words):
    good = (AIPERF / "profile_export.jsonl").read_text().splitlines()[0]
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(ConfigError, match=words):
        read_run(path)


@pytest.mark.parametrize("args, words", [
    (["--request-rate", "4"], "--request-rate: diff replays the run's own load"),
    (["--workload", "random"], "--workload: diff replays the run's own load"),
    (["--num-replicas", "2"], "diff"),
    (["--worst", "-1"], "--worst: got -1"),
])
def test_diff_refuses_a_load_of_its_own(monkeypatch, capsys, args, words):
    code, _, err = cli(monkeypatch, capsys, "diff", str(VLLM), "--cost", "toy", *args)
    assert code == 2 and words in err


def test_diff_needs_the_per_request_arrays(monkeypatch, capsys, tmp_path):
    data = {k: v for k, v in json.loads(VLLM.read_text()).items() if k not in ("ttfts", "itls", "input_lens",
                                                                              "output_lens", "errors")}
    (tmp_path / "s.json").write_text(json.dumps(data))
    code, _, err = cli(monkeypatch, capsys, "diff", str(tmp_path / "s.json"), "--cost", "toy")
    assert code == 2 and "saved without --save-detailed" in err
    run = read_run(tmp_path / "s.json")  # validate scores such a file from its mean lengths: 100 in, 3 out
    assert not run.per_request and run.input_lens.tolist() == [100, 100] and run.output_lens.tolist() == [3, 3]


LOG = """INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.14.0
(EngineCore_DP0 pid=1) INFO 12-02 10:00:01 [core.py:341] Iteration(0): 2 context requests, 200 context tokens, \
0 generation requests, 0 generation tokens, iteration elapsed time: 25.00 ms
(EngineCore_DP0 pid=1) INFO 12-02 10:00:01 [core.py:341] Iteration(1): 0 context requests, 0 context tokens, \
2 generation requests, 2 generation tokens, iteration elapsed time: 2.50 ms
INFO 12-02 10:00:01 [loggers.py:200] Engine 000: Iteration(2): 0 context requests, 0 context tokens, \
{gen} generation requests, 2 generation tokens, iteration elapsed time: 2.50 ms, GPU KV cache usage: 0.1%
"""


def test_diff_per_step_against_vllms_iteration_lines(monkeypatch, capsys, tmp_path):
    # the sample's replay on the toy cost: one 20 ms step prefilling both prompts (2 context requests, 200
    # tokens), then two decode steps of 2 ms (2 generation requests each); the log: 25, 2.5 and 2.5 ms
    (tmp_path / "vllm.log").write_text(LOG.format(gen=2))
    code, out, err = cli(monkeypatch, capsys, "diff", str(VLLM), "--cost", "toy", "--engine-log",
                         str(tmp_path / "vllm.log"), "--json", str(tmp_path / "d.json"))
    assert code == 0, err
    steps = json.loads((tmp_path / "d.json").read_text())["steps"]
    assert (steps["logged_steps"], steps["servesim_steps"], steps["steps_agreeing"]) == (3, 3, 3)
    assert steps["with_prefill"] == {"logged_steps": 1, "servesim_steps": 1, "logged_mean_ms": 25.0,
                                     "servesim_mean_ms": pytest.approx(20.0)}
    assert steps["decode_only"]["logged_mean_ms"] == 2.5 and steps["decode_only"]["servesim_mean_ms"] == \
        pytest.approx(2.0)
    assert "the schedules agree for the first 3" in out
    (tmp_path / "vllm.log").write_text(LOG.format(gen=1))  # the third step decodes 1 request, not 2
    code, out, err = cli(monkeypatch, capsys, "diff", str(VLLM), "--cost", "toy", "--engine-log",
                         str(tmp_path / "vllm.log"))
    assert code == 0, err
    assert "agree for the first 2" in out and "step 2: logged 0 context requests, 0 context tokens, 1 generation " \
        "requests; servesim 0, 0, 2" in out
    (tmp_path / "vllm.log").write_text("INFO nothing here\n")
    code, _, err = cli(monkeypatch, capsys, "diff", str(VLLM), "--cost", "toy", "--engine-log",
                       str(tmp_path / "vllm.log"))
    assert code == 2 and "--enable-logging-iteration-details" in err


def test_diff_takes_the_front_end_from_the_files_metadata(monkeypatch, capsys, tmp_path):
    # frontend=vllm recorded (--metadata): 11.22 ms + 100 x 1 us on each TTFT: 20 + 11.32 ms predicted
    data = json.loads(VLLM.read_text()) | {"frontend": "vllm"}
    (tmp_path / "r.json").write_text(json.dumps(data))
    code, out, err = cli(monkeypatch, capsys, "diff", str(tmp_path / "r.json"), "--cost", "toy", "--json",
                         str(tmp_path / "d.json"))
    assert code == 0, err
    assert "metadata: frontend vllm, engine vllm" in out
    assert json.loads((tmp_path / "d.json").read_text())["means"]["ttft_ms"]["predicted"] == pytest.approx(31.32)
