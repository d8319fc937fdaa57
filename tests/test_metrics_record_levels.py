"""Every metric is the same whether the run kept full step records, records without reasons, or only the step log
(record="summary", the default of `servesim run`); what needs the waiting reasons says so instead of guessing."""

import pytest

from servesim.analysis.benchmark import benchmark_metrics, to_json
from servesim.analysis.breakdown import format_server, server_metrics, step_arrays
from servesim.analysis.explain import explain_request, explain_run
from servesim.analysis.metrics import prompt_tokens_processed, slot_utilization, worst_gap
from servesim.analysis.overload import detect_overload
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ServesimError
from servesim.run import Run
from servesim.workloads import load_workload

SEED = load_workload("seed")
# 300 requests: a stable stretch, then a burst; the fast path advances the steady decode stretches
MIXED = [Request(f"s{i}", i * 0.05, 100 + 37 * (i % 5), 2 + i % 7) for i in range(100)] + \
        [Request(f"b{i}", 5.0 + i * 0.001, 100, 20) for i in range(200)]
CASES = {
    "seed": (SEED, dict(max_num_batched_tokens=256, max_num_seqs=8)),
    "seed-kv": (SEED, dict(max_num_batched_tokens=256, max_num_seqs=8, num_gpu_blocks=138)),
    "burst-kv": (MIXED, dict(max_num_batched_tokens=256, max_num_seqs=32, num_gpu_blocks=200)),
}


def levels(name):
    reqs, cfg = CASES[name]
    return {rec: simulate(reqs, EngineConfig(**cfg), "vllm", "toy", record=rec) for rec in ("full", "steps", "summary")}


@pytest.fixture(scope="module", params=list(CASES))
def runs(request):
    return levels(request.param)


def test_vllm_metrics_agree_at_every_record_level(runs):
    full = to_json(benchmark_metrics(runs["full"], goodput={"ttft": 100, "tpot": 10}))
    for rec in ("steps", "summary"):
        assert to_json(benchmark_metrics(runs[rec], goodput={"ttft": 100, "tpot": 10})) == pytest.approx(full)
    assert full["completed"] == len(runs["full"].requests)


def test_server_breakdown_agrees_at_every_record_level(runs):
    full = server_metrics(runs["full"])
    assert full.bound is not None and sum(full.bound.values()) == full.steps
    for rec in ("steps", "summary"):
        m = server_metrics(runs[rec])
        for field in ("queue", "prefill", "preempted", "batch_size", "tokens_per_step"):
            assert getattr(m, field) == getattr(full, field), field
        assert (m.preemptions, m.preempted_requests, m.max_preemptions, m.recomputed_tokens, m.steps) == \
            (full.preemptions, full.preempted_requests, full.max_preemptions, full.recomputed_tokens, full.steps)
        assert m.recompute_tax == pytest.approx(full.recompute_tax)
        assert m.slot_utilization == pytest.approx(full.slot_utilization)
        assert (m.kv_used_mean, m.kv_used_max) == pytest.approx((full.kv_used_mean, full.kv_used_max))
    assert slot_utilization(runs["summary"]) == pytest.approx(slot_utilization(runs["full"]))


def test_gaps_prompt_tokens_and_overload_agree_at_every_record_level(runs):
    full = runs["full"]
    for rec in ("steps", "summary"):
        assert worst_gap(runs[rec]) == worst_gap(full)  # the same seconds, request and step
        assert prompt_tokens_processed(runs[rec]) == prompt_tokens_processed(full)
        assert detect_overload(runs[rec]) == detect_overload(full)
    assert prompt_tokens_processed(full) == sum(s.prefill_tokens for s in full.steps)


def test_the_binding_constraint_is_reported_unknown_without_reasons():
    runs = levels("seed-kv")  # L waits for KV blocks: reasons matter
    for rec in ("steps", "summary"):
        assert server_metrics(runs[rec]).bound is None
        assert step_arrays(runs[rec]).bound is None
        assert "Steps bound by:                          not recorded (needs --record full)" in \
            format_server(server_metrics(runs[rec]))
    assert "Steps bound by kv_blocks:                29" in format_server(server_metrics(runs["full"]))


def test_explanations_need_step_records_and_say_when_reasons_are_missing():
    runs = levels("seed-kv")
    with pytest.raises(ServesimError, match="record='full'"):
        explain_run(runs["summary"])
    with pytest.raises(ServesimError, match="record='full'"):
        explain_request(runs["summary"], "L")
    lines = explain_run(runs["steps"])
    assert lines[0] == ("What bound each of the 51 steps is not known: the run kept no reasons for waiting "
                        "(simulate with record='full').")


def test_notebook_run_in_summary_mode():
    r = Run.simulate("seed", record="summary", max_num_batched_tokens=256, max_num_seqs=8)
    # steps 0-39: d0-d3 finish their 40th token in step 39 (test_seed.py)
    assert r.num_steps == 40 and r.steps.height == 40 and "steps=40" in repr(r) and "40 steps" in r._repr_html_()
    assert r.steps["bound_by"].null_count() == 40  # unknown, not "nothing"
    assert r.steps["tokens"].sum() == 2288  # 4 x 32 + 2000 prompt tokens, 4 x 39 + 4 decodes
    with pytest.raises(ServesimError, match="record='full'"):
        r.explain("L")
