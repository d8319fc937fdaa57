"""Clusters: replicas behind a router on one clock, and prefill/decode disaggregation (issue 16).

Toy cost throughout (`servesim.cost.simple`): a step costs 1 ms per decoding request + 0.1 ms per prefill token.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.cluster import Pool, simulate_cluster
from servesim.cluster.routers import ROUTERS, make_router
from servesim.engine import simulate
from servesim.engine.records import Reason
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError
from servesim.workloads.sessions import conversations

MS = 1e-3


def test_round_robin_two_replicas_four_requests():
    # r0 -> 0, r1 -> 1, r2 -> 0, r3 -> 1. Replica 0 prefills 10 + 30 tokens (4 ms), then decodes both (2 ms);
    # replica 1 prefills 20 + 40 (6 ms), then decodes both (2 ms)
    reqs = [Request(f"r{i}", 0.0, 10 * (i + 1), 2) for i in range(4)]
    c = simulate_cluster(reqs, num_replicas=2, router="round-robin")
    assert c.placement == (0, 1, 0, 1)
    t = {r.id: r for r in c.cluster.requests}
    assert [t[f"r{i}"].ttft for i in range(4)] == pytest.approx([4 * MS, 6 * MS, 4 * MS, 6 * MS])
    assert [t[f"r{i}"].e2el for i in range(4)] == pytest.approx([6 * MS, 8 * MS, 6 * MS, 8 * MS])
    assert [len(r.steps) for r in c.replicas] == [2, 2]
    m = c.benchmark()
    assert m.completed == 4 and m.duration == pytest.approx(8 * MS)
    assert m["ttft"].mean == pytest.approx(5.0)  # ms
    assert m.max_output_tokens_per_s == 8  # every token in the first second
    assert [row["requests"] for row in c.to_json()["replicas"]] == [2, 2]


def test_least_loaded_avoids_a_blocked_replica():
    # 8 usable blocks of 16 tokens per replica. r0 (100 + 20 tokens: 7 blocks to admit, 8 at the end) -> replica 0;
    # r1 -> replica 1 (load 0 against 1). r2 at 2 ms: both run one request, a tie -> replica 0, where its 4 blocks
    # do not fit beside r0's 7: it waits. r3 at 3 ms: replica 0 reports 2 (one running, one waiting), replica 1 one.
    cfg = EngineConfig(num_gpu_blocks=9)
    reqs = [Request("r0", 0.0, 100, 20), Request("r1", 0.0, 50, 5), Request("r2", 0.002, 60, 5),
            Request("r3", 0.003, 30, 5)]
    c = simulate_cluster(reqs, num_replicas=2, config=cfg, router="least-loaded")
    assert c.placement == (0, 1, 0, 1)
    r3 = c.routes_of("r3")[0]
    assert r3.scores == (2.0, 1.0) and r3.states[0].waiting == 1
    waits = [w for s in c.replicas[0].steps for w in s.waiting if w.id == "r2"]
    assert waits and all(w.reason is Reason.KV_BLOCKS for w in waits)
    # r0: prefill 10 ms, 19 decodes of 1 ms: done at 29 ms; then r2 prefills 60 tokens (6 ms): first token at 35 ms
    assert c.cluster.request("r0").finish_time == pytest.approx(29 * MS)
    assert c.cluster.request("r2").ttft == pytest.approx(33 * MS)


def test_prefix_aware_keeps_a_conversation_on_one_replica():
    conv = conversations(6, 4, 64, 16, 0, 0.05, 20.0, 0)  # 6 conversations, 4 turns each
    cfg = EngineConfig(num_gpu_blocks=2000)

    def replicas_per_conversation(router):
        c = simulate_cluster(conv, num_replicas=3, config=cfg, router=router)
        placed = {}
        for r, j in zip(conv, c.placement):
            placed.setdefault(r.request_id.split("-")[0], set()).add(j)
        return c, placed

    c, placed = replicas_per_conversation("prefix-aware")
    assert all(len(js) == 1 for js in placed.values())
    # a later turn's prompt is its conversation so far: the replica that served it holds all but its new message
    later = [r for r in c.routes if not r.request_id.endswith("-t0")]
    assert all(r.prefix[r.candidates.index(r.replica)] > 0 for r in later)
    _, spread = replicas_per_conversation("round-robin")
    assert any(len(js) > 1 for js in spread.values())


def test_disaggregated_ttft_transfer_and_itl():
    # prefill: 100 tokens, 10 ms, first token at 10 ms (TTFT). KV: 100 tokens x 131072 bytes at 2.62144 GB/s = 5 ms,
    # + 1 ms latency: lands at 16 ms. Decode: one token a step, 1 ms: tokens 2-4 at 17, 18, 19 ms.
    reqs = [Request("a", 0.0, 100, 4)]
    cfg = EngineConfig(num_gpu_blocks=100)
    c = simulate_cluster(reqs, [Pool(1, cfg, role="prefill"), Pool(1, cfg, role="decode")],
                         kv_transfer_bandwidth=100 * 131072 / 0.005, kv_transfer_latency=0.001)
    r = c.cluster.request("a")
    assert r.ttft == pytest.approx(10 * MS)
    assert r.token_times == pytest.approx([10 * MS, 17 * MS, 18 * MS, 19 * MS])
    (t,) = c.transfers
    assert (t.ready, t.start, t.end, t.num_bytes) == pytest.approx((10 * MS, 10 * MS, 16 * MS, 13107200))
    m = c.benchmark(percentiles=(50.0,))
    assert m["itl"].mean == pytest.approx(3.0)  # (7 + 1 + 1) / 3 ms: the transfer gap is an ITL
    assert m["tpot"].mean == pytest.approx(3.0)
    # the prefill replica keeps the 7 blocks until the transfer lands; the decode replica admits with 101 tokens
    assert c.replicas[0].steps[0].free_blocks_after_step == 99 - 7
    assert c.replicas[1].steps[0].free_blocks_after_schedule == 99 - 7
    s = c.transfer_summary()
    assert s["mean_kv_transfer_ms"] == pytest.approx(6.0)
    assert s["kv_transfer_link_utilization"] == pytest.approx(5 / 19)


def test_transfers_queue_on_the_link_and_blocks_come_back():
    # two 100-token prompts prefill together (20 ms); each transfer takes 10 ms on the one link: 20-30, 30-40 ms
    reqs = [Request("a", 0.0, 100, 2), Request("b", 0.0, 100, 2), Request("c", 0.035, 16, 2)]
    cfg = EngineConfig(num_gpu_blocks=100)
    c = simulate_cluster(reqs, [Pool(1, cfg, role="prefill"), Pool(1, cfg, role="decode")],
                         kv_transfer_bandwidth=100 * 131072 / 0.010)
    assert [x for t in c.transfers[:2] for x in (t.start, t.end)] == pytest.approx([0.020, 0.030, 0.030, 0.040])
    # c prefills at 35 ms: a's 7 blocks are back, b's (landing at 40 ms) not yet: 99 - 7 free, minus c's 1
    step = next(s for s in c.replicas[0].steps if s.scheduled.has("c"))
    assert step.free_blocks_after_schedule == 99 - 7 - 1


@settings(max_examples=40, deadline=None)
@given(
    arrivals=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 300), st.integers(1, 30)), min_size=1,
                      max_size=12),
    router=st.sampled_from(sorted(ROUTERS)),
    blocks=st.sampled_from([None, 40, 200]),
    fast=st.booleans(),
)
def test_one_replica_behind_any_router_is_the_engine(arrivals, router, blocks, fast):
    reqs = [Request(f"r{i}", t * MS, p, o) for i, (t, p, o) in enumerate(arrivals)]
    cfg = EngineConfig(num_gpu_blocks=blocks, max_num_batched_tokens=256, max_num_seqs=4)
    try:
        plain = simulate(reqs, cfg, "vllm", "toy", fast=fast)
    except ConfigError:
        return  # a request longer than the whole pool: refused the same way below
    c = simulate_cluster(reqs, num_replicas=1, config=cfg, router=router, fast=fast)
    assert c.replicas[0].steps == plain.steps
    assert c.cluster.requests == plain.requests
    assert c.replicas[0].preemptions == plain.preemptions


def test_one_replica_closed_loop_is_the_engine():
    conv = conversations(4, 3, 64, 16, 0, 0.5, 2.0, 0)
    cfg = EngineConfig(num_gpu_blocks=400)
    c = simulate_cluster(conv, num_replicas=1, config=cfg, router="prefix-aware")
    plain = simulate(conv, cfg)
    assert c.replicas[0].steps == plain.steps and c.cluster.requests == plain.requests


def test_router_delay_sees_older_reports():
    # with a 5 ms delay the router at 3 ms still sees the empty cluster of the report at 0 (before any arrival)
    reqs = [Request("a", 0.0, 100, 20), Request("b", 0.003, 10, 2)]
    now = simulate_cluster(reqs, num_replicas=2, router="least-loaded")
    late = simulate_cluster(reqs, num_replicas=2, router="least-loaded", router_delay=0.005)
    assert now.placement == (0, 1) and late.placement == (0, 0)


def test_bad_input_is_one_line():
    with pytest.raises(ConfigError, match="unknown router"):
        make_router("fastest")
    with pytest.raises(ConfigError, match="NAME=WEIGHT"):
        make_router("weighted:prefix=x")
    with pytest.raises(ConfigError, match="num-replicas"):
        simulate_cluster([Request("a", 0.0, 1, 1)], num_replicas=0)
    with pytest.raises(ConfigError, match="prefill and decode pools only"):
        simulate_cluster([Request("a", 0.0, 1, 1)], [Pool(1), Pool(1, role="decode")])


def test_a_replica_in_the_middle_of_a_step_reports_its_requests_as_running():
    # toy cost: 100-token prompts with one output token are one 10 ms step each, arriving every 4 ms. At 4 ms
    # replica 0 is still running r0 (0-10 ms), so least-loaded sends r1 to replica 1, r2 (8 ms) to replica 2; at
    # 12 ms replica 0 is free again (ties go to the lowest index): the three take turns and nobody waits, TTFT 10 ms.
    # (Reporting the state after the step in flight, r0 already done, sent r1 to replica 0 behind it.)
    reqs = [Request(f"r{i}", i * 0.004, 100, 1) for i in range(30)]
    c = simulate_cluster(reqs, num_replicas=6, router="least-loaded")
    assert c.placement == (0, 1, 2) * 10
    assert [r.ttft for r in c.cluster.requests] == pytest.approx([0.010] * 30)
    assert c.routes_of("r1")[0].states[0].running == 1


# -- the benchmark client's cap spans the cluster (vllm bench serve --max-concurrency) ------------------------------

@pytest.mark.parametrize("cap", [1, 4, 32])
@pytest.mark.parametrize("router", ["round-robin", "least-loaded"])
def test_one_replica_with_a_client_cap_is_the_plain_engine(cap, router):
    from servesim.workloads import load_workload

    reqs = load_workload("azure-conv-sample")[:150]
    cfg = EngineConfig(max_concurrency=cap, max_num_seqs=64, max_num_batched_tokens=2048)
    plain = simulate(reqs, cfg, "vllm", "toy")
    one = simulate_cluster(reqs, num_replicas=1, config=cfg, policy="vllm", cost="toy", router=router)
    a, b = plain.timelines, one.cluster.timelines
    assert np.array_equal(a.arrival_time, b.arrival_time) and np.array_equal(a.finish_time, b.finish_time)


def test_a_closed_loop_of_2_over_two_replicas():
    # unit cost, 10-token prompts, 2 output tokens: a request takes steps [t, t+1] (prompt, first token) and
    # [t+1, t+2]. r0, r1 go at 0 to replicas 0 and 1 (round-robin) and finish at 2; r2, r3 wait at the client
    # and are sent then, to replicas 0 and 1, finishing at 4
    reqs = [Request(f"r{i}", 0.0, 10, 2) for i in range(4)]
    c = simulate_cluster(reqs, num_replicas=2, config=EngineConfig(max_concurrency=2), policy="vllm", cost="unit")
    t = c.cluster.timelines
    assert t.arrival_time.tolist() == [0.0, 0.0, 2.0, 2.0] and t.finish_time.tolist() == [2.0, 2.0, 4.0, 4.0]
    assert [r.replica for r in c.routes] == [0, 1, 0, 1]


def test_pools_must_agree_on_the_client_cap():
    with pytest.raises(ConfigError, match="the client's cap spans the cluster"):
        simulate_cluster([Request("a", 0.0, 4, 2)], [Pool(1, EngineConfig(max_concurrency=2), "vllm", "unit",
                                                          "prefill"),
                                                     Pool(1, EngineConfig(max_concurrency=3), "vllm", "unit",
                                                          "decode")])
