"""One tiny scenario per rule of vLLM v1's scheduler (issue 3), on the unit step clock, numbers by hand."""

import pytest
from helpers import reqs, run, tokens

from servesim.engine.records import Reason
from servesim.errors import ConfigError


def reasons(result, step):
    return {w.id: w.reason for w in result.steps[step].waiting}


def test_rule1_one_budget_chunks_whoever_needs_more_than_is_left():
    r = run(reqs(("A", 0, 8, 2), ("B", 0, 8, 1)), max_num_batched_tokens=10, max_num_seqs=2)
    assert tokens(r) == [[("A", 8), ("B", 2)], [("A", 1), ("B", 6)]]
    assert [e.samples_token for e in r.steps[0].scheduled] == [True, False]


def test_rule2_a_lone_request_is_never_capped_by_the_threshold():
    r = run(reqs(("solo", 0, 300, 2), ("late", 1, 300, 1)),
            max_num_batched_tokens=256, long_prefill_token_threshold=100)
    t = tokens(r)
    assert t[0] == [("solo", 256)]  # alone: the whole budget
    assert t[1] == [("solo", 44), ("late", 100)]  # two present: each capped at 100
    assert t[2] == [("solo", 1), ("late", 100)]


def test_rule3_running_first_and_the_scan_ends_when_the_budget_is_spent():
    r = run(reqs(("A", 0, 6, 3), ("B", 0, 6, 3), ("C", 1, 6, 1)), max_num_batched_tokens=6, max_num_seqs=6)
    t = tokens(r)
    assert t[0] == [("A", 6)]
    assert t[1] == [("A", 1), ("B", 5)]
    assert reasons(r, 1)["C"] is Reason.TOKEN_BUDGET


def fcfs_pair(**cfg):
    # block_size 4, 5 blocks (4 usable): two 8-token prompts fill the pool; A's first decode needs a 3rd block
    return run(reqs(("A", 0, 8, 5), ("B", 0, 8, 5)), max_num_batched_tokens=32, max_num_seqs=4, block_size=4,
               num_gpu_blocks=5, **cfg)


def test_rule4_5_fcfs_preempts_the_newest_running_and_recomputes_it():
    r = fcfs_pair()
    assert tokens(r) == [[("A", 8), ("B", 8)], [("A", 1)], [("A", 1)], [("A", 1)], [("A", 1)],
                         [("B", 9)], [("B", 1)], [("B", 1)], [("B", 1)]]
    assert r.steps[1].preempted == ("B",)
    assert r.steps[1].free_blocks_after_schedule == 1  # B's 2 blocks freed, A took 1
    (p,) = r.preemptions
    assert (p.step, p.id, p.mode, p.tokens_discarded, p.blocks_freed, p.repeat) == (1, "B", "recompute", 8, 2, False)
    resumed = r.steps[5].scheduled[0]
    assert (resumed.resumed, resumed.kind.value, resumed.num_tokens_before, resumed.samples_token) == (
        True, "prefill", 9, True)
    assert r.recomputed_tokens == 8
    assert r.tokens_processed == 32  # 8 + 8 + 4 + 9 + 3
    assert r.recompute_tax == 0.25
    assert len(r.request("B").token_times) == 5  # no output token lost or duplicated


def test_rule6_admission_is_frozen_in_a_step_with_a_preemption_then_waits_for_kv():
    r = fcfs_pair()
    assert reasons(r, 1)["B"] is Reason.ADMISSION_FROZEN
    w = next(w for w in r.steps[2].waiting if w.id == "B")
    assert w.reason is Reason.KV_BLOCKS and w.detail == "needs 3 blocks, 1 free"


def test_rule4_priority_victim_gives_back_tokens_already_scheduled():
    # lo (priority 5) runs; hi (priority 0) arrives; at step 4 hi needs a 3rd block and none is free
    r = run(reqs(("lo", 0, 4, 10, 5), ("hi", 1, 6, 10, 0)), max_num_batched_tokens=16, max_num_seqs=4,
            block_size=4, num_gpu_blocks=5, policy="priority")
    t = tokens(r)
    assert t[1] == [("lo", 1), ("hi", 6)]
    assert t[3] == [("lo", 1), ("hi", 1)]
    assert t[4] == [("hi", 1)]  # lo was scheduled first, then preempted for hi: its token went back
    assert r.steps[4].preempted == ("lo",)
    assert r.steps[4].total_scheduled_tokens == 1
    assert t[11] == [("lo", 8)]  # hi finished at step 10; lo recomputes 4 prompt + 4 outputs
    # step 11 samples lo's 5th token; its last 5 come in steps 12-16, and step 16 ends at 17 s (unit clock)
    assert r.request("lo").finish_time == 17.0


def test_priority_queue_admits_by_priority_then_arrival():
    r = run(reqs(("a", 0, 4, 1, 3), ("b", 0, 4, 1, 1), ("c", 0, 4, 1, 2)), max_num_batched_tokens=4,
            max_num_seqs=1, policy="priority")
    assert tokens(r) == [[("b", 4)], [("c", 4)], [("a", 4)]]


def test_rule6_never_skip_ahead_when_chunking_is_off():
    r = run(reqs(("a", 0, 8, 2), ("b", 0, 6, 1), ("c", 0, 1, 1)), max_num_batched_tokens=10,
            enable_chunked_prefill=False, max_model_len=10)
    assert tokens(r) == [[("a", 8)], [("a", 1), ("b", 6), ("c", 1)]]
    assert reasons(r, 0) == {"b": Reason.TOKEN_BUDGET, "c": Reason.BLOCKED_BEHIND_HEAD}


def test_rule6_max_num_seqs_holds_the_queue():
    r = run(reqs(("a", 0, 4, 2), ("b", 0, 4, 1)), max_num_batched_tokens=8, max_num_seqs=1)
    assert tokens(r) == [[("a", 4)], [("a", 1)], [("b", 4)]]
    assert reasons(r, 0)["b"] is Reason.MAX_NUM_SEQS


def test_rule6_watermark_is_kept_free_only_when_something_runs():
    # 10 blocks of 4, watermark 0.2 -> int(0.2 x 10) = 2 spare blocks; usable 9
    r = run(reqs(("a", 0, 16, 2), ("b", 0, 16, 2)), max_num_batched_tokens=64, block_size=4,
            num_gpu_blocks=10, watermark=0.2)
    assert tokens(r) == [[("a", 16)], [("a", 1)], [("b", 16)], [("b", 1)]]
    # a runs alone (no watermark) and holds 16 / 4 = 4 blocks; b needs 4 + 2 spare = 6 of the 9 - 4 = 5 free
    w = next(w for w in r.steps[0].waiting if w.id == "b")
    assert w.detail == "needs 6 blocks, 5 free"


def test_rule6_admission_reserves_the_whole_prompt_but_allocates_the_first_chunk():
    # 10 usable blocks: the 40-token prompt reserves 40 / 4 = 10 (all of them, so it is admitted), but only its
    # first chunk of 16 tokens gets blocks: 4, leaving 10 - 4 = 6 free
    r = run(reqs(("a", 0, 40, 1)), max_num_batched_tokens=16, block_size=4, num_gpu_blocks=11)
    assert r.steps[0].scheduled[0].num_blocks == 4
    assert r.steps[0].free_blocks_after_schedule == 6


def test_rule7_async_scheduling_returns_the_seat_one_step_later():
    sync = run(reqs(("a", 0, 4, 1), ("b", 0, 4, 1)), max_num_batched_tokens=8, max_num_seqs=1)
    asyn = run(reqs(("a", 0, 4, 1), ("b", 0, 4, 1)), max_num_batched_tokens=8, max_num_seqs=1,
               async_scheduling=True)
    assert tokens(sync) == [[("a", 4)], [("b", 4)]]
    assert tokens(asyn) == [[("a", 4)], [], [("b", 4)], []]
    assert asyn.steps[1].finished_observed == ("a",)
    assert asyn.request("b").finish_time == 3.0  # b runs in step 2, which ends at 3 s


def test_swap_moves_kv_over_pcie_and_recomputes_nothing():
    # 2 blocks x 4 tokens x 1000 bytes = 8000 bytes at 1e6 B/s = 8 ms each way
    r = fcfs_pair(preemption_mode="swap", kv_bytes_per_token=1000, pcie_bandwidth=1e6)
    assert tokens(r) == [[("A", 8), ("B", 8)], [("A", 1)], [("A", 1)], [("A", 1)], [("A", 1)],
                         [("B", 1)], [("B", 1)], [("B", 1)], [("B", 1)]]
    (p,) = r.preemptions
    assert (p.mode, p.tokens_discarded, p.bytes_moved, p.blocks_freed) == ("swap", 0, 8000, 2)
    assert p.swap_time == pytest.approx(0.008)
    assert r.steps[1].duration == pytest.approx(1.008)
    assert r.steps[5].duration == pytest.approx(1.008)  # swapped back in: 2 blocks
    assert r.steps[5].swap_in_blocks == 2 and r.steps[5].scheduled[0].resumed
    assert r.recompute_tax == 0.0


@pytest.mark.parametrize("host", [{"num_cpu_blocks": 1}, {"swap_space": 1 / 1024}])
def test_swap_falls_back_to_recompute_when_the_host_pool_is_full(host):
    # B's 2 blocks do not fit a host pool of 1, so B is recomputed (8 prompt + 1 output). --swap-space is vLLM's
    # GiB: a block of 4 tokens x 131072 KV bytes is 0.5 MiB, so 1 MiB holds 2 blocks... and 1/1024 GiB = 1 MiB
    r = fcfs_pair(preemption_mode="swap", **host)
    assert r.config.num_cpu_blocks == (1 if "num_cpu_blocks" in host else 2)
    if "num_cpu_blocks" in host:
        (p,) = r.preemptions
        assert p.mode == "recompute (swap pool full)" and p.tokens_discarded == 8
        assert tokens(r)[5] == [("B", 9)]
    else:  # 2 blocks fit: B is swapped out and back, nothing recomputed
        assert [p.mode for p in r.preemptions] == ["swap"] and r.recompute_tax == 0.0


def test_default_swap_space_is_vllms_4_gib():
    # 4 GiB / (4 tokens x 131072 bytes) = 8192 blocks
    assert fcfs_pair(preemption_mode="swap").config.num_cpu_blocks == 8192


def test_thrash_is_recorded_when_a_victim_is_preempted_again():
    # 5 usable blocks of 4 tokens; A, B, C (prompt 4, output 12) arrive at steps 0, 1, 2 and each takes 1 block.
    # By step 2 A and B have grown to 2 blocks each and C holds 1: the pool is full. Step 3: C's 5th token needs a
    # 2nd block; C (newest) is preempted. Step 5: A's 9th token takes the free block. Step 6: B's 9th token needs
    # a 3rd block and none is free: B is preempted. Step 11: A finishes (its 12th token); step 12 readmits B
    # (4 + 5 outputs = 9 tokens, 3 blocks) and C (4 + 1 = 5 tokens, 2 blocks): pool full again.
    # Step 16: B's 13th token needs a 4th block and C is preempted a second time.
    r = run(reqs(("A", 0, 4, 12), ("B", 1, 4, 12), ("C", 2, 4, 12)), max_num_batched_tokens=32, max_num_seqs=4,
            block_size=4, num_gpu_blocks=6)
    assert [(p.step, p.id, p.repeat) for p in r.preemptions] == [(3, "C", False), (6, "B", False), (16, "C", True)]
    assert tokens(r)[12] == [("B", 9), ("C", 5)]
    assert all(len(x.token_times) == 12 for x in r.requests)


@pytest.mark.parametrize("cfg, text", [
    (dict(max_num_batched_tokens=8, enable_chunked_prefill=False, max_model_len=16), "chunked prefill off"),
    (dict(max_num_batched_tokens=8, max_num_seqs=16), "must be >= max_num_seqs"),
    (dict(num_gpu_blocks=3, block_size=4), "whole pool"),
])
def test_impossible_configurations_are_rejected_before_simulating(cfg, text):
    with pytest.raises(ConfigError, match=text):
        run(reqs(("a", 0, 12, 2)), **cfg)


def test_a_request_longer_than_max_model_len_fails_and_the_rest_run():
    # vLLM rejects prompt + max_tokens > max_model_len ("This model's maximum context length is 10 tokens"), and
    # vllm bench serve counts the request as failed. "a" (12 + 2) fails; "b" (4 + 2 = 6) runs: its prompt in step 0,
    # its second token in step 1, on the unit clock.
    from servesim.analysis.benchmark import benchmark_metrics

    r = run(reqs(("a", 0, 12, 2), ("b", 0, 4, 2)), max_model_len=10)
    assert r.rejected == ("a",)
    assert tokens(r) == [[("b", 4)], [("b", 1)]]
    assert r.request("a").finish_time is None and r.request("a").token_times == ()
    m = benchmark_metrics(r)
    assert (m.completed, m.failed) == (1, 1)


def test_duplicate_request_ids_are_refused():
    with pytest.raises(ConfigError, match="'a': used by requests 0 and 1"):
        run(reqs(("a", 0, 4, 2), ("a", 1, 4, 2)))


def test_default_budget_is_vllms():
    # chunked: 2048; not chunked: max(max_model_len, 2048), so the default max_num_seqs (256) always fits
    tiny = reqs(("a", 0, 8, 2))
    assert run(tiny, max_num_seqs=256).config.max_num_batched_tokens == 2048
    assert run(tiny, sched="continuous", max_num_seqs=256).config.max_num_batched_tokens == 2048
    # max_model_len defaults to the longest request, 3000 + 2 tokens, which is above 2048
    assert run(reqs(("a", 0, 3000, 2)), sched="continuous").config.max_num_batched_tokens == 3002


def test_without_reserve_full_isl_admission_needs_only_the_first_chunks_blocks():
    # 11 blocks of 4 (10 usable). In step 1 B decodes its 9th token (3 blocks held, 7 free) and A (40-token
    # prompt) arrives: with the full-ISL reservation A needs 10 blocks; without it, 4 for its first chunk of
    # 16 - 1 = 15 tokens.
    requests = reqs(("B", 0, 8, 6), ("A", 1, 40, 1))
    full = run(requests, max_num_batched_tokens=16, block_size=4, num_gpu_blocks=11)
    first = run(requests, max_num_batched_tokens=16, block_size=4, num_gpu_blocks=11,
                scheduler_reserve_full_isl=False)
    assert tokens(full)[1] == [("B", 1)]
    assert next(w for w in full.steps[1].waiting if w.id == "A").detail == "needs 10 blocks, 7 free"
    assert tokens(first)[1] == [("B", 1), ("A", 15)]
