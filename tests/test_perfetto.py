"""`servesim export perfetto`: the Chrome trace event format (the JSON Object Format of Google's "Trace Event
Format" document, which ui.perfetto.dev and chrome://tracing read), and the lesson's seed scenario in it.

Seed numbers (../shared/spec/lesson.txt, derived in tests/test_seed.py): toy cost 1 ms per decode, 0.1 ms per
prefill token; at budget 256 beside 4 decodes L's 2000-token prompt is cut into 7 chunks of 252 (4 + 25.2 =
29.2 ms steps) and one of 236 (4 + 23.6 = 27.6 ms), from 20.8 ms; unchunked (continuous) it is one 204 ms step.
"""

import json
from collections import defaultdict

import pytest
from helpers import cli
from hypothesis import given
from test_properties import SETTINGS, scenarios

from servesim.analysis.metrics import prompt_tokens_processed
from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.export.perfetto import cluster_trace_events, trace_events
from servesim.workloads import load_workload

US_PER_MS = 1000.0
CORE = ("ph", "ts", "pid", "tid", "name")


def seed(policy, **cfg):
    return simulate(load_workload("seed"), EngineConfig(max_num_seqs=8, **cfg), policy, "toy")


def check_format(trace: dict) -> None:
    """Required fields, known phases, microsecond numbers, and slices on one track disjoint or nested."""
    assert trace["displayTimeUnit"] == "ms"
    tracks = defaultdict(list)
    for e in trace["traceEvents"]:
        assert all(k in e for k in CORE), e
        assert e["ph"] in ("X", "C", "M"), e
        assert isinstance(e["ts"], int | float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        if e["ph"] == "C":
            assert all(isinstance(v, int | float) for v in e["args"].values()), e
    for slices in tracks.values():
        stack: list[float] = []  # ends of the open enclosing slices
        for start, end in sorted(slices, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= start + 1e-3:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-3, "slices overlap without nesting"
            stack.append(end)


def request_tracks(trace: dict) -> dict[str, list[dict]]:
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] != 0}
    out = {name: [] for name in names.values()}
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["tid"] in names:
            out[names[e["tid"]]].append(e)
    return out


def test_seed_trace_is_well_formed_with_one_track_per_request():
    trace, summary = trace_events(seed("vllm", max_num_batched_tokens=256))
    check_format(trace)
    tracks = request_tracks(trace)
    assert sorted(tracks) == ["L", "d0", "d1", "d2", "d3"]  # one track each, named by id
    tids = [e["tid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len(tids) == len(set(tids)) == 6  # the steps' track and five requests
    assert summary.step_groups == summary.steps == 40 and summary.requests_kept == 5
    # microseconds: L arrives at 20 ms and waits for the step in flight (16.8-20.8 ms)
    queued = [e for e in tracks["L"] if e["name"] == "queued"]
    assert [(q["ts"], q["dur"]) for q in queued] == [(20000.0, 800.0)]


def test_seed_long_prompt_is_eight_prefill_slices_beside_decodes():
    trace, _ = trace_events(seed("vllm", max_num_batched_tokens=256))
    chunks = [e for e in request_tracks(trace)["L"] if e["cat"] == "prefill"]
    assert [c["args"]["tokens"] for c in chunks] == [252] * 7 + [236]
    assert [c["dur"] for c in chunks] == pytest.approx([29.2 * US_PER_MS] * 7 + [27.6 * US_PER_MS])
    assert chunks[0]["ts"] == pytest.approx(20.8 * US_PER_MS)
    assert [c["args"]["steps"] for c in chunks] == [str(i) for i in range(3, 11)]
    # the steps' track: step 3 carries L's first chunk beside the four decodes
    step3 = next(e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "step 3")
    assert step3["args"]["batch"] == "L:252 d0:1 d1:1 d2:1 d3:1"
    assert step3["dur"] == pytest.approx(29.2 * US_PER_MS)
    # each d request decodes in one run: steps 1-39 (step 0's prompt chunk sampled its first token)
    d0 = [e for e in request_tracks(trace)["d0"] if e["cat"] == "decode"]
    assert [(e["args"]["steps"], e["args"]["tokens"]) for e in d0] == [("1-39", 39)]


def test_continuous_prefills_whole_in_one_204_ms_slice():
    trace, _ = trace_events(seed("continuous"))
    chunks = [e for e in request_tracks(trace)["L"] if e["cat"] == "prefill"]
    assert [(c["args"]["tokens"], c["dur"]) for c in chunks] == [(2000, pytest.approx(204 * US_PER_MS))]


def test_static_queued_slice_says_the_batch_was_closed():
    trace, _ = trace_events(seed("static"))
    queued = next(e for e in request_tracks(trace)["L"] if e["cat"] == "queued")
    # L waits from 20 ms to step 40 at 168.8 ms, in steps 3-39, for the running batch (tests/test_seed.py)
    assert queued["ts"] == pytest.approx(20 * US_PER_MS)
    assert queued["dur"] == pytest.approx(148.8 * US_PER_MS)
    assert queued["args"]["detail"] == "waited: batch_closed in 37 steps"
    assert queued["args"]["steps"] == "3-39"


def test_counters_add_up_to_the_pool_and_the_budget():
    r = seed("vllm", max_num_batched_tokens=256, num_gpu_blocks=200)
    trace, _ = trace_events(r)
    kv = [e["args"] for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "KV blocks"]
    tokens = [e["args"] for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "scheduled tokens"]
    assert len(kv) == len(tokens) == 40
    assert all(a["used"] + a["free"] == r.config.usable_blocks == 199 for a in kv)  # one block is vLLM's null block
    assert all(a["decode"] + a["prefill"] + a["unused budget"] == 256 for a in tokens)
    assert tokens[3] == {"decode": 4, "prefill": 252, "unused budget": 0}


@pytest.mark.parametrize("mode,kind", [("recompute", "preempted"), ("swap", "swapped")])
def test_preemption_slice_lasts_as_long_as_the_timeline_says(mode, kind):
    # README's scenario: 138 blocks, L's 2000 tokens need 125 and the decodes grow into them; L is preempted
    r = seed("vllm", max_num_batched_tokens=256, num_gpu_blocks=138, preemption_mode=mode)
    trace, _ = trace_events(r)
    held = [e for e in request_tracks(trace)["L"] if e["cat"] == kind]
    L = r.request("L")
    assert len(held) == L.num_preemptions == 1
    assert held[0]["ts"] == pytest.approx(r.steps[r.preemptions[0].step].start_time * 1e6)
    assert held[0]["dur"] == pytest.approx(L.time_preempted * 1e6)
    check_format(trace)


def test_cap_merges_steps_and_keeps_every_kth_request():
    reqs = load_workload("azure-conv-sample")
    r = simulate(reqs, None, "vllm", "toy")
    trace, summary = trace_events(r, max_events=2000)
    check_format(trace)
    assert len(trace["traceEvents"]) <= 2000
    assert summary.step_groups == 2000 // 2 // 7 < summary.steps
    assert 0 < summary.requests_kept < summary.requests == 456
    assert "merged" in trace["otherData"]["aggregated"]
    full, everything = trace_events(r, max_events=None)
    assert everything.requests_kept == 456 and everything.step_groups == everything.steps


@SETTINGS
@given(scenarios())
def test_slices_account_for_every_token(scenario):
    requests, config, policy = scenario
    r = simulate(requests, config, policy, "unit")
    trace, _ = trace_events(r, max_events=None)
    check_format(trace)
    tracks = request_tracks(trace)
    assert set(tracks) == {q.request_id for q in requests}
    slices = [e for t in tracks.values() for e in t]
    assert sum(e["args"]["tokens"] for e in slices if e["cat"] == "prefill") == prompt_tokens_processed(r)
    if not config.async_scheduling:  # every decode samples a token (async scheduling may drop the last)
        assert sum(e["args"]["tokens"] for e in slices if e["cat"] == "decode") == sum(s.num_decodes for s in r.steps)
    assert sum(e["cat"] in ("preempted", "swapped") for e in slices) == len(r.preemptions)


def test_cli_writes_the_trace(tmp_path, monkeypatch, capsys):
    out = tmp_path / "trace.json"
    code, stdout, _ = cli(monkeypatch, capsys, "export", "perfetto", "--workload", "seed",
                          "--max-num-batched-tokens", "256", "-o", str(out))
    assert code == 0 and f"wrote {out}" in stdout
    check_format(json.loads(out.read_text()))


@pytest.mark.parametrize("args,message", [
    (["--max-events", "50"], "--max-events 50: expected 0 (no cap) or a count >= 100"),
    (["-o", "/nonexistent-dir/t.json"], "--output /nonexistent-dir/t.json: folder /nonexistent-dir does not exist"),
])
def test_cli_refuses_bad_options_in_one_line(monkeypatch, capsys, args, message):
    code, _, err = cli(monkeypatch, capsys, "export", "perfetto", "--workload", "seed", *args)
    assert code == 2
    assert err.strip() == f"servesim: error: {message}"


def test_a_run_where_every_request_failed_has_empty_tracks():
    # max_model_len 10: every seed request (32 + 40 tokens, L 2000 + 5) is rejected on arrival, as vLLM does
    r = seed("vllm", max_num_batched_tokens=256, max_model_len=10)
    trace, summary = trace_events(r)
    check_format(trace)
    assert summary.steps == 0 and len(r.rejected) == 5
    assert request_tracks(trace) == {"d0": [], "d1": [], "d2": [], "d3": [], "L": []}


def test_kv_counter_shows_cached_blocks_under_prefix_caching():
    # tests/test_block_pool.py's A then B with one prompt (block 16, 20 usable blocks): after A finishes its four
    # hashed blocks stay cached and free; B takes three as hits, so one stays cached through B's two steps
    from servesim import Request

    reqs = [Request("A", 0.0, 64, 2, hash_ids=(1, 2, 3, 4)), Request("B", 5.0, 64, 2, hash_ids=(1, 2, 3, 4))]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21), "vllm", "unit")
    kv = {e["ts"]: e["args"] for e in trace_events(r)[0]["traceEvents"] if e.get("name") == "KV blocks"}
    assert [kv[s.start_time * 1e6]["cached"] for s in r.steps] == [0, 0, 1, 1]  # each step's sample
    # while the engine idles (2-5 s) the pool is as A's finish left it: all 20 blocks free, none held
    assert (kv[2e6]["used"], kv[2e6]["free"]) == (0, 20)
    plain = [e["args"] for e in trace_events(seed("vllm", max_num_batched_tokens=256, num_gpu_blocks=200))[0][
        "traceEvents"] if e.get("name") == "KV blocks"]
    assert all("cached" not in a for a in plain)


def test_a_cluster_is_a_process_per_replica_and_one_for_the_kv_links():
    # the round-robin test's cluster (tests/test_cluster.py): r0, r2 on replica 0, r1, r3 on replica 1; and the P/D
    # test's transfer of a's KV, 10-16 ms on the prefill replica's link
    from servesim import Request
    from servesim.cluster import Pool, simulate_cluster

    reqs = [Request(f"r{i}", 0.0, 10 * (i + 1), 2) for i in range(4)]
    trace, _ = cluster_trace_events(simulate_cluster(reqs, num_replicas=2, router="round-robin"))
    check_format(trace)
    procs = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert procs == {1: "replica-0: vllm (toy cost)", 2: "replica-1: vllm (toy cost)"}
    tracks = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {(1, "r0"), (1, "r2"), (2, "r1"), (2, "r3")} <= tracks
    cfg = EngineConfig(num_gpu_blocks=100)
    pd = simulate_cluster([Request("a", 0.0, 100, 4)], [Pool(1, cfg, role="prefill"), Pool(1, cfg, role="decode")],
                          kv_transfer_bandwidth=100 * 131072 / 0.005, kv_transfer_latency=0.001)
    trace, _ = cluster_trace_events(pd)
    check_format(trace)
    (kv,) = [e for e in trace["traceEvents"] if e.get("cat") == "kv_transfer"]
    assert (kv["pid"], kv["ts"], kv["dur"], kv["args"]["to"]) == (3, 10_000, 6_000, "decode-1")


def test_cli_export_perfetto_on_a_cluster(tmp_path, monkeypatch, capsys):
    out = tmp_path / "c.json"
    code, _, err = cli(monkeypatch, capsys, "export", "perfetto", "--workload", "seed", "--num-replicas", "2",
                       "-o", str(out))
    assert code == 0, err
    names = [e["args"]["name"] for e in json.loads(out.read_text())["traceEvents"] if e["name"] == "process_name"]
    assert names[0].startswith("replica-0") and names[1].startswith("replica-1")
