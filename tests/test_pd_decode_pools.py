"""P/D decode pools beyond vLLM's: TensorRT-LLM's generation-only workers and SGLang's decode server (`pd_decode`),
and the cluster's clock with an overlap scheduler's deferred finishes. Toy cost: 0.1 ms a prompt token, 1 ms a
decoding request."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.cluster import Pool, simulate_cluster
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.engines.sglang.server_args import SGLangConfig
from servesim.engines.trtllm.llm_args import TrtllmConfig
from servesim.errors import ConfigError

KV = 131072  # the toy cost's KV bytes a token


def trt(overlap: bool = True, **kw) -> EngineConfig:
    return EngineConfig(trtllm=TrtllmConfig(disable_overlap_scheduler=not overlap, **kw))


@pytest.mark.parametrize("overlap", [False, True])
def test_a_trtllm_decode_worker_takes_a_remotely_prefilled_request(overlap):
    # as the vLLM pools of test_cluster.py: prompt [0, 10] ms on the prefill worker, the KV 5 ms on the link + 1 ms:
    # lands at 16; the generation-only worker's steps give tokens 2-4 at 17, 18, 19. Its max_num_tokens (32, as
    # AIConfigurator's generator sizes a decode worker) is below the 100-token prompt: the decode worker runs no
    # prompt, so chunking off does not refuse it
    c = simulate_cluster([Request("a", 0.0, 100, 4)], [Pool(1, trt(False), "trtllm", role="prefill"),
                                                       Pool(1, trt(overlap, max_num_tokens=32), "trtllm",
                                                            role="decode")],
                         kv_transfer_bandwidth=100 * KV / 0.005, kv_transfer_latency=0.001, check_invariants=True)
    assert list(c.cluster.request("a").token_times) == pytest.approx([0.010, 0.017, 0.018, 0.019])
    (step, *_) = c.replicas[1].steps
    assert (step.scheduled.total_tokens, step.scheduled.prefill_tokens) == (1, 0)  # (no prompt recomputed)


def test_an_sglang_decode_server_takes_transferred_requests_without_a_forward():
    # SGLang's decode server (disaggregation/decode.py): the transferred request joins the running batch in a
    # prebuilt batch, no forward, and is decoded in the same iteration: tokens 2-4 at 17, 18, 19 ms as above. Two
    # requests and max_running_requests 1: the second waits in the queue for the row (r0 done at 19; r1's KV,
    # prefilled [10, 20] behind r0's, landed at 26: tokens at 27, 28, 29)
    reqs = [Request("r0", 0.0, 100, 4), Request("r1", 0.0, 100, 4)]
    dec = EngineConfig(sglang=SGLangConfig(disable_radix_cache=True, max_running_requests=1))
    c = simulate_cluster(reqs, [Pool(1, EngineConfig(sglang=SGLangConfig(max_running_requests=1)), "sglang",
                                     role="prefill"), Pool(1, dec, "sglang", role="decode")],
                         kv_transfer_bandwidth=100 * KV / 0.005, kv_transfer_latency=0.001, check_invariants=True)
    assert [list(t.token_times) for t in c.cluster.timelines] == [
        pytest.approx([0.010, 0.017, 0.018, 0.019]), pytest.approx([0.020, 0.027, 0.028, 0.029])]
    assert all(st.scheduled.prefill_tokens == 0 and st.forward_mode == "decode" for st in c.replicas[1].steps)


def test_an_sglang_decode_pool_with_the_radix_cache_is_refused():
    with pytest.raises(ConfigError, match="set sglang.disable_radix_cache"):
        simulate_cluster([Request("a", 0.0, 4, 2)], [Pool(1, None, "sglang", role="prefill"),
                                                     Pool(1, None, "sglang", role="decode")])


def sends(overlap: bool) -> list[float]:
    c, n, gap = 4, 12, 0.0425 / 4
    reqs = [Request(f"r{i}", min(i, c - 1) * gap, 100, 32) for i in range(n)]
    pools = [Pool(1, replace_cap(trt(False, max_batch_size=1), c), "trtllm", role="prefill"),
             Pool(4, replace_cap(trt(overlap, max_batch_size=1, max_num_tokens=32), c), "trtllm", role="decode")]
    res = simulate_cluster(reqs, pools, kv_transfer_bandwidth=1e15, kv_transfer_latency=0.0)
    return res.cluster.timelines.arrival_time.tolist()


def replace_cap(cfg: EngineConfig, cap: int) -> EngineConfig:
    from dataclasses import replace

    return replace(cfg, max_concurrency=cap)


def test_an_overlap_schedulers_finish_frees_the_clients_slot_in_time():
    # found scoring the disagg rows: under the overlap scheduler a decode worker reports a finish when it
    # processes the step's result, an iteration with no forward; the cluster did not run that iteration on an
    # otherwise idle worker until something reached it, so finishes reached the client late and out of order (r4
    # sent after r5..r7). The overlap scheduler costs no time on the toy: the sends are those without it
    with_overlap, without = sends(True), sends(False)
    assert with_overlap == pytest.approx(without)
    assert with_overlap == sorted(with_overlap)


def pools(policy: str, cap: int | None, decoders: int) -> list[Pool]:
    if policy == "vllm":
        pre = dec = EngineConfig(max_concurrency=cap)
    elif policy == "trtllm":
        pre = dec = replace_cap(trt(True), cap)
    else:
        pre = EngineConfig(max_concurrency=cap)
        dec = EngineConfig(max_concurrency=cap, sglang=SGLangConfig(disable_radix_cache=True))
    return [Pool(1, pre, policy, role="prefill"), Pool(decoders, dec, policy, role="decode")]


WORK = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 200), st.integers(2, 20)), min_size=1, max_size=10)


@settings(max_examples=40, deadline=None)
@given(reqs=WORK, policy=st.sampled_from(["vllm", "trtllm", "sglang"]), cap=st.sampled_from([None, 1, 3]),
       decoders=st.integers(1, 3))
def test_every_request_finishes_after_its_kv_lands(reqs, policy, cap, decoders):
    # invariants of any P/D run: each request ends with its tokens; its second token comes after its KV landed on
    # the decode worker; under a cap no more than `cap` are in flight at once
    work = [Request(f"r{i}", t * 1e-3, p, o) for i, (t, p, o) in enumerate(reqs)]
    c = simulate_cluster(work, pools(policy, cap, decoders), kv_transfer_bandwidth=200 * KV / 0.004,
                         kv_transfer_latency=0.001, check_invariants=True)
    landed = {t.request_id: t.end for t in c.transfers}
    spans = []
    for r, t in zip(work, c.cluster.timelines, strict=True):
        assert len(t.token_times) == r.output_len
        assert t.token_times[1] > landed[r.request_id]
        spans.append((t.arrival_time, t.finish_time))
    if cap is not None:
        for a, _ in spans:
            assert sum(s <= a < f for s, f in spans) <= cap


@settings(max_examples=30, deadline=None)
@given(reqs=WORK, policy=st.sampled_from(["vllm", "trtllm", "sglang"]), cap=st.sampled_from([None, 2]))
def test_the_fast_path_changes_no_p_d_timeline(reqs, policy, cap):
    work = [Request(f"r{i}", t * 1e-3, p, o) for i, (t, p, o) in enumerate(reqs)]
    runs = [simulate_cluster(work, pools(policy, cap, 2), kv_transfer_bandwidth=200 * KV / 0.004, fast=fast,
                             record="summary").cluster.timelines for fast in (True, False)]
    assert [list(t.token_times) for t in runs[0]] == [pytest.approx(list(t.token_times)) for t in runs[1]]


def test_an_sglang_prefill_pool_under_a_cap_sends_every_kv():
    # found by the property above (on dd46b55 too): under a cap the cluster runs its replicas in lockstep, and an
    # SGLang prefill worker whose only work left was its overlap loop's result (r1's one token, in flight) was
    # never started again, so r1's KV never left. r1: its 1-token prompt at 20 ms, 0.1 ms: first token at 20.1;
    # 131,072 bytes at 200 x 131,072 B / 4 ms = 0.02 ms, + 1 ms: on the decode worker at 21.12; token 2 at 22.12
    work = [Request("r0", 0.0, 159, 2), Request("r1", 0.020, 1, 2)]
    cfg = EngineConfig(max_concurrency=3)
    c = simulate_cluster(work, [Pool(1, cfg, "sglang", role="prefill"), Pool(1, cfg, "vllm", role="decode")],
                         kv_transfer_bandwidth=200 * KV / 0.004, kv_transfer_latency=0.001)
    assert list(c.cluster.request("r1").token_times) == pytest.approx([0.0201, 0.02212])
