"""The closed-form fast path gives what the step-by-step engine gives (issue 7)."""

from dataclasses import replace

import numpy as np
import pytest
from helpers import sglang_speculation
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_block_pool import prefix_workloads
from test_properties import scenarios

from servesim.cost import get_cost_model
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError
from servesim.workloads import load_workload

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same_timelines(a, b):
    assert [r.id for r in a.requests] == [r.id for r in b.requests]
    for x, y in zip(a.requests, b.requests):
        assert x.token_times == pytest.approx(y.token_times, rel=1e-12, abs=1e-12)
        assert x.first_scheduled_time == pytest.approx(y.first_scheduled_time, rel=1e-12)
        assert x.num_preemptions == y.num_preemptions


@SETTINGS
@given(scenarios())
def test_full_records_are_identical(scenario):
    requests, config, policy = scenario
    fast = simulate(requests, config, policy, "toy", record="full", fast=True)
    slow = simulate(requests, config, policy, "toy", record="full", fast=False)
    same_timelines(fast, slow)
    assert len(fast.steps) == len(slow.steps)
    for a, b in zip(fast.steps, slow.steps):
        assert a.duration == pytest.approx(b.duration, rel=1e-12)
        assert a.start_time == pytest.approx(b.start_time, rel=1e-12, abs=1e-12)
        assert (a.scheduled, a.finished, a.preempted, a.waiting, a.arrivals) == (
            b.scheduled, b.finished, b.preempted, b.waiting, b.arrivals)
        assert (a.free_blocks_after_schedule, a.free_blocks_after_step, a.num_running_after,
                a.num_waiting_after) == (b.free_blocks_after_schedule, b.free_blocks_after_step,
                                         b.num_running_after, b.num_waiting_after)
    assert fast.preemptions == slow.preemptions


@SETTINGS
@given(scenarios())
def test_summary_runs_give_the_same_token_times_and_step_log(scenario):
    requests, config, policy = scenario
    fast = simulate(requests, config, policy, "toy", record="summary", fast=True)
    slow = simulate(requests, config, policy, "toy", record="summary", fast=False)
    same_timelines(fast, slow)
    a, b = fast.step_log, slow.step_log
    assert len(a) == len(b)
    for f in ("num_scheduled", "num_tokens", "prefill_tokens", "num_decodes", "free_blocks_after_schedule",
              "num_running_after", "num_waiting_after", "num_preempted"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert np.allclose(a.duration, b.duration, rtol=1e-12)


class LongestContextCost:
    """A cost model with only `step_time`, depending on each request's context (the longest one), not on their
    sum: the fast path must take every cohort member's own context for it."""

    name = "longest-context"

    def step_time(self, shape):
        longest = max((c + q for q, c in zip(shape.num_new_tokens, shape.num_context_tokens)), default=0)
        return 0.001 * len(shape.num_new_tokens) + 0.0001 * sum(shape.num_new_tokens) + 1e-5 * longest


@SETTINGS
@given(scenarios())
def test_a_cost_model_without_sums_gets_each_members_context(scenario):
    requests, config, policy = scenario
    fast = simulate(requests, config, policy, LongestContextCost(), record="steps", fast=True)
    slow = simulate(requests, config, policy, LongestContextCost(), record="steps", fast=False)
    same_timelines(fast, slow)
    assert [(s.duration, s.scheduled) for s in fast.steps] == [(s.duration, s.scheduled) for s in slow.steps]


@pytest.mark.parametrize("mode", ["recompute", "swap"])
@pytest.mark.parametrize("policy", ["static", "continuous", "vllm"])
def test_roofline_on_a_real_trace_sample(policy, mode):
    requests = load_workload("azure-conv-sample")[:120]
    cost = get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb", tp=1)
    if policy == "static" and mode == "swap":
        pytest.skip("static batching never preempts: preemption_mode is refused under it")
    cfg = EngineConfig(max_num_batched_tokens=4096 if policy == "vllm" else None, max_num_seqs=32,
                       num_gpu_blocks=900, preemption_mode=mode)
    fast = simulate(requests, cfg, policy, cost, record="steps", fast=True)
    slow = simulate(requests, cfg, policy, cost, record="steps", fast=False)
    same_timelines(fast, slow)
    assert [len(s.scheduled) for s in fast.steps] == [len(s.scheduled) for s in slow.steps]
    assert fast.preemptions == slow.preemptions
    assert len(fast.steps) > 2 * len(requests)  # the stretches were long enough to matter


def test_progress_is_reported_with_simulated_time_requests_done_and_the_queue():
    # Unit cost, one seat: a (output 5000) runs in steps 0-4999, then b (output 4000) in steps 5000-8999; nobody
    # is ever idle, so iteration n starts step n - 1 at n - 1 s. Progress comes every 4096 iterations: at 4095 s
    # (a running, b waiting) and at 8191 s (a done, b running).
    calls = []
    reqs = [Request("a", 0.0, 1, 5000), Request("b", 0.0, 1, 4000)]
    r = simulate(reqs, EngineConfig(max_num_seqs=1), "vllm", "unit", record="summary", fast=False,
                 progress=lambda now, done, total, waiting: calls.append((now, done, total, waiting)))
    assert r.makespan == 9000.0
    assert calls == [(4095.0, 0, 2, 1), (8191.0, 1, 2, 0)]


@pytest.mark.parametrize("limit", [0, 1, 7, 39, 40, 100])
def test_max_records_keeps_the_first_records_and_the_same_run(limit):
    # the seed under vllm at budget 256 has 40 steps (tests/test_seed.py): the first `limit` records are those of
    # the full run, and the step log, timelines and preemptions are the whole run's
    reqs = load_workload("seed")
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, num_gpu_blocks=138)
    full = simulate(reqs, cfg, "vllm", "toy")
    first = simulate(reqs, cfg, "vllm", "toy", max_records=limit)
    assert first.steps == full.steps[:limit]
    assert first.requests == full.requests and first.preemptions == full.preemptions
    assert len(first.step_log) == len(full.step_log) == len(full.steps)


# two cohort members that finish in one step free their blocks in running order, not heap order (found by the
# test below: the free queue's order then differed, and r8 missed a hit in step 22)
FINISH_ORDER = ([Request(i, t, p, o, hash_ids=h) for i, t, p, o, h in [
    ("r0", 1.0, 8, 18, ((1, 0), (0, 0))), ("r1", 1.0, 12, 24, ((0, 0), (1, 0), (1, 1))),
    ("r2", 0.0, 31, 19, ((0, 0), (0, 1), (0, 2), (0, 3), (2, 0), (2, 1), (2, 2), (2, 3))),
    ("r3", 0.0, 8, 1, ((3, 0), (3, 1))), ("r4", 0.0, 28, 23, ((0, 0), (0, 1), (0, 2), (4, 0), (4, 1), (4, 2), (4, 3))),
    ("r5", 1.0, 20, 6, ((0, 0), (5, 0), (5, 1), (5, 2), (5, 3))), ("r6", 1.0, 16, 3, ((6, 0), (6, 1), (6, 2), (6, 3))),
    ("r7", 0.0, 8, 1, ((0, 0), (7, 0))), ("r8", 1.0, 8, 1, ((1, 0), (8, 0))), ("r9", 0.0, 4, 1, ((9, 0),))]], 40, 64)


@SETTINGS
@given(prefix_workloads(max_output=40), st.sampled_from(["full", "summary"]))
@example(FINISH_ORDER, "full")
def test_prefix_caching_fast_path_is_step_by_step(w, record):
    # with caching on, the cohort's blocks are particular blocks of the pool: evictions, hits and every record
    # come out as a step-by-step run has them
    reqs, blocks, budget = w
    cfg = EngineConfig(max_num_batched_tokens=budget, max_num_seqs=4, block_size=4, num_gpu_blocks=blocks)
    try:
        slow = simulate(reqs, cfg, "vllm", "unit", record=record, fast=False)
    except ConfigError as exc:  # a request too big for this pool is refused before the run
        assert "whole pool" in str(exc)
        return
    fast = simulate(reqs, cfg, "vllm", "unit", record=record, fast=True)
    same_timelines(fast, slow)
    assert fast.prefix_cache == slow.prefix_cache
    assert [(s.scheduled, s.free_blocks_after_schedule, s.free_blocks_after_step, s.waiting) for s in fast.steps] == [
        (s.scheduled, s.free_blocks_after_schedule, s.free_blocks_after_step, s.waiting) for s in slow.steps]
    assert [s.cached_free_blocks_after_schedule for s in fast.steps] == [
        s.cached_free_blocks_after_schedule for s in slow.steps]
    for f in ("free_blocks_after_schedule", "cached_free_blocks_after_schedule"):
        assert np.array_equal(getattr(fast.step_log, f), getattr(slow.step_log, f)), f


@st.composite
def sglang_workloads(draw, speculation=False):
    """SGLang scenarios for the fast path: arrivals spread out (so prefill steps come between decode steps of a
    large batch), mixed chunk on/off, radix cache on/off, a small token pool that retracts or an unlimited one."""
    from servesim.engines.sglang.server_args import SGLangConfig

    n = draw(st.integers(1, 14))
    reqs = []
    for i in range(n):
        seg = draw(st.sampled_from([None, None, ((1, 8),), ((1, 8), (2, 4))]))
        p = sum(k for _, k in seg) if seg else draw(st.integers(1, 40))
        reqs.append(Request(f"r{i}", float(draw(st.integers(0, 30))) / 2, p, draw(st.integers(1, 30)),
                            hash_ids=tuple(t for t, k in seg for _ in range(k)) if seg else None,
                            hash_block_size=1 if seg else None, ignore_eos=draw(st.booleans()),
                            priority=draw(st.sampled_from([0, 5, 20, 40]))))
    radix = draw(st.booleans())
    chunk = draw(st.sampled_from([None, 8, 16, 64]))
    sg = SGLangConfig(max_total_num_tokens=draw(st.one_of(st.none(), st.integers(80, 300))),
                      page_size=draw(st.sampled_from([1, 1, 4])),
                      chunked_prefill_size=chunk, max_prefill_tokens=draw(st.sampled_from([16, 64, 16384])),
                      max_running_requests=draw(st.integers(1, 8)),
                      enable_mixed_chunk=chunk is not None and draw(st.booleans()),
                      disable_radix_cache=not radix,
                      schedule_policy=draw(st.sampled_from(["fcfs", "lpm", "lof", "random", "dfs-weight"])),
                      enable_priority_scheduling=draw(st.booleans()),
                      schedule_low_priority_values_first=draw(st.booleans()),
                      disable_overlap_schedule=draw(st.booleans()))
    if speculation:
        reqs, sg, rates = sglang_speculation(draw, reqs, sg)
        return reqs, EngineConfig(sglang=sg, acceptance_rate=rates)
    return reqs, EngineConfig(sglang=sg)


def same_records(fast, slow):
    assert len(fast.steps) == len(slow.steps)
    for a, b in zip(fast.steps, slow.steps):
        assert a.duration == pytest.approx(b.duration, rel=1e-12)
        assert a.start_time == pytest.approx(b.start_time, rel=1e-12, abs=1e-12)
        assert (a.scheduled, a.finished, a.preempted, a.waiting, a.arrivals, a.forward_mode, a.chunked_request) == (
            b.scheduled, b.finished, b.preempted, b.waiting, b.arrivals, b.forward_mode, b.chunked_request)
        assert (a.free_blocks_after_schedule, a.free_blocks_after_step, a.num_running_after,
                a.num_waiting_after) == (b.free_blocks_after_schedule, b.free_blocks_after_step,
                                         b.num_running_after, b.num_waiting_after)
        assert a.new_token_ratio == b.new_token_ratio or a.new_token_ratio == pytest.approx(b.new_token_ratio,
                                                                                             rel=1e-12)


@SETTINGS
@given(sglang_workloads(), st.sampled_from(["full", "steps", "summary"]))
def test_sglang_fast_path_is_step_by_step(case, record):
    # prefill-first steps pause the decode cohort (it keeps its members across them): records, token times and
    # the step log come out as a step-by-step run has them
    reqs, cfg = case
    try:
        slow = simulate(reqs, cfg, "sglang", "unit", record=record, fast=False)
    except ConfigError as exc:  # a request too big for this pool is refused before the run
        assert "pool" in str(exc)
        return
    fast = simulate(reqs, cfg, "sglang", "unit", record=record, fast=True)
    same_timelines(fast, slow)
    assert [r.token_times for r in fast.requests] == [r.token_times for r in slow.requests]
    assert fast.preemptions == slow.preemptions
    same_records(fast, slow)
    a, b = fast.step_log, slow.step_log
    assert len(a) == len(b)
    for f in ("num_scheduled", "num_tokens", "prefill_tokens", "num_decodes", "free_blocks_after_schedule",
              "num_running_after", "num_waiting_after", "num_preempted"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


@SETTINGS
@given(sglang_workloads(speculation=True), st.sampled_from(["full", "summary"]))
def test_sglang_speculative_fast_path_is_step_by_step(case, record):
    # speculation runs every step through schedule() (a verification is 1 + num_steps tokens, not the decode
    # cohort's one): the fast path's run is the step-by-step run, records, token times and drafts included
    reqs, cfg = case
    slow = simulate(reqs, cfg, "sglang", "unit", record=record, fast=False)
    fast = simulate(reqs, cfg, "sglang", "unit", record=record, fast=True)
    same_timelines(fast, slow)
    assert [r.token_times for r in fast.requests] == [r.token_times for r in slow.requests]
    assert fast.preemptions == slow.preemptions and fast.spec_decoding == slow.spec_decoding
    same_records(fast, slow)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([0.0, -0.0, 0.1, 1.0, 0.3, 1e-3]), st.sampled_from([0.0, -0.0, 0.1, 1.0, 0.7]),
       st.lists(st.integers(0, 3000), min_size=1, max_size=4))
def test_toy_decode_sums_are_the_step_by_step_sums(overhead, decode, counts):
    """The toy cost keeps overhead + decode + decode + ... per batch size (the fast path's stretches read it): the
    same floats as adding one decode at a time (0.1 x 3 is not 0.1 + 0.1 + 0.1), signed zeros included."""
    from servesim.cost.base import StepShape
    from servesim.cost.simple import ToyCost
    cost = ToyCost(decode_ms=decode, overhead_ms=overhead)
    for n in counts:
        ms = overhead
        for _ in range(n):
            ms += decode
        got = cost.step_time_with_decodes(n, 0, StepShape((), (), (), 0))
        assert str(got) == str(ms / 1000.0)
        assert str(cost.decode_stretch(n, 0, 2)) == str([cost.step_time(StepShape((1,) * n, (0,) * n, (True,) * n,
                                                                                  n))] * 2)


def test_sglang_bounded_pool_keeps_the_cohort_through_prefills_and_evictions(monkeypatch):
    """A small token pool full of radix cache: prefill steps the fast path is sure of pause the cohort (its
    members' reserve read at its clock), and decode steps short of slots evict the tree for them, as a
    step-by-step run does; both happen here, and the runs are the same."""
    from servesim.engine.fastpath import FastPath
    from servesim.engines.sglang.scheduler import SGLangScheduler
    from servesim.engines.sglang.server_args import SGLangConfig

    taken = {"prefill": 0, "room": 0}
    sure, room = SGLangScheduler._sure_to_admit, FastPath._make_room

    def counted_sure(self, step, clock):
        ok = sure(self, step, clock)
        taken["prefill"] += ok
        return ok

    def counted_room(engine, growth):
        ok = room(engine, growth)
        taken["room"] += ok
        return ok

    monkeypatch.setattr(SGLangScheduler, "_sure_to_admit", counted_sure)
    monkeypatch.setattr(FastPath, "_make_room", staticmethod(counted_room))
    # 24 requests, 20-token prompts with 4..27 outputs, one every 1.5 steps, into a 200-token pool: finished
    # requests' tokens stay in the tree until a decode or a prefill needs the room
    reqs = [Request(f"r{i}", 1.5 * i, 20, 4 + (7 * i) % 24) for i in range(24)]
    cfg = EngineConfig(sglang=SGLangConfig(max_total_num_tokens=200, max_running_requests=6))
    slow = simulate(reqs, cfg, "sglang", "unit", record="steps", fast=False)
    fast = simulate(reqs, cfg, "sglang", "unit", record="steps", fast=True)
    same_timelines(fast, slow)
    same_records(fast, slow)
    assert taken["prefill"] > 0 and taken["room"] > 0


@SETTINGS
@given(scenarios(speculation=True))
def test_speculative_decoding_fast_path_is_step_by_step(scenario):
    # speculation runs every step through schedule() (a decode there is 1 + K tokens, not the cohort's one): the
    # fast path's run is the step-by-step run, record for record
    test_full_records_are_identical.hypothesis.inner_test(scenario)


@st.composite
def trtllm_workloads(draw):
    """TensorRT-LLM scenarios: each capacity policy, chunked context under both chunking policies or off, block
    reuse on shared prefixes, a small pool (pauses under MAX_UTILIZATION, waits under GUARANTEED_NO_EVICT) or an
    unlimited one, few seats and a small batch, the overlap scheduler on or off."""
    from servesim.engines.trtllm.llm_args import TrtllmConfig

    n = draw(st.integers(1, 12))
    reqs = []
    for i in range(n):
        shared = draw(st.sampled_from([0, 0, 1, 2]))
        p = draw(st.integers(1, 40)) + 4 * shared
        ids = tuple(("s", k) for k in range(shared)) + tuple((i, k) for k in range(-(-(p - 4 * shared) // 4)))
        reqs.append(Request(f"r{i}", float(draw(st.integers(0, 30))) / 2, p, draw(st.integers(1, 30)),
                            hash_ids=ids if shared else None, hash_block_size=4 if shared else None))
    chunked = draw(st.booleans())
    trt = TrtllmConfig(max_batch_size=draw(st.integers(1, 8)), max_num_tokens=draw(st.sampled_from([8, 16, 64])),
                       enable_chunked_prefill=chunked,
                       capacity_scheduler_policy=draw(st.sampled_from(["GUARANTEED_NO_EVICT", "MAX_UTILIZATION",
                                                                       "STATIC_BATCH"])),
                       context_chunking_policy=draw(st.sampled_from([None, "EQUAL_PROGRESS"])),
                       max_tokens=draw(st.one_of(st.none(), st.integers(80, 300))), tokens_per_block=4,
                       enable_block_reuse=draw(st.booleans()), disable_overlap_scheduler=draw(st.booleans()))
    if not chunked:  # (80: a context paused under MAX_UTILIZATION, up to 48 + 29 tokens, still fits one batch)
        trt = TrtllmConfig(**{**{f: getattr(trt, f) for f in trt.__slots__}, "max_num_tokens": 80})
    return reqs, EngineConfig(trtllm=trt)


@SETTINGS
@given(trtllm_workloads(), st.sampled_from(["full", "steps", "summary"]))
def test_trtllm_fast_path_is_step_by_step(case, record):
    # every trtllm step goes through schedule() (`TrtllmScheduler.stretches`): the fast path must leave it so
    reqs, cfg = case
    slow = simulate(reqs, cfg, "trtllm", "unit", record=record, fast=False)
    fast = simulate(reqs, cfg, "trtllm", "unit", record=record, fast=True)
    same_timelines(fast, slow)
    assert [r.token_times for r in fast.requests] == [r.token_times for r in slow.requests]
    assert fast.preemptions == slow.preemptions
    same_records(fast, slow)


@SETTINGS
@given(trtllm_workloads())
def test_trtllm_invariants_and_every_request_finishes(case):
    # budget, batch size, KV books never over-allocated (check_invariants, after every step); every request that
    # was not refused for its length finishes with all its outputs; GUARANTEED_NO_EVICT never pauses anyone
    reqs, cfg = case
    r = simulate(reqs, cfg, "trtllm", "unit", check_invariants=True)
    by_id = {q.request_id: q for q in reqs}
    done = [t for t in r.requests if t.id not in r.rejected]
    assert all(t.finish_time is not None and len(t.token_times) == by_id[t.id].output_len for t in done)
    assert len(done) + len(r.rejected) == len(reqs)
    if cfg.trtllm.capacity_scheduler_policy != "MAX_UTILIZATION":
        assert r.preemptions == ()


EP_LAYOUTS = [("vllm --tp 2 --enable-expert-parallel", {"tp": 2, "enable_expert_parallel": True}),
              ("sglang --tp 4 --ep-size 2 (MoE TP 2)", {"tp": 4, "ep_size": 2}),
              ("sglang --tp 4 --moe-a2a-backend deepep (auto: normal kernels in prefill steps)",
               {"tp": 4, "moe_a2a_backend": "deepep"})]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(EP_LAYOUTS))
def test_expert_parallel_layouts_fast_path_is_step_by_step(scenario, layout):
    """Expert parallelism in one engine (one data-parallel rank) enters the engine loop: its all-to-all (DeepEP's
    auto mode switching kernels with the step's prefill) is in the decode stretches as in each step."""
    from servesim.cost import Roofline
    from servesim.cost.layout import from_flags

    requests, config, policy = scenario
    if config.max_model_len is None:  # (the scenario's, as under the toy cost: not the model's 40,960)
        config = replace(config, max_model_len=max(r.prompt_len + r.output_len for r in requests))
    spec = config.speculative_config
    if spec is not None and spec.method == "draft_model" and spec.model is None:  # (the roofline prices its model)
        config = replace(config, speculative_config=replace(spec, model="qwen2.5-7b"))
    flags = dict(layout[1])
    tp = flags.pop("tp")
    engine = "sglang" if "ep_size" in flags or "moe_a2a_backend" in flags else "vllm"
    cost = Roofline("qwen3-30b-a3b", "h100", layout=from_flags(engine, tp, **flags))
    fast = simulate(requests, config, policy, cost, record="full", fast=True)
    slow = simulate(requests, config, policy, cost, record="full", fast=False)
    same_timelines(fast, slow)
    assert [s.duration for s in fast.steps] == pytest.approx([s.duration for s in slow.steps], rel=1e-12)
