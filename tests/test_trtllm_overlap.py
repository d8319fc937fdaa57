"""TensorRT-LLM 1.2's overlap scheduler (`PyExecutor._executor_loop_overlap`, on by default: docs/trtllm.md), each
rule on a tiny scenario named by the source function it follows, its numbers derived by hand, beside the same
scenario under `_executor_loop` (`disable_overlap_scheduler`) where the rule is absent. The unit step clock (every
step 1 s: a request arriving at t = k joins before step k); blocks of 4 tokens (`tokens_per_block` 4)."""

from helpers import cli, first_step, rows, trtllm_run, why

from servesim.engine.records import Preemption, Reason
from servesim.engine.request import Request
from servesim.engine.scheduler import FINISHED_IN_FLIGHT


def run(requests, overlap=True, **trt):
    return trtllm_run(requests, overlap, **trt)


def test_executor_loop_overlap_schedules_a_finishing_request_once_more():
    # a: prompt 4, 2 outputs. Step 0 runs its context (output 1), step 1 its generation token (output 2, the last:
    # finished at the step's end, t = 2). Its output is processed only after step 2 was scheduled, so step 2 still
    # computes a token for it (GENERATION_TO_COMPLETE counts as in progress), discarded: 3 steps, finish time 2.
    # Under _executor_loop the output is processed before step 2: 2 steps.
    r = run([Request("a", 0.0, 4, 2)])
    assert [rows(r, k) for k in range(3)] == [[("a", 4)], [("a", 1)], [("a", 1)]]
    assert r.steps[1].finished == ("a",) and r.request("a").token_times == (1.0, 2.0)
    off = run([Request("a", 0.0, 4, 2)], overlap=False)
    assert len(off.steps) == 2 and off.request("a").token_times == (1.0, 2.0)


def test_handle_responses_frees_the_active_slot_after_the_next_step_is_scheduled():
    # max_batch_size 1: a (4 + 1) finishes in its context step 0, but stays active through step 1's fetch
    # (_fetch_new_requests counts it): b is not fetched at step 1, where a's extra token runs, and starts at step
    # 2. Under _executor_loop a leaves at step 0's end and b starts at step 1.
    reqs = [Request("a", 0.0, 4, 1), Request("b", 0.0, 4, 1)]
    r = run(reqs, max_batch_size=1)
    assert rows(r, 1) == [("a", 1)] and first_step(r, "b") == 2
    assert why(r, 1, "b") == (Reason.MAX_NUM_SEQS,
                              "not yet active: the active requests are at max_batch_size 1 (1 queued)")
    assert first_step(run(reqs, overlap=False, max_batch_size=1), "b") == 1


def test_terminate_request_frees_the_kv_after_the_next_step_is_scheduled():
    # pool max_tokens 16 = 4 blocks. a: 4 + 4 = 8 tokens, 2 lifetime blocks; b: 8 + 8 = 16, 4 blocks. a runs
    # steps 0-3 (context, then 3 generation tokens: finished at step 3). At step 4's schedule a is still a
    # generation request holding 2 blocks (4 + 3 = 7 tokens) with 2 - 2 = 0 more reserved: 4 - 2 = 2 blocks left
    # for b's 4 (GUARANTEED_NO_EVICT). a's extra token (its 8th) needs no new block; a's KV is freed after step 4
    # is scheduled, so b starts at step 5. Under _executor_loop b starts at step 4.
    reqs = [Request("a", 0.0, 4, 4), Request("b", 0.0, 8, 8)]
    r = run(reqs, max_tokens=16)
    assert r.steps[3].finished == ("a",) and rows(r, 4) == [("a", 1)]
    assert why(r, 4, "b") == (Reason.LIFETIME_KV, "its lifetime KV (4 blocks) does not fit beside the running "
                              "requests' reservations (2 blocks left) under GUARANTEED_NO_EVICT")
    assert first_step(r, "b") == 5
    assert first_step(run(reqs, overlap=False, max_tokens=16), "b") == 4


def test_is_generation_in_progress_state_counts_a_request_to_complete():
    # STATIC_BATCH starts requests only when no generation request runs. a (4 + 2) finishes at step 1; b arrives at
    # t = 2. At step 2 a is GENERATION_TO_COMPLETE, which isGenerationInProgressState counts: the batch is not
    # drained, b waits (a's extra token runs) and starts at step 3. Under _executor_loop b starts at step 2.
    reqs = [Request("a", 0.0, 4, 2), Request("b", 2.0, 4, 1)]
    r = run(reqs, capacity_scheduler_policy="STATIC_BATCH")
    assert rows(r, 2) == [("a", 1)] and why(r, 2, "b")[0] is Reason.BATCH_CLOSED and first_step(r, "b") == 3
    assert first_step(run(reqs, overlap=False, capacity_scheduler_policy="STATIC_BATCH"), "b") == 2


def _shared(n_blocks):
    return tuple(("p", k) for k in range(n_blocks))


def test_update_resources_stores_the_context_blocks_after_the_next_step_is_scheduled():
    # a (8 tokens: blocks p0 p1) runs its context at step 0; b (12 tokens: p0 p1 p2) arrives. At t = 1 the blocks
    # a computed are not stored yet (update_resources runs in _process_previous_batch, after step 1 is
    # scheduled): b finds nothing to reuse and, a being in generation, nobody contributes p0 (no beneficialToSkip):
    # b computes all 12. Arriving at t = 2 it reuses p0 p1 (8 tokens) and computes 4, as it does at t = 1 under
    # _executor_loop.
    a = Request("a", 0.0, 8, 3, hash_ids=_shared(2), hash_block_size=4)

    def b(t):
        return Request("b", t, 12, 2, hash_ids=_shared(3), hash_block_size=4)

    assert rows(run([a, b(1.0)], max_tokens=400), 1) == [("b", 12), ("a", 1)]
    assert rows(run([a, b(2.0)], max_tokens=400), 2) == [("b", 4), ("a", 1)]
    assert rows(run([a, b(1.0)], overlap=False, max_tokens=400), 1) == [("b", 4), ("a", 1)]


def test_max_utilization_pausing_a_request_to_complete_frees_its_kv_and_recomputes_nothing():
    # pool 16 tokens = 4 blocks, MAX_UTILIZATION. a: 4 + 8; b: 4 + 5. Step 0: both contexts (a block each); step
    # 1: 4 -> 5 tokens starts a block each (4 held); steps 2-4: 6-8 tokens, none. b's 5th output comes at step 4:
    # finished. Step 5: a's 9th token needs a block, none free; the last started request from a on is b, whose
    # output is not processed yet (GENERATION_TO_COMPLETE): paused, its 2 blocks back. Its outputs are all
    # sampled: nothing to recompute, and it does not run again. Under _executor_loop b is gone at step 5.
    reqs = [Request("a", 0.0, 4, 8), Request("b", 0.0, 4, 5)]
    r = run(reqs, max_tokens=16, capacity_scheduler_policy="MAX_UTILIZATION")
    assert r.steps[4].finished == ("b",) and rows(r, 5) == [("a", 1)]
    assert r.preemptions == (Preemption(5, "b", FINISHED_IN_FLIGHT, 0, 0, 2, 0.0, False),)
    assert r.request("b").token_times == (1.0, 2.0, 3.0, 4.0, 5.0) and first_step(r, "a") == 0
    assert not any(e.id == "b" for s in r.steps[5:] for e in s.scheduled)
    assert run(reqs, overlap=False, max_tokens=16, capacity_scheduler_policy="MAX_UTILIZATION").preemptions == ()


def test_disable_overlap_scheduler_from_the_flag_and_the_yaml_file(monkeypatch, capsys, tmp_path):
    # the seed workload's trace: under the overlap scheduler each request's last step is followed by its extra
    # token; --disable_overlap_scheduler and the YAML key turn it off alike
    from helpers import write_file

    args = ("trace", "--policy", "trtllm", "--workload", "seed", "--limit", "0")
    code, overlap, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    code, flag, err = cli(monkeypatch, capsys, *args, "--disable_overlap_scheduler")
    assert code == 0, err
    path = write_file(tmp_path, "off.yaml", "disable_overlap_scheduler: true\n")
    code, yaml, err = cli(monkeypatch, capsys, *args, "--extra_llm_api_options", str(path))
    assert code == 0, err
    assert flag == yaml != overlap


def test_the_host_overlaps_the_gpu_as_the_overlap_scheduler_does(tmp_path):
    # under a roofline the trtllm host preset runs step k + 1's host work beside step k's GPU work (max(host, GPU),
    # async_scheduling) with the overlap scheduler, in series without it: the flag and the YAML key alike
    from helpers import write_file

    from servesim.cli.options import SimOptions

    base = dict(model="llama-3-8b", gpu="h100-80gb")
    assert SimOptions(**base).cost_model("trtllm").engine.async_scheduling is True
    assert SimOptions(**base, disable_overlap_scheduler=True).cost_model("trtllm").engine.async_scheduling is False
    path = write_file(tmp_path, "off.yaml", "disable_overlap_scheduler: true\n")
    off = SimOptions(**base, extra_llm_api_options=str(path)).cost_model("trtllm")
    assert off.engine.name == "trtllm" and off.engine.async_scheduling is False
