"""vLLM v1's block pool with prefix caching (issue 13's first step): rules P1-P3 and P6-P8 of
../shared/conformance/round2/README.md, each on a pool small enough to follow by hand (block size 4)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim import EngineConfig, Request, simulate
from servesim.engines.vllm.block_pool import BlockPool, block_hashes

BS = 4


def prefill(pool: BlockPool, hash_ids, prompt_len: int) -> tuple[list[int], list[int]]:
    """Admit a request whose whole prompt is computed at once: hits, new blocks, full blocks registered."""
    hashes = block_hashes(hash_ids, prompt_len, prompt_len, BS)
    hits = pool.lookup(hashes, prompt_len, BS)
    pool.touch(hits)
    new = pool.allocate(-(-prompt_len // BS) - len(hits))
    blocks = hits + new
    for b, h in zip(blocks, hashes):
        pool.register(b, h)
    return hits, blocks


def test_p1_identity_is_a_chain_over_prompt_and_generated_tokens():
    a = block_hashes([1, 2, 3], 10, 12, BS)  # 10 prompt tokens (blocks 1, 2 full, 3 partial) + 2 generated
    b = block_hashes([9, 2, 3], 10, 12, BS)
    assert len(a) == 3 and len(set(a)) == 3
    assert a[0] != b[0] and a[1] != b[1]  # the same second block after a different first one is another block
    assert block_hashes([1, 2, 3], 10, 12, BS) == a  # the same tokens, the same chain
    assert block_hashes([1, 2, 3], 11, 12, BS)[2] != a[2]  # 3 prompt tokens + 1 generated: another third block
    longer = block_hashes([1, 2, 3], 10, 16, BS)  # a fourth block of generated tokens only, after the same chain
    assert longer[:3] == a and len(longer) == 4
    assert block_hashes([1, 2, 3], 10, 16, BS, known=a[:2]) == longer  # a chain so far, extended
    with pytest.raises(ValueError, match="2 hash_ids for a 10-token prompt"):
        block_hashes([1, 2], 10, 10, BS)
    # ids whose own hashes are equal (hash(-1) == hash(-2) in CPython), bare or in a split pair, are other blocks;
    # so are an id and the same digits as text
    assert hash(-1) == hash(-2)
    assert block_hashes([-1], BS, BS, BS) != block_hashes([-2], BS, BS, BS)
    assert block_hashes([(-1, 0)], BS, BS, BS) != block_hashes([(-2, 0)], BS, BS, BS)
    assert block_hashes([1], BS, BS, BS) != block_hashes(["1"], BS, BS, BS)


def test_p2_p3_longest_full_prefix_never_the_last_token():
    pool = BlockPool(10)
    _, a = prefill(pool, [1, 2, 3], 12)  # 3 full blocks, all registered
    # the same 12 tokens again: at most floor(11 / 4) = 2 blocks hit; the aligned last block is recomputed
    assert pool.lookup(block_hashes([1, 2, 3], 12, 12, BS), 12, BS) == a[:2]
    # 13 tokens (a fourth, partial block 4): floor(12 / 4) = 3 blocks may hit, and do
    assert pool.lookup(block_hashes([1, 2, 3, 4], 13, 13, BS), 13, BS) == a
    # a mismatch in block 1 stops the run: only block 0 hits
    assert pool.lookup(block_hashes([1, 7, 3, 4], 13, 13, BS), 13, BS) == a[:1]


def test_p6_no_deduplication_the_earliest_copy_serves():
    pool = BlockPool(10)
    _, a = prefill(pool, [1, 2], 8)
    # admitted before a's blocks were registered (the same step): its own copies, under the same hashes
    second = pool.allocate(2)
    for blk, h in zip(second, block_hashes([1, 2], 8, 8, BS)):
        pool.register(blk, h)
    assert second != a and pool.lookup(block_hashes([1, 2, 5], 9, 9, BS), 9, BS) == a
    pool.free(a)  # a finishes, then its blocks are evicted first (they were released first)...
    pool.allocate(8)  # all 8 free: the 6 never-hashed blocks first, then a's two (released tail first: a[1], a[0])
    assert pool.num_evicted == 2
    assert pool.lookup(block_hashes([1, 2, 5], 9, 9, BS), 9, BS) == second  # ...and the second copy serves


def test_p7_free_queue_order_and_lru_eviction():
    pool = BlockPool(6)
    _, a = prefill(pool, [1, 2, 3], 10)  # blocks 0, 1 full (hashed); block 2 partial (never hashed)
    assert a == [0, 1, 2] and set(pool.block_hash) == {0, 1}
    pool.free(a)  # tail first: 2 (unhashed) to the front; 1 then 0 (hashed) to the back
    assert list(pool.free_queue) == [2, 3, 4, 5, 1, 0]
    assert (pool.num_free, pool.num_cached_free) == (6, 2)  # P8: cached blocks count as free
    assert pool.allocate(4) == [2, 3, 4, 5] and pool.num_evicted == 0  # the uncached ones go first
    # the next block taken is block 1, the suffix: a prefix outlives its suffix
    assert pool.allocate(1) == [1] and pool.num_evicted == 1
    assert pool.lookup(block_hashes([1, 2, 3], 10, 10, BS), 10, BS) == [0]


def test_a_hit_on_a_free_block_takes_it_out_of_the_queue():
    pool = BlockPool(4)
    _, a = prefill(pool, [1, 2], 8)
    pool.free(a)
    assert (pool.num_free, pool.num_cached_free) == (4, 2)
    hits, blocks = prefill(pool, [1, 2, 3], 9)  # 2 hits (evictable), 1 new block
    assert hits == a and pool.num_evictable(hits) == 0  # held now
    assert (pool.num_free, pool.num_cached_free) == (1, 0) and len(blocks) == 3


def test_a_block_held_by_two_requests_is_freed_when_both_let_go():
    pool = BlockPool(6)
    _, a = prefill(pool, [1, 2, 3], 9)
    hits, b = prefill(pool, [1, 2, 4], 9)
    assert hits == a[:2] and pool.ref_cnt[a[0]] == 2
    pool.free(a)
    assert pool.ref_cnt[a[0]] == 1 and a[0] not in pool.free_queue
    pool.free(b)
    assert a[0] in pool.free_queue and pool.num_free == 6


@given(st.lists(st.tuples(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.booleans()), max_size=30))
def test_books_balance(ops):
    """Free + held = the pool; the cached-free count is the hashed blocks in the queue; a lookup returns cached
    blocks only."""
    pool, held = BlockPool(12), []
    for ids, release in ops:
        if release and held:
            pool.free(held.pop(0))
            continue
        n = len(ids) * BS
        hashes = block_hashes(ids, n, n, BS)
        hits = pool.lookup(hashes, n, BS)
        if len(ids) - len(hits) > pool.num_free - pool.num_evictable(hits):
            continue
        _, blocks = prefill(pool, ids, n)
        held.append(blocks)
    in_use = {b for blocks in held for b in blocks}
    assert len(pool.free_queue) + len(in_use) == 12
    assert pool.num_cached_free == sum(b in pool.block_hash for b in pool.free_queue)
    assert all(pool.block_hash[c] == h for h, copies in pool.cached.items() for c in copies)


def test_the_admissions_recorded_from_vllm_in_p6():
    # ../shared/conformance/round2 p6_prefix_edge_cases (block 16, budget 256, 56 usable blocks), as vLLM 0.33
    # recorded each admission's num_cached_tokens: A2 48, A3 64, A4 32, G 64 (F admitted earlier in the same step),
    # G2 288 (admitted in step 51, after F2's last 44 prompt tokens were scheduled in that step: P5).
    bs, pool = 16, BlockPool(56)

    def admit(ids, prompt_len, computed=None):
        hashes = block_hashes(ids, prompt_len, prompt_len, bs)
        hits = pool.lookup(hashes, prompt_len, bs)
        pool.touch(hits)
        computed = prompt_len if computed is None else computed  # tokens scheduled up to now
        blocks = hits + pool.allocate(-(-computed // bs) - len(hits))
        for b, h in zip(blocks, hashes[:computed // bs]):
            pool.register(b, h)  # full blocks become hittable once scheduled
        return len(hits) * bs, blocks, hashes

    cached, a, _ = admit([1, 2, 3, 4], 64)
    assert cached == 0
    pool.free(a)  # A finished (its 3 outputs never fill a block)
    assert admit([1, 2, 3, 4], 64)[0] == 48  # A2: the aligned last block is recomputed (P3)
    assert admit([1, 2, 3, 4, 5], 70)[0] == 64  # A3
    assert admit([1, 2, 6], 40)[0] == 32  # A4: the third block differs
    assert admit([10, 11, 12, 13, 14], 80)[0] == 0  # F
    assert admit([10, 11, 12, 13, 14], 80)[0] == 64  # G, later in the same step
    f2 = list(range(100, 119))  # 300 tokens: 18 full blocks and a partial one
    _, blocks, hashes = admit(f2, 300, computed=256)  # F2's first chunk (step 50); G2 waits for the budget
    more = pool.allocate(-(-300 // bs) - len(blocks))  # step 51: F2's last 44 tokens, blocks 16 and 17 full
    for b, h in zip(blocks[16:] + more, hashes[16:18]):
        pool.register(b, h)
    assert admit(f2, 300)[0] == 288  # G2


def test_simulate_with_hash_ids_reuses_the_prefix():
    # two 64-token prompts with the same 4 blocks (block 16, unit step clock): B arrives after A finished, so A's
    # blocks are cached and evictable; B hits 3 (never the last token: floor(63 / 16)) and computes 16 tokens
    from helpers import tokens

    from servesim import EngineConfig, Request, simulate
    from servesim.errors import ConfigError

    reqs = [Request("A", 0.0, 64, 2, hash_ids=(1, 2, 3, 4)), Request("B", 5.0, 64, 2, hash_ids=(1, 2, 3, 4))]
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21)
    r = simulate(reqs, cfg, "vllm", "unit")
    assert tokens(r) == [[("A", 64)], [("A", 1)], [("B", 16)], [("B", 1)]]
    entry = r.steps[2].scheduled[0]
    assert (entry.num_cached_tokens, entry.num_computed_tokens_before, entry.num_blocks) == (48, 0, 4)
    # cached free blocks: none while A holds its 4 (then 5); A's four hashed blocks go back to the free queue's tail
    # (its unhashed fifth to the front); B takes 3 as hits and its fourth block from the front, so A's fourth
    # stays cached and free through B's steps
    assert [s.cached_free_blocks_after_schedule for s in r.steps] == [0, 0, 1, 1]
    assert list(r.step_log.cached_free_blocks_after_schedule) == [0, 0, 1, 1]
    off = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21,
                                      enable_prefix_caching=False), "vllm", "unit")
    assert tokens(off)[2] == [("B", 64)]
    with pytest.raises(ConfigError, match="3 hash_ids for a 64-token prompt"):
        simulate([Request("A", 0.0, 64, 2, hash_ids=(1, 2, 3))], cfg, "vllm", "unit")


def test_a_traces_larger_blocks_are_split_into_block_size_ones():
    # Mooncake's convention: one id per 512 tokens. A 1100-token prompt has ids (7, 8, 9): 512 + 512 + 76 tokens;
    # at block_size 16 they are 32 + 32 + 5 sub-blocks (7, 0)..(7, 31), (8, 0)..(8, 31), (9, 0)..(9, 4)
    from servesim import Request
    from servesim.engine.kv import split_hash_ids

    r = Request("m", 0.0, 1100, 4, hash_ids=(7, 8, 9), hash_block_size=512)
    ids = split_hash_ids(r, 16)
    assert len(ids) == 69 and ids[0] == (7, 0) and ids[31] == (7, 31) and ids[32] == (8, 0) and ids[-1] == (9, 4)


def test_split_ids_give_hits_across_requests():
    # two requests whose first 32-token trace block is shared (hash_block_size 32, block 16): the second, arriving
    # after the first finished, hits the 2 sub-blocks of that shared block and computes the rest of its 48 tokens
    from helpers import tokens

    from servesim import EngineConfig, Request, simulate
    from servesim.errors import ConfigError

    reqs = [Request("A", 0.0, 48, 2, hash_ids=(1, 2), hash_block_size=32),
            Request("B", 5.0, 48, 2, hash_ids=(1, 3), hash_block_size=32)]
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21)
    r = simulate(reqs, cfg, "vllm", "unit")
    assert tokens(r)[2] == [("B", 16)] and r.steps[2].scheduled[0].num_cached_tokens == 32
    assert (r.prefix_cache.query_tokens, r.prefix_cache.hit_tokens) == (96, 32)
    with pytest.raises(ConfigError, match="cannot be split into or grouped as block_size 16"):
        simulate([Request("A", 0.0, 48, 2, hash_ids=(1, 2), hash_block_size=24)], cfg, "vllm", "unit")


def test_explain_says_what_a_request_reused():
    from servesim import EngineConfig, Request, simulate
    from servesim.analysis.explain import explain_request

    reqs = [Request("A", 0.0, 64, 2, hash_ids=(1, 2, 3, 4)), Request("B", 5.0, 64, 2, hash_ids=(1, 2, 3, 4))]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21), "vllm", "unit")
    lines = explain_request(r, "B")
    assert ("Prefix cache: 48 of its 64 tokens in step 2 hit the cache (from A's blocks) and were "
            "not computed again.") in lines
    assert lines[1].startswith("16 of its 64 prompt tokens were prefilled in one 16-token step (step 2), 16 prompt "
                               "tokens processed, 48 served by the prefix cache;")
    assert not any(line.startswith("Prefix cache") for line in explain_request(r, "A"))


def test_smaller_trace_blocks_are_grouped():
    # 16-token ids in 32-token blocks: each block is the tuple of its two ids; a 40-token prompt has 3 ids
    from servesim import Request
    from servesim.engine.kv import split_hash_ids

    r = Request("m", 0.0, 40, 4, hash_ids=(1, 2, 3), hash_block_size=16)
    assert tuple(split_hash_ids(r, 32)) == ((1, 2), (3,))


@st.composite
def prefix_workloads(draw, max_output=12):
    """Requests whose prompts share prefixes drawn from a few documents, on a small pool (block 4)."""
    n = draw(st.integers(1, 10))
    reqs = []
    for i in range(n):
        doc = draw(st.integers(0, 2))
        shared = draw(st.integers(0, 4))
        own = draw(st.integers(1, 4))
        ids = tuple([(doc, k) for k in range(shared)] + [(i, k) for k in range(own)])
        reqs.append(Request(f"r{i}", float(draw(st.integers(0, 6))), 4 * len(ids) - draw(st.integers(0, 3)),
                            draw(st.integers(1, max_output)), hash_ids=ids))
    return reqs, draw(st.sampled_from([10, 16, 24, 40])), draw(st.sampled_from([8, 16, 64]))


@given(prefix_workloads())
def test_prefix_caching_keeps_the_books_and_finishes_everyone(w):
    # KV never over-allocated, shared blocks held once with matching ref counts (engine.loop.assert_invariants),
    # every request gets all its tokens
    reqs, blocks, budget = w
    cfg = EngineConfig(max_num_batched_tokens=budget, max_num_seqs=4, block_size=4, num_gpu_blocks=blocks)
    try:
        on = simulate(reqs, cfg, "vllm", "unit", check_invariants=True)
    except Exception as exc:  # a request too big for this pool is refused before the run
        assert "whole pool" in str(exc)
        return
    assert all(len(r.token_times) == r.output_len for r in on.requests)
    stats = on.prefix_cache
    assert stats is not None and 0 <= stats.hit_tokens <= stats.query_tokens
    # every hit is whole blocks and never the last token of the (re)admission it served
    for s in on.steps:
        for e in s.scheduled:
            assert e.num_cached_tokens % 4 == 0 and e.num_cached_tokens < e.num_tokens_before


def test_ids_whose_int_hashes_collide_stay_apart():
    # CPython's hash(-1) == hash(-2): the compact block hashes must still tell these prompts apart
    reqs = [Request("A", 0.0, 32, 2, hash_ids=(-1, 5)), Request("B", 5.0, 32, 2, hash_ids=(-2, 5))]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21), "vllm", "unit")
    assert r.prefix_cache.hit_tokens == 0


def test_hits_name_their_source_and_eviction_is_counted():
    # block 16, 8 usable blocks (ids 0-7). A's 64-token prompt fills blocks 0-3 and finishes; they go back to the
    # free queue's tail, last block first: [4, 5, 6, 7, 3, 2, 1, 0]. C's 96-token prompt (other content) takes six
    # from the front, evicting A's blocks 3 and 2. B, with A's prompt, then hits A's blocks 0 and 1 only (32
    # tokens, served by A); its third block was evicted, so 16 tokens are lost to eviction (the fourth would not
    # have hit anyway: never the last token, floor(63 / 16) = 3 blocks at most). C's six blocks went back hashed,
    # last first: [1, 0, 2, 3, 7, 6, 5, 4]; B takes 0 and 1 as hits and its two new blocks off the front, 2 and 3,
    # evicting two of C's: 4 evictions in all.
    from servesim import EngineConfig, Request, simulate

    reqs = [Request("A", 0.0, 64, 1, hash_ids=(1, 2, 3, 4)), Request("C", 2.0, 96, 1, hash_ids=tuple(range(9, 15))),
            Request("B", 10.0, 64, 1, hash_ids=(1, 2, 3, 4))]
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=9)
    r = simulate(reqs, cfg, "vllm", "unit")
    assert [(t.id, t.num_cached_tokens, t.cached_from) for t in r.requests] == [
        ("A", 0, None), ("C", 0, None), ("B", 32, "A")]
    stats = r.prefix_cache
    assert (stats.hit_tokens, stats.evicted_blocks, stats.lost_tokens, stats.lost_admissions) == (32, 4, 16, 1)
    # without step records (explain's tracking off) the loss is not counted, and says so
    summary = simulate(reqs, cfg, "vllm", "unit", record="summary").prefix_cache
    assert (summary.hit_tokens, summary.lost_tokens) == (32, None)


@pytest.mark.parametrize(("async_scheduling", "registered"), [
    (False, [1, 1, 1, 1, 2, 2]),
    (True, [1, 1, 1, 1, 1, 2, 2]),
])
def test_async_scheduling_registers_decode_blocks_one_step_later(async_scheduling, registered):
    # P5: A (4-token prompt, 6 outputs, block 4) computes its prompt block in step 0 (registered at once: prompt
    # tokens are known) and positions 4..7 in steps 1..4. Step 4 completes block 1 with the token sampled in step
    # 3; under async scheduling that token is still in flight when step 4 is scheduled, so block 1 has no hash
    # until step 5. (Async: one more step, in which the finished A's blocks come back.)
    from servesim import EngineConfig, Request
    from servesim.cost import get_cost_model
    from servesim.engine.loop import Engine
    from servesim.engine.resolve import resolve_config

    reqs = [Request("A", 0.0, 4, 6, hash_ids=(1,))]
    cfg = resolve_config(EngineConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=20,
                                      async_scheduling=async_scheduling), "vllm", reqs, get_cost_model("unit"))
    counts = []
    engine = Engine(reqs, cfg, "vllm", get_cost_model("unit"), "full", lambda s: counts.append(
        len(engine.kv.pool.block_hash)), None, fast=False, check_invariants=False)
    engine.run()
    assert counts == registered


def test_prompts_given_as_token_ids():
    # token ids are hash ids of 1-token blocks, grouped into block_size blocks (a block is the tuple of its tokens):
    # B shares A's first 40 tokens, so 2 full blocks of 16 (32 tokens) hit, not 40
    from servesim import EngineConfig, Request, simulate

    a = tuple(range(100, 164))
    b = a[:40] + tuple(range(500, 524))
    reqs = [Request("A", 0.0, 64, 1, hash_ids=a, hash_block_size=1), Request("B", 5.0, 64, 1, hash_ids=b,
                                                                              hash_block_size=1)]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21), "vllm", "unit")
    assert [t.num_cached_tokens for t in r.requests] == [0, 32]


def test_the_cost_model_charges_the_uncached_tokens_against_the_whole_context():
    # B's 48 cached tokens are not computed again: its step is a 16-token chunk whose attention reads a 48-token
    # context (the roofline's prefill attention grows with the context), not a 64-token chunk from 0
    from servesim import EngineConfig, Request, simulate
    from servesim.cost import StepShape, get_cost_model

    cost = get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb", tp=1)
    reqs = [Request("A", 0.0, 64, 2, hash_ids=(1, 2, 3, 4)), Request("B", 5.0, 64, 2, hash_ids=(1, 2, 3, 4))]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21), "vllm", cost)
    step = next(s for s in r.steps if any(e.id == "B" and e.num_cached_tokens for e in s.scheduled))
    assert step.duration == cost.step_time(StepShape((16,), (48,), (False,), 1))
    assert step.duration < cost.step_time(StepShape((64,), (0,), (False,), 1))
