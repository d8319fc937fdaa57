"""`vllm bench serve --max-concurrency C`: at most C requests in flight; the others wait at the client, first come
first served, and are sent when one finishes (their TTFT counts from then, as vLLM's client measures it).

Unit step clock: every step lasts 1 s."""

import json

import pytest
from helpers import cli
from hypothesis import given, settings
from test_properties import scenarios

from servesim import EngineConfig, Request, simulate


@pytest.mark.parametrize("fast", [True, False])
def test_two_at_a_time(fast):
    # four 10-token prompts with 3 outputs at 0 s, C = 2: r0 and r1 prefill in step 0 (first tokens at 1 s) and
    # decode twice: done at 3 s. r2 and r3 are sent then: first tokens at 4 s, done at 6 s.
    reqs = [Request(f"r{i}", 0.0, 10, 3) for i in range(4)]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, max_concurrency=2), "vllm", "unit",
                 fast=fast)
    assert [(t.arrival_time, t.first_token_time, t.finish_time) for t in r.requests] == [
        (0.0, 1.0, 3.0), (0.0, 1.0, 3.0), (3.0, 4.0, 6.0), (3.0, 4.0, 6.0)]
    assert [t.ttft for t in r.requests] == [1.0] * 4


def test_a_late_arrival_is_sent_at_its_own_time():
    # C = 1: r1 arrives at 10 s, long after r0 (done at 3 s) freed the slot
    reqs = [Request("r0", 0.0, 10, 3), Request("r1", 10.0, 10, 3)]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_concurrency=1), "vllm", "unit")
    assert [t.arrival_time for t in r.requests] == [0.0, 10.0]


@settings(max_examples=80, deadline=None)
@given(scenarios())
def test_never_more_in_flight_than_the_cap_and_fast_is_step_by_step(scenario):
    requests, config, policy = scenario
    cap = 2
    cfg = EngineConfig(**{**{f: getattr(config, f) for f in EngineConfig.field_names()}, "max_concurrency": cap})
    slow = simulate(requests, cfg, policy, "unit", fast=False, check_invariants=True)
    fast = simulate(requests, cfg, policy, "unit", fast=True)
    assert [(t.id, t.arrival_time, t.token_times) for t in fast.requests] == [
        (t.id, t.arrival_time, t.token_times) for t in slow.requests]
    # in flight: sent (arrival_time) and not yet done (finish_time); every request finishes
    events = sorted([(t.arrival_time, 1) for t in slow.requests] + [(t.finish_time, -1) for t in slow.requests],
                    key=lambda e: (e[0], e[1]))  # a slot freed at t is taken at t
    level = 0
    for _, d in events:
        level += d
        assert level <= cap
    assert all(t.finish_time is not None for t in slow.requests)


@settings(max_examples=80, deadline=None)
@given(scenarios())
def test_paced_sends_keep_their_order_and_gaps_under_the_cap(scenario):
    # AIPerf's --request-rate with --concurrency (`client_sends_in_order`): each send is at least its own gap
    # after the one before it, in workload order, never more than the cap in flight, fast path = step by step
    requests, config, policy = scenario
    cap = 2
    cfg = EngineConfig(**{**{f: getattr(config, f) for f in EngineConfig.field_names()}, "max_concurrency": cap,
                          "client_sends_in_order": True})
    slow = simulate(requests, cfg, policy, "unit", fast=False, check_invariants=True)
    fast = simulate(requests, cfg, policy, "unit", fast=True)
    assert [(t.id, t.arrival_time, t.token_times) for t in fast.requests] == [
        (t.id, t.arrival_time, t.token_times) for t in slow.requests]
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_time, i))
    sent = {t.id: t.arrival_time for t in slow.requests}
    for a, b in zip(order, order[1:]):
        gap = requests[b].arrival_time - requests[a].arrival_time
        assert sent[requests[b].request_id] >= sent[requests[a].request_id] + gap - 1e-9
    events = sorted([(t.arrival_time, 1) for t in slow.requests] + [(t.finish_time, -1) for t in slow.requests],
                    key=lambda e: (e[0], e[1]))
    level = 0
    for _, d in events:
        level += d
        assert level <= cap
    assert all(t.finish_time is not None for t in slow.requests)


def test_cli_and_result_file(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.json"
    code, stdout, err = cli(monkeypatch, capsys, "run", "--workload", "azure-conv-sample", "--max-concurrency", "8",
                            "--json", str(out))
    assert code == 0, err
    assert "Maximum request concurrency:             8" in stdout
    assert json.loads(out.read_text())["max_concurrency"] == 8
    # on a cluster the cap spans the replicas (tests/test_cluster.py): two requests, one slot, two replicas: the
    # second is sent when the first finishes (unit cost: 10-token prompt and 2 tokens, done at 2 s)
    from servesim.cluster import simulate_cluster

    c = simulate_cluster([Request("a", 0.0, 10, 2), Request("b", 0.0, 10, 2)], num_replicas=2,
                         config=EngineConfig(max_concurrency=1), cost="unit")
    assert c.cluster.timelines.arrival_time.tolist() == [0.0, 2.0]


def test_a_paced_send_due_before_its_slot_frees_waits_for_it():
    # (found by the property test above) cap 2, sends in order: r4's last step ends 4.096 us late (one 128 KiB
    # block swapped over 32 GB/s of PCIe: 131,072 / 32e9 s), after r1's due time, 4.0; r1 is sent when r4's
    # slot frees, not at 4.0 with r3 and r4 both still in flight
    reqs = [Request("r0", 0.0, 1, 1), Request("r1", 3.0, 1, 1), Request("r2", 0.0, 1, 1), Request("r3", 1.0, 1, 2),
            Request("r4", 0.0, 1, 3), Request("r5", 0.0, 1, 1)]
    cfg = EngineConfig(max_num_batched_tokens=4, max_num_seqs=2, enable_chunked_prefill=False, block_size=1,
                       num_gpu_blocks=4, preemption_mode="swap", max_concurrency=2, client_sends_in_order=True)
    got = {t.id: t for t in simulate(reqs, cfg, "vllm", "unit").requests}
    assert got["r4"].finish_time == pytest.approx(4 + 131_072 / 32e9, abs=1e-12)
    assert got["r1"].arrival_time == got["r4"].finish_time
