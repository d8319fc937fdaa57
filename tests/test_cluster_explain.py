"""explain / compare / trace on a cluster (issue 16): sentences from the recorded routing decisions.

Toy cost throughout (`servesim.cost.simple`): a step costs 1 ms per decoding request + 0.1 ms per prefill token.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servesim.cli import app
from servesim.cluster import Pool, simulate_cluster
from servesim.cluster.compare import cluster_rows, cluster_sentences, parse_cluster_set
from servesim.cluster.explain import explain_cluster_request
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError

MS = 1e-3


def test_least_loaded_sentence_names_every_candidate_load():
    # test_cluster.py's blocked replica: at 3 ms replica 0 runs r0 with r2 waiting (2), replica 1 runs r1 (1)
    reqs = [Request("r0", 0.0, 100, 20), Request("r1", 0.0, 50, 5), Request("r2", 0.002, 60, 5),
            Request("r3", 0.003, 30, 5)]
    c = simulate_cluster(reqs, num_replicas=2, config=EngineConfig(num_gpu_blocks=9), router="least-loaded")
    lines = explain_cluster_request(c, "r3")
    assert lines[0] == "r3 went to replica-1 at 3 ms: least-loaded, 0 waiting + 1 running there (replica-0: 2)."
    assert lines[1].startswith("r3 arrived at 3 ms")  # then the engine's own account, from replica 1's records


def test_prefix_aware_sentence_counts_cached_tokens():
    # 16-token blocks. a (hashes 1-4) -> replica 0, b -> replica 1 (least loaded, no prefix anywhere); both done
    # by 100 ms. c (hashes 1, 2, 3, 9): replica 0 holds its first 3 blocks = 48 of its 64 tokens, replica 1 none
    cfg = EngineConfig(num_gpu_blocks=100, enable_prefix_caching=True)
    reqs = [Request("a", 0.0, 64, 2, hash_ids=(1, 2, 3, 4)), Request("b", 0.0, 64, 2, hash_ids=(5, 6, 7, 8)),
            Request("c", 0.1, 64, 2, hash_ids=(1, 2, 3, 9))]
    c = simulate_cluster(reqs, num_replicas=2, config=cfg, router="prefix-aware")
    assert c.placement == (0, 1, 0)
    lines = explain_cluster_request(c, "c")
    assert lines[0] == ("c went to replica-0 at 100 ms: prefix-aware, 48 of its 64 prompt tokens cached there "
                        "(replica-1: 0; load cap 8 not reached).")
    assert any("48 of its 64 tokens in step" in line for line in lines)  # the replica's prefix-cache hit


def test_weighted_sentence_adds_up_the_scorers():
    # at 3 ms (no KV limit: KV use 0 everywhere) replica 0 runs a (load 1), replica 1 nothing: queue 1 - 1/1 = 0
    # and 1 - 0/1 = 1; kv 1 each: replica 0 scores 2 x 0 + 1 x 1 = 1, replica 1 2 x 1 + 1 x 1 = 3
    reqs = [Request("a", 0.0, 100, 20), Request("b", 0.003, 10, 2)]
    c = simulate_cluster(reqs, num_replicas=2, router="weighted:queue=2,kv=1")
    assert explain_cluster_request(c, "b")[0] == (
        "b went to replica-1 at 3 ms: weighted:queue=2,kv=1, score 3.00 there = queue 2 x 1.00 + kv 1 x 1.00 "
        "(replica-0: 1.00).")


def test_pd_explanation_has_both_picks_and_the_transfer():
    # test_cluster.py's P/D scenario: prefill 10 ms, 5 ms on the link + 1 ms latency, 3 decodes of 1 ms
    cfg = EngineConfig(num_gpu_blocks=100)
    c = simulate_cluster([Request("a", 0.0, 100, 4)], [Pool(1, cfg, role="prefill"), Pool(1, cfg, role="decode")],
                         kv_transfer_bandwidth=100 * 131072 / 0.005, kv_transfer_latency=0.001)
    lines = explain_cluster_request(c, "a")
    assert lines[:3] == [
        "a went to prefill-0 at 0 ms: the only replica of its pool.",
        "a went to decode-1 at 0 ms: the only replica of its pool.",
        "Its KV (13,107,200 bytes) left prefill-0 at 10 ms (first token at 10 ms) and landed on decode-1 at 16 ms: "
        "6 ms from its first token, one of its gaps between tokens."]
    assert "On decode-1: queued when its KV landed (16 ms) and admitted at once (16 ms)." in lines
    assert lines[-1] == "Then 3 more tokens there, TPOT 3 ms (the transfer included); finished at 19 ms (E2EL 19 ms)."


def test_compare_rows_and_sentence_for_two_routers():
    # least-loaded sends b to the idle replica 1; round-robin too (its turn): equal; weighted:kv=1 sees KV use 0
    # everywhere (no KV limit) and keeps the lowest index: b waits behind a's prefill on replica 0 (10 ms)
    reqs = [Request("a", 0.0, 100, 2), Request("b", 0.001, 10, 2)]
    runs = {r: simulate_cluster(reqs, num_replicas=2, router=r) for r in ("round-robin", "weighted:kv=1")}
    rows = dict(cluster_rows(runs))
    assert rows["Requests per replica (fewest-most)"] == ["1-1", "0-2"]
    # round-robin: a TTFT 10 ms, b 1 ms (prefill 1 ms from 1 ms): mean 5.5. weighted: b waits to 10 ms, then
    # a decode + b's prefill (1 + 1 ms): b's first token at 12 ms, TTFT 11 ms: mean 10.5
    assert rows["Mean TTFT (ms)"] == ["5.50", "10.50"]
    assert cluster_sentences(runs)[0].startswith("weighted:kv=1 vs round-robin: mean TTFT rose from 5.5 ms to "
                                                 "10.5 ms")


def test_parse_cluster_set_keeps_weighted_pairs_together():
    assert parse_cluster_set("router=round-robin,weighted:prefix=3,kv=1") == (
        "router", ["round-robin", "weighted:prefix=3,kv=1"])
    assert parse_cluster_set("num_replicas=1,2,4") == ("num_replicas", [1, 2, 4])
    with pytest.raises(ConfigError, match="unknown router"):
        parse_cluster_set("router=fastest")
    with pytest.raises(ConfigError, match="integer >= 1"):
        parse_cluster_set("num_replicas=0")


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_cli_explain_compare_trace_take_the_cluster_options(tmp_path):
    # the seed workload (A-D at 0 ms, L at 20 ms) on 2 replicas, round-robin: L is the 5th, replica 0's turn
    out = invoke("explain", "--workload", "seed", "--cost", "toy", "--num-replicas", "2", "--request", "L")
    assert out.exit_code == 0, out.output
    assert "L went to replica-0 at 20 ms: round-robin, its turn (2 replicas in turn)." in out.output
    out = invoke("compare", "--workload", "seed", "--cost", "toy", "--set", "num_replicas=1,2")
    assert out.exit_code == 0, out.output
    assert "2 vs 1: mean TTFT fell" in out.output
    out = invoke("trace", "--workload", "seed", "--cost", "toy", "--num-replicas", "2", "--json",
                 str(tmp_path / "t.json"))
    assert out.exit_code == 0, out.output
    assert "replica-0: 3 requests" in out.output and "replica-1: 2 requests" in out.output
    data = json.loads((tmp_path / "t.json").read_text())
    assert {s["replica"] for s in data["steps"]} == {"replica-0", "replica-1"}
    assert [r["replica"] for r in data["requests"]] == ["replica-0", "replica-1", "replica-0", "replica-1",
                                                        "replica-0"]
    assert isinstance(invoke("compare", "--workload", "seed", "--set", "router=fastest").exception, ConfigError)


@settings(max_examples=30, deadline=None)
@given(
    arrivals=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 300), st.integers(1, 30)), min_size=1,
                      max_size=14),
    router=st.sampled_from(["round-robin", "random", "least-loaded", "least-kv"]),
    n=st.integers(2, 4),
    fast=st.booleans(),
)
def test_each_replica_is_the_engine_on_what_it_was_sent(arrivals, router, n, fast):
    # routed up front (round-robin, random) or at each arrival (the others), every replica runs exactly as the
    # plain engine does on the requests it was given
    reqs = [Request(f"r{i}", t * MS, p, o) for i, (t, p, o) in enumerate(arrivals)]
    cfg = EngineConfig(num_gpu_blocks=200, max_num_batched_tokens=256, max_num_seqs=4)
    c = simulate_cluster(reqs, num_replicas=n, config=cfg, router=router, fast=fast)
    for j in range(n):
        mine = [r for r, p in zip(reqs, c.placement) if p == j]
        if mine:
            assert c.replicas[j].steps == simulate(mine, cfg, "vllm", "toy", fast=fast).steps
