"""The seed scenario end to end, by hand (issue 2): the engine agrees with the lesson."""

import pytest
from helpers import tokens

from servesim.analysis.metrics import prefill_chunks, prompt_tokens_processed, worst_gap
from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.lesson import chunked_iteration_time, plan_chunks
from servesim.workloads import load_workload

MS = 1e-3
DECODES = [("d0", 1), ("d1", 1), ("d2", 1), ("d3", 1)]
PREFILLS = [("d0", 32), ("d1", 32), ("d2", 32), ("d3", 32)]


def seed(policy, **cfg):
    return simulate(load_workload("seed"), EngineConfig(max_num_seqs=8, **cfg), policy, "toy")


def test_vllm_chunks_the_long_prompt_beside_four_decodes():
    r = seed("vllm", max_num_batched_tokens=256)
    t = tokens(r)
    assert t[0] == PREFILLS
    assert t[1] == t[2] == DECODES
    assert [step[-1] for step in t[3:11]] == [("L", n) for n in plan_chunks(2000, 252)]
    assert all(step[:4] == DECODES for step in t[3:11])
    assert r.steps[3].start_time == pytest.approx(20.8 * MS)
    assert [s.duration for s in r.steps[3:10]] == pytest.approx([chunked_iteration_time(4, 252) * MS] * 7)
    assert r.steps[0].duration == pytest.approx(12.8 * MS)  # 128 prompt tokens x 0.1 ms
    assert [s.duration for s in r.steps[1:3]] == pytest.approx([4 * MS, 4 * MS])  # 4 decodes x 1 ms
    L = r.request("L")
    assert L.token_times[0] == pytest.approx(252.8 * MS)  # 20.8 + 7 x 29.2 + (4 + 23.6)
    assert L.ttft == pytest.approx(232.8 * MS)
    assert worst_gap(r).seconds == pytest.approx(29.2 * MS)
    assert prefill_chunks(r, "L") == [252] * 7 + [236]
    assert prompt_tokens_processed(r) == 4 * 32 + 2000


def test_continuous_prefills_the_long_prompt_whole_in_a_204_ms_step():
    r = seed("continuous")
    t = tokens(r)
    assert t[3] == DECODES + [("L", 2000)]
    assert r.steps[3].duration == pytest.approx(204 * MS)
    assert r.request("L").ttft == pytest.approx(204.8 * MS)
    assert worst_gap(r).seconds == pytest.approx(204 * MS)
    assert prefill_chunks(r, "L") == [2000]


def test_static_makes_the_long_prompt_wait_for_the_batch():
    r = seed("static")
    t = tokens(r)
    assert t[0] == PREFILLS
    assert all(step == DECODES for step in t[1:40])  # 39 decode steps: 40 outputs, the first from the prefill
    assert t[40] == [("L", 2000)]
    assert r.steps[40].start_time == pytest.approx(168.8 * MS)
    assert r.steps[40].duration == pytest.approx(200 * MS)
    assert r.request("L").ttft == pytest.approx(348.8 * MS)
    assert worst_gap(r).seconds == pytest.approx(4 * MS)
    # L arrives at 20 ms, during step 2 (16.8-20.8 ms): it waits in steps 3-39, always for the batch
    assert [s.step for s in r.steps if any(w.id == "L" for w in s.waiting)] == list(range(3, 40))
    waits = {w.reason.value for s in r.steps[3:40] for w in s.waiting if w.id == "L"}
    assert waits == {"batch_closed"}


@pytest.mark.parametrize("policy", ["static", "continuous", "vllm"])
def test_every_policy_processes_the_same_prompt_and_output_tokens(policy):
    r = seed(policy, **({"max_num_batched_tokens": 256} if policy == "vllm" else {}))
    assert prompt_tokens_processed(r) == 2128
    assert sum(len(x.token_times) for x in r.requests) == 4 * 40 + 5
    # prompts are processed once; each output token but the last is fed back once as a decode
    assert r.tokens_processed == 2128 + 4 * 39 + 4
