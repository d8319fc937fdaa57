"""Explanations under KV pressure (issue 6): the seed workload on 138 KV blocks. Every sentence is checked against
the step records it claims to read.

By hand: 137 usable blocks of 16 tokens. d0-d3 hold 3 blocks each (32 + up to 16 tokens); L's 2000-token prompt
fills 125 blocks by step 10, leaving 0 free. Its first token needs block 126: none is free, L (admitted last) is
preempted in step 11, and its 2000 + 1 tokens need 126 blocks while 137 - 12 = 125 are free, until d0-d3 finish.
"""

import pytest

from servesim.analysis.compare import compare_sentences, run_policies
from servesim.analysis.explain import bound_sentence, chunking_sentences, explain_request, explain_run, prefill_phases
from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.run import Run
from servesim.workloads import load_workload

SEED = load_workload("seed")
CFG = dict(max_num_batched_tokens=256, max_num_seqs=8, num_gpu_blocks=138)


@pytest.fixture(scope="module")
def kv():
    return simulate(SEED, EngineConfig(**CFG), "vllm", "toy")


def test_the_records_are_what_the_header_says(kv):
    (p,) = kv.preemptions
    assert (p.step, p.id, p.tokens_discarded, p.blocks_freed) == (11, "L", 2000, 125)
    assert kv.steps[10].free_blocks_after_step == 0
    assert kv.steps[39].finished == ("d0", "d1", "d2", "d3")
    assert [s.step for s in kv.steps if any(e.id == "L" for e in s.scheduled)][8] == 40  # resumes in step 40


def test_bound_sentence_counts_steps_from_the_records(kv):
    # steps 11-39 (29) hold L for KV (a frozen admission, then blocks); 3-9 and 40-46 cut L's chunk at a full
    # budget (14); 0-2, 10 and 47-50 leave nobody waiting (8)
    assert bound_sentence(kv) == (
        "Of 51 steps, 29 by KV blocks (waits for blocks, preemptions), 14 by the token budget "
        "(max_num_batched_tokens 256) and 8 by nothing (every request present got all the tokens it asked for).")
    held = [s.step for s in kv.steps if any(w.id == "L" for w in s.waiting)]
    assert held == list(range(11, 40))


def test_request_l_first_prefill_preemption_and_recompute(kv):
    lines = explain_request(kv, "L")
    assert lines[1] == ("Its 2000-token prompt was prefilled in 8 chunks (7 x 252 + 236) over steps 3-10, 2000 prompt "
                        "tokens processed; first token at 252.8 ms: TTFT 232.8 ms = 0.8 ms queued + 232 ms from "
                        "first scheduled to first token.")
    # out of the running set from step 11's start (252.8 ms) to step 40's (368.8 ms); recompute: steps 40-46 of
    # 256 tokens (25.6 ms each) and 209 in step 47 (20.9 ms): 7 x 25.6 + 20.9 = 200.1 ms
    assert lines[2] == (
        "Preempted in step 11 (recompute) with 0 KV blocks free at the step's start: discarded 2000 computed tokens "
        "and freed 125 KV blocks. It resumed in step 40, 116 ms later, once d0, d1, d2 and d3 finished in step 39; "
        "meanwhile 28 steps (112 ms) held by kv blocks (last: needs 126 blocks, 117 free) and 1 step (4 ms) held by "
        "admission frozen (a request was preempted this step). Resuming recomputed 2001 tokens (its prompt and 1 "
        "output token) in 8 chunks (7 x 256 + 209) over steps 40-47 (200.1 ms).")
    phases = prefill_phases(kv, "L")
    assert [sum(c for _, c in ph) for ph in phases] == [2000, 2001]
    assert kv.steps[47].end_time - kv.steps[40].start_time == pytest.approx(0.2001)
    # token 2 came at the end of step 47: 568.9 - 252.8 = 316.1 ms after token 1
    assert lines[-1].startswith("Largest gaps between its tokens: 316.1 ms before token 2 (L was preempted in step 11 "
                                "and resumed in step 40, recomputed its context over steps 40-47)")
    assert kv.request("L").token_times[1] - kv.request("L").token_times[0] == pytest.approx(0.3161)


def test_run_explanation_blames_the_preemption_for_the_tail(kv):
    lines = explain_run(kv)
    assert lines[2].startswith("The largest gap between two tokens was 316.1 ms, before L's token 2 (L was preempted "
                               "in step 11")
    assert lines[3] == ("The highest E2EL was L's 551.9 ms, 5 output tokens: TTFT 232.8 ms, then 319.1 ms for the "
                        "other 4; 316.1 ms of it before token 2 (L was preempted in step 11 and resumed in step 40, "
                        "recomputed its context over steps 40-47).")
    # 4288 tokens = 4 x 32 + 4 x 39 decodes of d0-d3 + L's 2000 + 2001 + 3 decodes; 2000 of them redone
    assert lines[4].startswith("1 preemption of 1 request discarded 2000 computed tokens, recomputed later: a "
                               "recompute tax of 46.6% of the 4288 tokens processed")


def test_the_lesson_answer_counts_the_first_prefill_only(kv):
    whole = simulate(SEED, EngineConfig(max_num_seqs=8, num_gpu_blocks=138, enable_chunked_prefill=False),
                     "vllm", "toy")
    (text,) = chunking_sentences(kv, whole)
    assert "L's 2000-token prompt was prefilled in 8 chunks (7 x 252 + 236): 2000 of its prompt tokens" in text
    assert "Unchunked, L was prefilled in one 2000-token step: 2000 prompt tokens processed either way." in text
    # chunked: longest step with decodes is a 252-token chunk beside 4 decodes; unchunked, the whole prompt beside 4
    assert "(the longest step carrying decodes took 29.2 ms instead of 204 ms)" in text


def test_compare_names_the_preemption_behind_the_worst_gap():
    # continuous: L's whole prompt in step 3 (20.8-224.8 ms) fills the pool (12 + 125 blocks); its first decode in
    # step 4 needs block 126, so L is preempted. d0-d3 finish in step 39 (224.8 + 36 x 4 = 368.8 ms); L recomputes
    # its 2001 tokens in one 200.1 ms step: token 2 at 568.9 ms, 344.1 ms after token 1 at 224.8 ms.
    results, _ = run_policies(SEED, ["continuous", "vllm"], EngineConfig(**CFG), "toy")
    assert [(p.step, p.id) for p in results["continuous"].preemptions] == [(4, "L")]
    (s,) = compare_sentences(results)
    assert s.startswith("vllm vs continuous: the worst gap between tokens went from 344.1 ms to 316.1 ms (L was "
                        "preempted in step 11 and resumed in step 40, recomputed its context over steps 40-47)")


def test_notebook_tables_and_pandas(kv):
    r = Run(kv)
    req = r.requests
    assert req.filter(req["id"] == "L")["num_preemptions"].item() == 1
    assert req.filter(req["id"] == "L")["preempted_ms"].item() == pytest.approx(116)  # 368.8 - 252.8
    assert r.steps["bound_by"].to_list().count("kv_blocks") == 29
    pd = pytest.importorskip("pandas")
    frame = r.to_pandas("steps")
    assert isinstance(frame, pd.DataFrame) and len(frame) == 51
    assert r.to_pandas("metrics").set_index("metric").loc["max_concurrent_requests", "value"] == 5


def test_to_pandas_without_pandas_is_a_clear_error(kv, monkeypatch):
    import sys

    from servesim.errors import ServesimError

    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ServesimError, match="pip install pandas"):
        Run(kv).to_pandas()
