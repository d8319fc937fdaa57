"""explain on prefix caching: what a request reused and from whom, and what eviction cost (issue 13).

The scenario is test_block_pool.test_hits_name_their_source_and_eviction_is_counted's, derived there: B hits A's
first two blocks (32 tokens), its third was evicted by C (16 tokens lost), 4 blocks evicted in all; 224 tokens
looked up (64 + 96 + 64)."""

from servesim import EngineConfig, Request, simulate
from servesim.analysis.breakdown import Bound, bound_by
from servesim.analysis.explain import explain_request, explain_run, prefix_cache_sentence

REQS = [Request("A", 0.0, 64, 1, hash_ids=(1, 2, 3, 4)), Request("C", 2.0, 96, 1, hash_ids=tuple(range(9, 15))),
        Request("B", 10.0, 64, 1, hash_ids=(1, 2, 3, 4))]
CFG = EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=9)


def test_the_run_says_what_the_cache_served_and_what_eviction_cost():
    r = simulate(REQS, CFG, "vllm", "unit")
    assert prefix_cache_sentence(r) == (
        "The prefix cache served 32 of the 224 tokens looked up at admissions (14.29%); the largest reuse: B, 32 of "
        "its 64 prompt tokens, from A's blocks. 4 cached blocks were evicted to make room; 1 admission then found "
        "part of a prefix evicted and computed 16 tokens again that had been cached.")
    assert prefix_cache_sentence(r) in explain_run(r)


def test_a_request_says_whose_blocks_it_reused():
    r = simulate(REQS, CFG, "vllm", "unit")
    assert explain_request(r, "B")[-1] == (
        "Prefix cache: 32 of its 64 tokens in step 2 hit the cache (from A's blocks) and were not computed again.")


def test_a_step_whose_prompt_was_partly_cached_is_not_cut_short():
    # B needed 32 tokens after its 32 cached ones and got them: the step was bound by nothing, not by a threshold
    r = simulate(REQS, CFG, "vllm", "unit")
    assert [bound_by(s) for s in r.steps] == [Bound.NOTHING] * 3


def test_no_eviction_wanted_back():
    # a pool big enough for all three: nothing evicted, nothing lost
    r = simulate(REQS, EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=100), "vllm", "unit")
    assert r.prefix_cache.lost_tokens == 0 and r.prefix_cache.evicted_blocks == 0
    assert prefix_cache_sentence(r).endswith("B, 48 of its 64 prompt tokens, from A's blocks. 0 cached blocks were "
                                             "evicted to make room.")
