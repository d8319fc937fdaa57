"""TensorRT-LLM 1.2's scheduling rules (docs/trtllm.md), each on a tiny scenario named by the source function it
follows, with its numbers derived by hand in the test, on the unit step clock (every step 1 s, so a request
arriving at t = k joins before step k). Blocks of 4 tokens throughout (`tokens_per_block` 4). The executor's
loop is `_executor_loop` here (`disable_overlap_scheduler`), each step's outputs processed before the next is
scheduled, so that a rule's arithmetic is its own; the overlap scheduler's rules are tests/test_trtllm_overlap.py."""

import pytest
from helpers import first_step, rows, trtllm_run, why

from servesim.engine.records import Preemption, Reason
from servesim.engine.request import Request


def run(requests, **trt):
    return trtllm_run(requests, **trt)


def test_get_remaining_blocks_to_completion_reserves_the_whole_lifetime():
    # pool max_tokens 40 = 10 blocks. a: 8 + 12 = 20 tokens, ceil(20 / 4) = 5 blocks for its lifetime; b: 8 + 16 =
    # 24 tokens, 6 blocks. Step 0: a fits (10 left, 5 after); b's 6 > 5, though its prompt's 2 blocks would fit
    # (vLLM would start it). While a generates, the 10 free less a's held blocks less a's remaining ones (5 - held)
    # leave 5 < 6; a samples 1 token at step 0 and 11 more at steps 1-11, so b starts at step 12.
    r = run([Request("a", 0.0, 8, 12), Request("b", 0.0, 8, 16)], max_tokens=40)
    assert rows(r, 0) == [("a", 8)]
    reason, detail = why(r, 0, "b")
    assert reason is Reason.LIFETIME_KV
    assert detail == ("its lifetime KV (6 blocks) does not fit beside the running requests' reservations "
                      "(5 blocks left) under GUARANTEED_NO_EVICT")
    assert why(r, 11, "b")[0] is Reason.LIFETIME_KV and first_step(r, "b") == 12


def test_guaranteed_no_evict_blocks_the_queue_at_its_head():
    # as above, with c (4 + 4 tokens: 2 blocks) behind b: c would fit in the 5 blocks left, but the scan stops at b
    # ("If one requests fails to be scheduled, break"). Step 12: b takes 6 of 10, c 2 of the 4 left.
    r = run([Request("a", 0.0, 8, 12), Request("b", 0.0, 8, 16), Request("c", 0.0, 4, 4)], max_tokens=40)
    assert rows(r, 0) == [("a", 8)]
    assert why(r, 0, "c") == (Reason.BLOCKED_BEHIND_HEAD, "behind b (GUARANTEED_NO_EVICT admits in order)")
    assert rows(r, 12) == [("b", 8), ("c", 4)]


def test_max_utilization_pauses_the_newest_started_request_which_recomputes():
    # pool 16 tokens = 4 blocks; a and b: prompt 4, output 8. Step 0: each first chunk needs ceil(4 / 4) = 1 block
    # (getNeededBlocksOneStep): both prefill and sample. Step 1: 4 -> 5 tokens in KV starts a block each: 2 + 2 = 4
    # blocks, none free. Steps 2-4: 5 -> 8 tokens, no new block. Step 5: a's 9th token needs a block, none is free:
    # the last started request from a to the end is b: paused (its 2 blocks back), and a fits. b had 1 + 4 = 5
    # outputs, so it becomes a 9-token context; its first chunk needs ceil(9 / 4) = 3 blocks while a holds 3 of 4,
    # so it waits until a's 8th output (step 7), recomputes 9 tokens at step 8, and finishes at step 10.
    r = run([Request("a", 0.0, 4, 8), Request("b", 0.0, 4, 8)], max_tokens=16,
            capacity_scheduler_policy="MAX_UTILIZATION")
    assert rows(r, 4) == [("a", 1), ("b", 1)]
    assert rows(r, 5) == [("a", 1)]
    assert r.preemptions == (Preemption(5, "b", "pause (recompute)", 8, 0, 2, 0.0, False),)
    assert why(r, 5, "b")[0] is Reason.PREEMPTED
    assert why(r, 6, "b")[0] is Reason.KV_BLOCKS
    assert [(s.step, s.finished) for s in r.steps if s.finished] == [(7, ("a",)), (10, ("b",))]
    assert rows(r, 8) == [("b", 9)] and r.steps[8].scheduled[0].resumed


def test_a_paused_context_over_max_num_tokens_fails_unchunked():
    # the scenario above with max_num_tokens 8 and chunking off: the contexts (4 + 4) fit step 0, but b, paused at
    # step 5 with 5 outputs, comes back as a 9-token context, which no batch of 8 can hold: TensorRT-LLM's
    # micro-batch scheduler fails it (TLLM_CHECK: context length > max context length), in one line
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match="request b: paused under MAX_UTILIZATION, it recomputes a 9-token "
                       "context, over max_num_tokens 8 with enable_chunked_prefill off"):
        run([Request("a", 0.0, 4, 8), Request("b", 0.0, 4, 8)], max_tokens=16, max_num_tokens=8,
            capacity_scheduler_policy="MAX_UTILIZATION")


def test_guaranteed_no_evict_never_pauses_where_max_utilization_does():
    # the same two requests under the default policy: a reserves 3 lifetime blocks (12 tokens), b's 3 do not fit
    # beside them (4 - 3 = 1 left), so b starts when a finishes (a: steps 0-7) and nobody is paused
    r = run([Request("a", 0.0, 4, 8), Request("b", 0.0, 4, 8)], max_tokens=16)
    assert r.preemptions == () and first_step(r, "b") == 8


def test_set_ctx_requests_chunk_size_first_come_first_served():
    # max_num_tokens 10, unit 4. Step 0: a (13) and b (7) need 20 > 10: a gets min(13, 10) = 10, cut, so rounded
    # down to 8; b gets min(7, 2) = 2, rounded down to 0 (it waits). Step 1: a 5 + b 7 = 12 > 10: a 5 (its whole
    # rest), b min(7, 5) = 5 -> 4. Step 2: a decodes (1 token), b's last 3 fit in the 9 left.
    r = run([Request("a", 0.0, 13, 2), Request("b", 0.0, 7, 2)], max_num_tokens=10, enable_chunked_prefill=True)
    assert [rows(r, k) for k in range(3)] == [[("a", 8)], [("a", 5), ("b", 4)], [("b", 3), ("a", 1)]]
    assert why(r, 0, "b")[0] is Reason.TOKEN_BUDGET


def test_set_ctx_requests_chunk_size_equal_progress():
    # the same requests, EQUAL_PROGRESS: rounds of one unit (4) each while the 10 tokens allow. Step 0: a 4, b 4
    # (8); then a 8 (12 > 10) and b 7 (11 > 10) do not fit: the round adds nothing. Step 1: a 4, b 3 (its rest, 7);
    # a 8 would be 11. Step 2: b decodes, a's last 5 fit in the 9 left.
    r = run([Request("a", 0.0, 13, 2), Request("b", 0.0, 7, 2)], max_num_tokens=10, enable_chunked_prefill=True,
            context_chunking_policy="EQUAL_PROGRESS")
    assert [rows(r, k) for k in range(3)] == [[("a", 4), ("b", 4)], [("a", 4), ("b", 3)], [("a", 5), ("b", 1)]]


def test_micro_batch_scheduler_counts_generation_tokens_first():
    # chunking on, max_num_tokens 8: a decodes from step 1 (1 token), so c's 12-token context gets 8 - 1 = 7,
    # rounded down to the unit: 4 (the unchunked scheduler would break at c: 1 + 12 > 8 is never allowed)
    r = run([Request("a", 0.0, 4, 5), Request("c", 1.0, 12, 1)], max_num_tokens=8, enable_chunked_prefill=True)
    assert rows(r, 1) == [("c", 4), ("a", 1)]


def _shared(n_blocks, *tail):
    return tuple(("p", k) for k in range(n_blocks)) + tail


def test_set_prepopulated_prompt_len_reuses_a_cached_prefix():
    # a (12 tokens: blocks p0-p2) runs at steps 0-1 and its full blocks stay cached; b (14 tokens: p0-p2 and its
    # own 2 tokens) arrives at step 3: its first 3 blocks are reused (12 tokens, never its last token), so its
    # context chunk is 14 - 12 = 2. With enable_block_reuse off it computes all 14.
    a = Request("a", 0.0, 12, 2, hash_ids=_shared(3), hash_block_size=4)
    b = Request("b", 3.0, 14, 2, hash_ids=_shared(3, ("b", 0)), hash_block_size=4)
    r = run([a, b], max_tokens=400)
    assert rows(r, 2) == [("b", 2)] and r.steps[2].scheduled[0].num_cached_tokens == 12
    off = run([a, b], max_tokens=400, enable_block_reuse=False)
    assert rows(off, 2) == [("b", 14)]


def test_set_prepopulated_prompt_len_moves_a_chunk_past_the_prefix():
    # chunked, max_num_tokens 8: b (30 tokens, first 12 cached) is given a first chunk of 8 tokens, which starts
    # after the 12 reused ones: positions 12-19; then 8 more (20-27) and its last 2
    a = Request("a", 0.0, 12, 2, hash_ids=_shared(3), hash_block_size=4)
    b = Request("b", 3.0, 30, 2, hash_ids=_shared(3, *(("b", k) for k in range(5))), hash_block_size=4)
    r = run([a, b], max_tokens=400, max_num_tokens=8, enable_chunked_prefill=True)
    b_steps = [(e.num_computed_tokens_before + e.num_cached_tokens, e.num_scheduled_tokens)
               for s in r.steps for e in s.scheduled if e.id == "b" and e.kind.value == "prefill"]
    assert b_steps == [(12, 8), (20, 8), (28, 2)]


def test_beneficial_to_skip_waits_to_reuse_a_block_computed_this_step():
    # a (8 tokens: p0 p1) and b (12 tokens: p0 p1 p2) arrive together. Step 0: a contributes block p0; b's first
    # new block is p0 too, so b skips the step. Step 1: p0 and p1 are cached; b reuses 8 tokens and computes 4.
    a = Request("a", 0.0, 8, 2, hash_ids=_shared(2), hash_block_size=4)
    b = Request("b", 0.0, 12, 2, hash_ids=_shared(3), hash_block_size=4)
    r = run([a, b], max_tokens=400)
    assert rows(r, 0) == [("a", 8)] and why(r, 0, "b")[0] is Reason.REUSE_SKIP
    assert rows(r, 1) == [("b", 4), ("a", 1)]


def test_static_batch_starts_requests_only_when_the_batch_drains():
    # STATIC_BATCH: a runs (steps 0-3, 4 outputs); b arrives at step 1 while a generates and waits for it
    r = run([Request("a", 0.0, 4, 4), Request("b", 1.0, 4, 2)], capacity_scheduler_policy="STATIC_BATCH")
    assert why(r, 1, "b")[0] is Reason.BATCH_CLOSED and first_step(r, "b") == 4


def test_fetch_new_requests_keeps_at_most_max_batch_size_active():
    # max_batch_size 2: c is not fetched while a and b are active; it starts the step after a finishes (a: 1 output
    # at step 0, so it finishes at step 0)
    r = run([Request("a", 0.0, 4, 1), Request("b", 0.0, 4, 3), Request("c", 0.0, 4, 1)], max_batch_size=2)
    assert rows(r, 0) == [("a", 4), ("b", 4)]
    assert why(r, 0, "c") == (Reason.MAX_NUM_SEQS,
                              "not yet active: the active requests are at max_batch_size 2 (1 queued)")
    assert rows(r, 1) == [("c", 4), ("b", 1)]


def test_the_demo_column():
    # the seed scenario (toy cost: 1 ms per decode, 0.1 ms per prompt token), batches of 256 tokens beside the 4
    # decodes: FIRST_COME_FIRST_SERVED cuts L's chunk to 252 and rounds it down to the 32-token block: 224, eight
    # times (1792), then the last 208 whole. A chunk step takes 4 + 22.4 = 26.4 ms (the worst gap); L waits 0.8 ms
    # for the step in flight, then 8 x 26.4 + (4 + 20.8) = 236 ms: TTFT 236.8 ms
    from servesim.analysis.metrics import worst_gap
    from servesim.cli.sim import demo_results

    r = demo_results()["trtllm"]
    chunks = [e.num_scheduled_tokens for s in r.steps for e in s.scheduled if e.id == "L" and e.kind.value == "prefill"]
    assert chunks == [224] * 8 + [208]
    assert worst_gap(r).seconds * 1e3 == pytest.approx(26.4)
    assert r.request("L").ttft * 1e3 == pytest.approx(236.8)
    # the overlap scheduler (on by default): each of the 5 requests runs one step past its last token, a token
    # computed and discarded (2128 + 160 + 5): L's rides in step 16 beside the decodes; d0-d3, finished at step 39,
    # add a 41st step for theirs
    assert r.tokens_processed == 2293 and len(r.steps) == 41
