"""Explanations of scenarios whose answers are known (issue 6): every sentence from the records."""

import pytest
from helpers import reqs, run

from servesim.analysis.compare import compare_sentences, parse_set, run_policies, run_sweep
from servesim.analysis.explain import bound_sentence, chunking_sentences, explain_request, explain_run
from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError
from servesim.run import Run
from servesim.workloads import load_workload

SEED = load_workload("seed")


def vllm(**cfg):
    return simulate(SEED, EngineConfig(max_num_seqs=8, **cfg), "vllm", "toy")


def test_run_bound_by_token_budget_only_while_l_is_chunked():
    assert bound_sentence(vllm(max_num_batched_tokens=256)) == (
        "Of 40 steps, 33 by nothing (every request present got all the tokens it asked for) and 7 by the token "
        "budget (max_num_batched_tokens 256).")


def test_seed_answers_the_lessons_question_with_its_own_numbers():
    chunked, whole = vllm(max_num_batched_tokens=256), vllm(enable_chunked_prefill=False)
    (text,) = chunking_sentences(chunked, whole)
    assert "L's 2000-token prompt was prefilled in 8 chunks (7 x 252 + 236)" in text
    assert "2000 prompt tokens processed either way" in text
    assert "the prompt finished later (first token at 252.8 ms instead of 224.8 ms, " \
           "TTFT 232.8 ms instead of 204.8 ms)" in text
    assert "decode steps stayed short (the longest step carrying decodes took 29.2 ms instead of 204 ms)" in text


def test_run_explanation_names_tail_sources():
    lines = explain_run(vllm(max_num_batched_tokens=256))
    assert lines[1].startswith("The highest TTFT was L's 232.8 ms (mean 56.8 ms, median 12.8 ms).")
    assert lines[2] == ("The largest gap between two tokens was 29.2 ms, before d0's token 4 (step 3: 252 prefill "
                        "tokens of L beside 4 decodes). Steps carrying prefill (9 of 40) lasted up to 29.2 ms; "
                        "decode-only steps at most 5 ms.")
    assert "No request was preempted." in lines


def test_request_l_wait_chunks_and_gaps():
    lines = explain_request(vllm(max_num_batched_tokens=256), "L")
    assert lines[0] == ("L arrived at 20 ms and was first scheduled in step 3 (20.8 ms): it waited 0.8 ms: 0.8 ms "
                        "for the step in flight when it arrived to end.")
    assert lines[1] == ("Its 2000-token prompt was prefilled in 8 chunks (7 x 252 + 236) over steps 3-10, 2000 "
                        "prompt tokens processed; first token at 252.8 ms: TTFT 232.8 ms = 0.8 ms queued + 232 ms "
                        "from first scheduled to first token.")
    assert lines[2] == "Then 4 more tokens, TPOT 5 ms; finished at 272.8 ms (E2EL 252.8 ms)."


def test_request_d0_gaps_are_caused_by_l_chunks():
    last = explain_request(vllm(max_num_batched_tokens=256), "d0")[-1]
    assert last.startswith("Largest gaps between its tokens: 29.2 ms before token 4 (step 3: 252 prefill tokens of "
                           "L beside 4 decodes); 29.2 ms before token 5 (step 4:")
    assert last.endswith("; 7 of its 39 gaps were 29.2 ms.")


def test_static_l_waits_for_the_batch():
    r = simulate(SEED, EngineConfig(max_num_seqs=8), "static", "toy")
    assert explain_request(r, "L")[0] == (
        "L arrived at 20 ms and was first scheduled in step 40 (168.8 ms): it waited 148.8 ms: 0.8 ms for the step "
        "in flight when it arrived to end and 37 steps (148 ms) held by batch closed (the running batch must finish "
        "first).")


def test_preemption_is_explained_with_its_cost():
    r = run(reqs(("a", 0, 16, 20), ("b", 0, 16, 20)), block_size=16, num_gpu_blocks=4)
    lines = explain_request(r, "b")
    # 3 usable blocks: a and b hold one each; at token 17 both need a second, 1 is free, b (admitted last) goes.
    # Unit clock, step k from k to k + 1 s: a's 20 tokens come in steps 0-19; b is out from step 1's start (1 s)
    # to step 20's (20 s), held in steps 2-19 (18) for blocks; b's token 1 at 1 s, token 2 at the end of step 20.
    assert lines[2] == (
        "Preempted in step 1 (recompute) with 1 KV block free at the step's start: discarded 16 computed tokens and "
        "freed 1 KV block. It resumed in step 20, 19000 ms later, once a finished in step 19; meanwhile 18 steps "
        "(18000 ms) held by kv blocks (last: needs 2 blocks, 0 free) and 1 step (1000 ms) held by admission frozen "
        "(a request was preempted this step). Resuming recomputed 17 tokens (its prompt and 1 output token) in one "
        "17-token step (step 20, 1000 ms).")
    assert "20000 ms before token 2 (b was preempted in step 1 and resumed in step 20)" in lines[-1]
    run_lines = explain_run(r)
    assert any(s.startswith("1 preemption of 1 request discarded 16 computed tokens") for s in run_lines)


def test_compare_policies_attributes_the_differences():
    results, notes = run_policies(SEED, ["static", "continuous", "vllm"],
                                  EngineConfig(max_num_batched_tokens=256, max_num_seqs=8), "toy")
    assert notes == ["max_num_batched_tokens 256 applies to the chunking policies only; static, continuous never "
                     "chunk, so their budget is vLLM's default without chunking, max(max_model_len, 2048) = 2048."]
    s = compare_sentences(results)
    assert s[1] == ("vllm vs continuous: chunked prefill cut the worst gap between tokens from 204 ms to 29.2 ms; "
                    "the long prompt's TTFT rose from 204.8 ms to 232.8 ms; prompt tokens processed are the same "
                    "(2128, 2000 of them L's).")
    assert s[0].startswith("continuous vs static: continuous admission raised the worst gap between tokens from 4 ms "
                           "to 204 ms (step 3: 2000 prefill tokens of L beside 4 decodes)")
    assert "(L queued 0.8 ms instead of 148.8 ms)" in s[0]


def test_compare_a_knob_sweep():
    results = run_sweep(SEED, "vllm", EngineConfig(max_num_seqs=8), "toy",
                        *parse_set("max_num_batched_tokens=256,512"))
    (s,) = compare_sentences(results)
    # 512 - 4 decodes = 508-token chunks: 4 + 508 x 0.1 = 54.8 ms steps
    assert s.startswith("max_num_batched_tokens=512 vs max_num_batched_tokens=256: chunks of up to 508 tokens instead "
                        "of 252 raised the worst gap between tokens from 29.2 ms to 54.8 ms")
    with pytest.raises(ConfigError, match="unknown knob"):
        parse_set("budget=1,2")


def test_notebook_run_frames_and_explain():
    r = Run.simulate("seed", max_num_batched_tokens=256, max_num_seqs=8)
    req = r.requests
    assert req.filter(req["id"] == "L")["ttft_ms"].item() == pytest.approx(232.8)
    assert req["num_prefill_chunks"].to_list() == [1, 1, 1, 1, 8]
    assert r.steps.height == 40 and r.steps["bound_by"].to_list().count("token_budget") == 7
    metrics = dict(zip(r.metrics["metric"].to_list(), r.metrics["value"].to_list()))
    assert metrics["median_ttft_ms"] == pytest.approx(12.8)
    assert "2000 prompt tokens processed either way" in r.explain()
    assert r.explain("L").startswith("L arrived at 20 ms")
    assert "<table>" in r._repr_html_() and "mean_ttft_ms" in r._repr_html_()
