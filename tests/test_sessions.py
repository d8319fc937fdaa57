"""Multi-turn sessions (issue 13): closed-loop turns (`Request.after`, `think_time`), a conversation's stream as
block identities (`hash_scope` "sequence"), generated conversations and a trace's session ids.

Unit step clock: every step lasts 1 s; block 16 unless said."""

import pytest
from helpers import cli
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim import EngineConfig, Request, simulate
from servesim.errors import ConfigError
from servesim.workloads.sessions import conversations, stream_ids

CFG = EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21)


def two_turns(scope="sequence"):
    # A: a 20-token prompt, 14 answer tokens. B, the next turn, 2 s after A's last token: A's 34 tokens and a
    # 14-token message, 48 in all. Sequence ids cover prompt and answer: one id per 16 tokens of the stream.
    if scope == "sequence":
        a, b = stream_ids("conv-17", 34), stream_ids("conv-17", 50)
    else:  # Mooncake's convention: ids for the prompt's blocks only
        a, b = stream_ids("conv-17", 20), stream_ids("conv-17", 48)
    return [Request("A", 0.0, 20, 14, hash_ids=a, hash_block_size=16, hash_scope=scope),
            Request("B", 0.0, 48, 2, hash_ids=b, hash_block_size=16, hash_scope=scope, after="A", think_time=2.0)]


@pytest.mark.parametrize("fast", [True, False])
def test_the_next_turn_arrives_after_the_answer_and_hits_it(fast):
    # A: prefill in step 0 (first token at 1 s), 13 decodes in steps 1-13 (positions 20-32), last token at 14 s.
    # B arrives at 14 + 2 = 16 s. A computed positions 0-32: blocks 0 (prompt) and 1 (4 prompt + 12 answer tokens)
    # are full and cached; B hits both (32 tokens; at most floor(47 / 16) = 2 anyway), prefills 16 in step 14
    # (16-17 s) and decodes once: done at 18 s.
    r = simulate(two_turns(), CFG, "vllm", "unit", fast=fast)
    a, b = r.requests
    assert (a.arrival_time, a.first_token_time, a.finish_time) == (0.0, 1.0, 14.0)
    assert (b.arrival_time, b.first_token_time, b.finish_time) == (16.0, 17.0, 18.0)
    assert (b.num_cached_tokens, b.cached_from) == (32, "A")
    assert (r.prefix_cache.query_tokens, r.prefix_cache.hit_tokens) == (20 + 48, 32)


def test_prompt_only_ids_cannot_hit_the_answer():
    # with ids for prompts only, A's block 1 is known as (id, 12 generated tokens), B's as a prompt block: only
    # block 0 is shared, 16 tokens
    r = simulate(two_turns("prompt"), CFG, "vllm", "unit")
    assert r.requests[1].num_cached_tokens == 16


def test_a_turn_waits_for_its_own_arrival_time_too():
    reqs = two_turns()
    reqs[1] = Request("B", 30.0, 48, 2, hash_ids=stream_ids("conv-17", 50), hash_block_size=16,
                      hash_scope="sequence", after="A", think_time=2.0)
    assert simulate(reqs, CFG, "vllm", "unit").requests[1].arrival_time == 30.0  # max(30, 14 + 2)


def test_a_rejected_turn_ends_its_session():
    # max_model_len 40: B (48 + 2 tokens) fails on arrival as vLLM rejects it, so C, sent after B, never goes
    reqs = [*two_turns(), Request("C", 0.0, 10, 2, after="B")]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21, max_model_len=40),
                 "vllm", "unit")
    assert r.rejected == ("B", "C")
    assert r.requests[0].finish_time == 14.0


def test_after_must_name_an_earlier_request():
    with pytest.raises(ConfigError, match=r"request 'B' \(request 0, counting from 0\): after='A' names no earlier"):
        simulate([Request("B", 0.0, 8, 2, after="A"), Request("A", 0.0, 8, 2)], CFG, "vllm", "unit")
    with pytest.raises(ValueError, match="cannot be sent after itself"):
        Request("A", 0.0, 8, 2, after="A")
    with pytest.raises(ValueError, match="think_time must be a finite number"):
        Request("A", 0.0, 8, 2, after="Z", think_time=-1.0)


def test_generated_conversations_extend_the_stream():
    # 2 conversations of 3 turns, messages 100, answers 50, a 64-token system prompt: turn k's prompt is
    # 64 + k * 150 + 100 tokens
    reqs = conversations(2, 3, 100, 50, common_prefix=64, think_time=1.0)
    assert [(r.request_id, r.prompt_len, r.after) for r in reqs] == [
        ("c0-t0", 164, None), ("c0-t1", 314, "c0-t0"), ("c0-t2", 464, "c0-t1"),
        ("c1-t0", 164, None), ("c1-t1", 314, "c1-t0"), ("c1-t2", 464, "c1-t1")]
    assert reqs[3].hash_ids[3] == reqs[0].hash_ids[3] == ("common", 3)  # the system prompt's 4 full blocks
    assert reqs[3].hash_ids[4] != reqs[0].hash_ids[4]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=512, max_num_seqs=8, num_gpu_blocks=200), "vllm", "unit")
    # c1-t0, admitted beside c0-t0 in step 0, hits the system prompt c0-t0 computes in that step (P5); a later
    # turn hits every full block of the turn before it: t0 computed 164 + 49 tokens -> 13 blocks, t1 363 -> 22
    assert [(t.id, t.num_cached_tokens) for t in r.requests] == [
        ("c0-t0", 0), ("c0-t1", 208), ("c0-t2", 352), ("c1-t0", 64), ("c1-t1", 208), ("c1-t2", 352)]
    # each turn: 1 prefill step + 49 decodes = 50 s, then 1 s of think time
    assert [t.arrival_time for t in r.requests] == [0.0, 51.0, 102.0, 0.0, 51.0, 102.0]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 40), st.integers(1, 12), st.integers(0, 40),
       st.sampled_from([0.0, 0.5, 3.0]), st.sampled_from([24, 40, 200]), st.booleans())
def test_sessions_finish_and_the_fast_path_agrees(n, turns, message, answer, prefix, think, blocks, chunked):
    # every turn finishes, after its previous turn's last token plus think time; the fast path is step by step
    reqs = conversations(n, turns, message, answer, common_prefix=prefix, think_time=think, request_rate=2.0)
    cfg = EngineConfig(max_num_batched_tokens=64 if chunked else 2048, max_num_seqs=3, block_size=4,
                       num_gpu_blocks=blocks, enable_chunked_prefill=chunked)
    try:
        slow = simulate(reqs, cfg, "vllm", "unit", fast=False, check_invariants=True)
    except ConfigError as exc:  # a turn too long for this pool is refused before the run
        assert "whole pool" in str(exc) or "max_num_batched_tokens" in str(exc)
        return
    fast = simulate(reqs, cfg, "vllm", "unit", fast=True)
    by_id = {t.id: t for t in slow.requests}
    for r in reqs:
        t = by_id[r.request_id]
        assert t.finish_time is not None and len(t.token_times) == r.output_len
        if r.after is not None:
            assert t.arrival_time == max(r.arrival_time, by_id[r.after].finish_time + think)
    assert [(t.id, t.arrival_time, t.token_times, t.num_cached_tokens) for t in fast.requests] == [
        (t.id, t.arrival_time, t.token_times, t.num_cached_tokens) for t in slow.requests]
    assert fast.prefix_cache == slow.prefix_cache


def test_a_traces_session_ids_give_the_turns_their_stream(tmp_path):
    # servesim's CSV with a session column: s1's second turn (at 100 s, long after the first finished) extends
    # the first's 20 + 14 tokens; the other session shares nothing
    path = tmp_path / "sessions.csv"
    path.write_text("arrival_time,prompt_len,output_len,session_id\n0,20,14,1\n0,20,14,2\n100,48,2,1\n")
    from servesim.workloads import load_workload

    reqs = load_workload(str(path))
    assert [r.hash_scope for r in reqs] == ["sequence"] * 3 and reqs[2].after is None  # open loop: trace times
    r = simulate(reqs, CFG, "vllm", "unit")
    assert [(t.id, t.num_cached_tokens, t.cached_from) for t in r.requests] == [
        ("0", 0, None), ("1", 0, None), ("2", 32, "0")]


def test_cli_multi_turn(monkeypatch, capsys):
    code, out, _ = cli(monkeypatch, capsys, "run", "--workload", "multi-turn", "--num-conversations", "4",
                       "--num-turns", "3", "--think-time", "1", "--num-gpu-blocks", "4000")
    assert code == 0 and "Prefix cache hit rate (%):" in out
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "multi-turn", "--num-prompts", "5")
    assert code == 2 and "--num-prompts: --workload multi-turn is shaped by" in err
    code, _, err = cli(monkeypatch, capsys, "run", "--num-turns", "3")
    assert code == 2 and "--num-turns shapes --workload multi-turn" in err
