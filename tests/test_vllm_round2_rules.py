"""Round 2's scheduling rules of vLLM 0.33 (../shared/conformance/round2/README.md, rules 1-3), one tiny scenario
each, on the unit step clock, numbers by hand."""

from helpers import reqs, run, tokens

from servesim.engine.records import Reason
from servesim.engine.scheduler import FINISHED_IN_FLIGHT


def test_rule1_priority_ties_keep_workload_order_never_id_order():
    # One seat (max_num_seqs 1), budget 4: each 4-token prompt takes a whole step and finishes (output 1).
    # Step 0: r9 and r10 (both priority 1, arriving at 0) wait; r9 came first in the workload, so it goes first
    # although "r10" < "r9" as strings. Step 1: r8 (priority 1) and r7 (priority 0) arrive at 1; the queue is
    # r7 (priority 0), then r10 (priority 1, arrived at 0), then r8 (priority 1, arrived at 1).
    r = run(reqs(("r9", 0, 4, 1, 1), ("r10", 0, 4, 1, 1), ("r8", 1, 4, 1, 1), ("r7", 1, 4, 1, 0)),
            max_num_batched_tokens=4, max_num_seqs=1, policy="priority")
    assert tokens(r) == [[("r9", 4)], [("r7", 4)], [("r10", 4)], [("r8", 4)]]


def test_rule1_a_preempted_request_goes_back_before_its_later_twin():
    # Blocks of 4, 4 usable (num_gpu_blocks 5). r10, r9, r11 all priority 0 at step 0, in that workload order
    # (as id strings: r10 < r11 < r9). Step 0: r10 (8 tokens, 2 blocks), then r9 (8 tokens, 2 blocks): the pool
    # is full and r11 (1 block) waits. Step 1: r10's 9th token needs a 3rd block; the victim is the largest
    # (priority, arrival), i.e. the one created later: r9, which goes back to the queue before r11 (created
    # earlier). Step 2: r10's 3rd and last token; it frees its 3 blocks (4 free). Step 3: r9 resumes first
    # (8 + 1 output = 9 tokens, 3 blocks), then r11 (4 tokens, the last free block).
    r = run(reqs(("r10", 0, 8, 3), ("r9", 0, 8, 2), ("r11", 0, 4, 1)), max_num_batched_tokens=32,
            max_num_seqs=4, block_size=4, num_gpu_blocks=5, policy="priority")
    t = tokens(r)
    assert t[:4] == [[("r10", 8), ("r9", 8)], [("r10", 1)], [("r10", 1)], [("r9", 9), ("r11", 4)]]
    assert r.steps[1].preempted == ("r9",)
    assert reasons_at(r, 0)["r11"] is Reason.KV_BLOCKS
    assert r.steps[3].free_blocks_after_schedule == 0


def reasons_at(result, step):
    return {w.id: w.reason for w in result.steps[step].waiting}


def test_rule2_fcfs_async_preempts_a_request_whose_last_token_is_in_flight():
    # Async scheduling, blocks of 4, 2 usable (num_gpu_blocks 3). Step 0: A (prompt 4, output 3) and B (prompt 4,
    # output 1) take 1 block each; B samples its only token, so it is finished, its token in flight: it keeps
    # its block and its place in `running` until step 1's release.
    # Step 1: A's 5th token needs a 2nd block and none is free. The victim is running[-1] = B, in flight or not:
    # B's block is freed at once (A takes it: 0 free), the preemption counts, nothing is recomputed, and B does
    # not go back to the queue: its in-flight token still finishes it (released, observed, in step 1).
    # Step 2: A's 6th token fits in its 2 blocks; it samples its last token. Step 3: A's release only.
    r = run(reqs(("A", 0, 4, 3), ("B", 0, 4, 1)), max_num_batched_tokens=16, max_num_seqs=4, block_size=4,
            num_gpu_blocks=3, async_scheduling=True)
    assert tokens(r) == [[("A", 4), ("B", 4)], [("A", 1)], [("A", 1)], []]
    s0, s1 = r.steps[0], r.steps[1]
    assert (s0.finished, s0.free_blocks_after_schedule, s0.free_blocks_after_step) == (("B",), 0, 0)
    assert (s1.preempted, s1.finished_observed) == (("B",), ("B",))
    assert (s1.free_blocks_after_schedule, s1.free_blocks_after_step) == (0, 0)
    assert (s1.num_running_after, s1.num_waiting_after) == (1, 0)
    assert r.steps[3].finished_observed == ("A",) and r.steps[3].free_blocks_after_step == 2
    (p,) = r.preemptions
    assert (p.step, p.id, p.mode, p.tokens_discarded, p.blocks_freed) == (1, "B", FINISHED_IN_FLIGHT, 0, 1)
    assert r.recomputed_tokens == 0
    b = r.request("B")
    assert (b.num_preemptions, b.finish_time, len(b.token_times)) == (1, 1.0, 1)  # step 0 ends at 1 s
    assert r.request("A").finish_time == 3.0


def test_rule2_priority_victim_before_the_request_shifts_the_running_scan():
    # Async, priority, blocks of 4, 4 usable (num_gpu_blocks 5). X (priority 9, prompt 4, output 2) arrives at 0;
    # Y (priority 0, prompt 4, output 3) and Z (priority 0, prompt 2, output 3) at 1.
    # Step 0: X alone: 4 tokens, 1 block, 1st token. Step 1: X's 5th token takes a 2nd block (2 free) and samples
    # its last token (finished, in flight); Y (4 tokens) and Z (2 tokens) are admitted, 1 block each: 0 free.
    # Step 2: running = [X, Y, Z]. X has nothing to compute (skipped, index 0 -> 1); Y's 5th token needs a 2nd
    # block: the victim is the largest (priority, arrival), X, which stands BEFORE Y and was not scheduled, so
    # the scan index stays: X's 2 blocks are freed, Y takes 1 (1 free), the index moves to 2 = len([Y, Z]) and
    # the scan ends. Z, which needed no new block, gets nothing this step (as in vLLM). The preemption freezes
    # admission. Step 3: Y's 6th token (its last; 2 blocks hold 6) and Z's 3rd. Step 4: Z's 4th, its last.
    # Step 5: Z's release only.
    r = run(reqs(("X", 0, 4, 2, 9), ("Y", 1, 4, 3, 0), ("Z", 1, 2, 3, 0)), max_num_batched_tokens=16,
            max_num_seqs=4, block_size=4, num_gpu_blocks=5, policy="priority", async_scheduling=True)
    assert tokens(r) == [[("X", 4)], [("X", 1), ("Y", 4), ("Z", 2)], [("Y", 1)], [("Y", 1), ("Z", 1)],
                         [("Z", 1)], []]
    assert r.steps[1].finished == ("X",) and r.steps[1].free_blocks_after_schedule == 0
    s2 = r.steps[2]
    assert (s2.preempted, s2.finished_observed, s2.free_blocks_after_schedule) == (("X",), ("X",), 1)
    assert [p.id for p in r.preemptions] == ["X"]
    assert (r.request("X").num_preemptions, r.request("Z").num_preemptions) == (1, 0)
    assert r.request("X").finish_time == 2.0  # its last token came in step 1, which ends at 2 s


def chunking_off(threshold):
    # budget 16 = max_model_len 16, chunking off: A (8 + 4), B (12 + 2), C (10 + 1) all arrive at 0
    return run(reqs(("A", 0, 8, 4), ("B", 0, 12, 2), ("C", 0, 10, 1)), max_num_batched_tokens=16,
               max_model_len=16, enable_chunked_prefill=False, long_prefill_token_threshold=threshold)


def test_rule3_the_threshold_caps_a_waiting_request_before_the_chunking_off_test():
    # Threshold 6 (three requests present, so it applies). Step 0: A is capped to 6 tokens (10 left), B to 6
    # (4 left), so the chunking-off test sees 6, not 8 or 12; C, capped to 6, needs more than the 4 left: it
    # waits. Step 1: A's last 2 prompt tokens (1st output), B's last 6 (1st output), then C's first 6 chunk
    # (16 - 2 - 6 = 8 left >= 6). Step 2: A 1, B 1 (its 2nd and last), C's last 4 (its only output). Steps 3-4:
    # A alone, its 3rd and 4th tokens.
    r = chunking_off(6)
    assert tokens(r) == [[("A", 6), ("B", 6)], [("A", 2), ("B", 6), ("C", 6)], [("A", 1), ("B", 1), ("C", 4)],
                         [("A", 1)], [("A", 1)]]
    w = next(w for w in r.steps[0].waiting if w.id == "C")
    assert (w.reason, w.detail) == (Reason.TOKEN_BUDGET, "needs 6 tokens, 4 left, chunking off")
    assert [e.kind.value for e in r.steps[1].scheduled] == ["prefill", "prefill", "prefill"]
    assert r.request("B").num_prefill_chunks == 2


def test_rule3_without_a_threshold_chunking_off_admits_whole_prompts_only():
    # Threshold 0: step 0 admits A whole (8 of 16); B's 12 tokens exceed the 8 left, and with chunking off the
    # queue stops there (C waits behind B). Step 1: A 1, then B whole (12 of 15 left); C's 10 > 3: it waits.
    r = chunking_off(0)
    t = tokens(r)
    assert t[:2] == [[("A", 8)], [("A", 1), ("B", 12)]]
    w = {w.id: w for w in r.steps[0].waiting}
    assert (w["B"].reason, w["B"].detail) == (Reason.TOKEN_BUDGET, "needs 12 tokens, 8 left, chunking off")
    assert w["C"].reason is Reason.BLOCKED_BEHIND_HEAD
