"""The lesson's seed under SGLang beside vLLM (issue 18): three ways to schedule the same prompt.

Toy cost: 1 ms per decode, 0.1 ms per prefill token. SGLang, chunks of 256 tokens, prefill first: L (2000 tokens,
at 20 ms; 0.8 ms for the step in flight) runs alone in 7 x 256 + 208 token chunks, 7 x 25.6 + 20.8 = 200 ms, and the
four decodes wait all 8 steps; their next token comes one 5-decode step later (L's first decode joins): a 205 ms
gap, and L's first token at 0.8 + 200 = 200.8 ms after its arrival. With --enable-mixed-chunk the decodes ride in
each chunk (252 + 4 decodes = 29.2 ms), as vLLM's budget of 256 gives: the same numbers as vllm.
"""

import pytest
from helpers import cli

from servesim.analysis.explain import policy_sentence
from servesim.analysis.metrics import worst_gap
from servesim.cli.sim import demo_results


@pytest.fixture(scope="module")
def results():
    return demo_results()


def test_sglang_runs_prefill_first_and_the_decodes_stall(results):
    r = results["sglang"]
    assert worst_gap(r).seconds == pytest.approx(0.205)
    assert r.request("L").ttft == pytest.approx(0.2008)
    assert ("The worst gap between two tokens was 205 ms (d0: its decode waited 8 steps (200 ms) while L "
            "prefilled: SGLang runs prefill first).") in policy_sentence(r)


def test_mixed_chunks_schedule_as_vllm_does(results):
    mixed, vllm = results["sglang mixed"], results["vllm"]
    assert worst_gap(mixed).seconds == pytest.approx(0.0292)
    assert mixed.request("L").ttft == pytest.approx(vllm.request("L").ttft) == pytest.approx(0.2328)


def test_demo_shows_five_columns(monkeypatch, capsys):
    code, out, _ = cli(monkeypatch, capsys, "demo", "--steps", "1")
    assert code == 0 and "sglang mixed" in out and "205 ms" in out


def test_compare_vllm_and_sglang(monkeypatch, capsys):
    # the lesson's sizes (budget 256, 8 seats) carried over as SGLang's chunk and max_running_requests, said so
    code, out, err = cli(monkeypatch, capsys, "compare", "--workload", "seed", "--policies", "vllm,sglang")
    assert code == 0, err
    assert "sglang: max_num_batched_tokens 256 as chunked_prefill_size 256, max_num_seqs 8 as max_running_requests 8" \
        in out
    assert ("sglang vs vllm: running prefill first raised the worst gap between tokens from 29.2 ms to 205 ms "
            "(its decode waited 8 steps (200 ms) while L prefilled: SGLang runs prefill first)") in out
    code, out, err = cli(monkeypatch, capsys, "compare", "--workload", "seed", "--policies", "vllm,sglang",
                         "--enable-mixed-chunk")
    assert code == 0, err
    assert "sglang vs vllm: the worst gap between tokens stayed at 29.2 ms" in out


def test_sglang_server_flags(tmp_path, monkeypatch, capsys):
    import json

    out = tmp_path / "r.json"
    code, _, err = cli(monkeypatch, capsys, "run", "--policy", "sglang", "--workload", "seed",
                       "--enable-mixed-chunk", "--json", str(out))
    assert code == 0, err
    assert json.loads(out.read_text())["p99_itl_ms"] == pytest.approx(29.2)  # mixed: decodes ride in each chunk
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "seed", "--enable-mixed-chunk")
    assert code == 2 and "--enable-mixed-chunk is an SGLang server option: add --policy sglang" in err
    code, _, err = cli(monkeypatch, capsys, "run", "--policy", "sglang", "--workload", "seed",
                       "--max-num-batched-tokens", "512")
    assert code == 2 and "max_num_batched_tokens is a vLLM knob with no meaning under policy sglang" in err
    code, _, err = cli(monkeypatch, capsys, "run", "--policy", "sglang", "--workload", "seed",
                       "--schedule-policy", "dfs")
    assert code == 2 and "schedule_policy 'dfs'" in err


def test_lesson_note_names_sglangs_flags(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "run", "--policy", "sglang", "--workload", "seed")
    assert code == 0 and err == ("servesim: note: seed: the lesson's settings, max_running_requests 8, "
                                 "chunked_prefill_size 256 (override with --max-running-requests "
                                 "--chunked-prefill-size)\n")


def test_explain_under_sglang_names_its_bounds_and_runs_the_unchunked_counterfactual(monkeypatch, capsys):
    # the seed: L's first seven 256-token chunks stop at chunked_prefill_size (its eighth, 208, is what was left);
    # unchunked, L runs as one 2000-token step (the counterfactual re-runs with chunked_prefill_size -1)
    code, out, err = cli(monkeypatch, capsys, "explain", "--policy", "sglang", "--workload", "seed")
    assert code == 0, err
    assert "7 by the chunk budget (chunked_prefill_size 256)" in out
    assert "Unchunked, L was prefilled in one 2000-token step" in out


def test_a_request_too_long_fails_as_sglang_rejects_it(monkeypatch, capsys):
    # L's 2000 + 5 tokens exceed a 1000-token context: it fails on arrival, and the note names the engine
    code, _, err = cli(monkeypatch, capsys, "run", "--policy", "sglang", "--workload", "seed", "--max-model-len",
                       "1000")
    assert code == 0 and "request L longer than max_model_len 1,000 (prompt + output tokens) failed: SGLang " \
                         "rejects it" in err, err


@pytest.mark.parametrize("cluster, sentence", [
    ((), "sglang.max_running_requests=8 vs sglang.max_running_requests=4: running prefill first raised the worst "
         "gap between tokens from 4 ms to 205 ms"),
    (("--num-replicas", "2"), "8 vs 4:")])
def test_compare_sets_sglangs_server_arguments(monkeypatch, capsys, cluster, sentence):
    # --set sglang.NAME on one engine and on a cluster of two (it was a traceback there). The seed on one engine:
    # with 4 running L waits for a seat and nothing stalls (worst gap one 4-decode step, 4 ms); with 8 it is
    # admitted at once and its 200 ms of chunks run first: the lesson's 205 ms gap
    code, out, err = cli(monkeypatch, capsys, "compare", "--policy", "sglang", "--workload", "seed", *cluster,
                         "--set", "sglang.max_running_requests=4,8")
    assert code == 0, err
    assert sentence in " ".join(out.split())
