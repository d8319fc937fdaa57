"""Invariants over random small workloads and configurations (Hypothesis)."""

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.engine import simulate
from servesim.engine.kv import blocks_for
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.engines.registry import policy_class
from servesim.engines.vllm.speculative import SpeculativeConfig


@st.composite
def scenarios(draw, speculation: bool = False):
    """A small workload, config and policy; `speculation`: vLLM's with speculative decoding on (else drawn)."""
    n = draw(st.integers(1, 8))
    requests = [
        Request(f"r{i}", float(draw(st.integers(0, 12))), draw(st.integers(1, 60)), draw(st.integers(1, 12)),
                draw(st.integers(0, 3)))
        for i in range(n)
    ]
    longest = max(r.prompt_len + r.output_len for r in requests)
    block_size = draw(st.sampled_from([1, 4, 16]))
    chunked = draw(st.booleans())
    max_num_seqs = draw(st.integers(1, 6))
    if chunked:
        budget = draw(st.integers(max_num_seqs, 96))
    else:
        budget = draw(st.integers(max(longest, max_num_seqs), longest + 64))
    need = blocks_for(longest - 1, block_size)
    gpu_blocks = draw(st.one_of(st.none(), st.integers(need + 1, need + 12)))
    config = EngineConfig(
        max_num_batched_tokens=budget, max_num_seqs=max_num_seqs, enable_chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 5, 17])), block_size=block_size,
        num_gpu_blocks=gpu_blocks, policy=draw(st.sampled_from(["fcfs", "priority"])),
        preemption_mode=(mode := draw(st.sampled_from(["recompute", "swap"]))),
        num_cpu_blocks=draw(st.sampled_from([None, 2])) if mode == "swap" else None,
        async_scheduling=draw(st.booleans()),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1])) if gpu_blocks and gpu_blocks > 20 else 0.0,
    )
    policy = "vllm" if speculation else draw(st.sampled_from(["vllm", "vllm", "continuous", "static"]))
    if speculation or policy == "vllm" and draw(st.integers(0, 2)) == 0:
        requests, config = speculative(draw, requests, config, longest)
    if policy != "vllm":
        config = EngineConfig(**{**{f: getattr(config, f) for f in EngineConfig.field_names()},
                                 "enable_chunked_prefill": False,
                                 "max_num_batched_tokens": max(longest, max_num_seqs),
                                 # what the policy never reads is refused when given: at its default
                                 **{k: getattr(EngineConfig(), k) for k in policy_class(policy).unread}})
    return requests, config, policy


def speculative(draw, requests, config, longest):
    """vLLM's speculative decoding on: a method and K, each request's acceptance (its own list, else the run's
    seeded rates), the V1 runner's variable proposals, a pool that holds a lone request's drafts and lookahead."""
    method = draw(st.sampled_from(["ngram", "eagle", "eagle3", "mtp", "draft_model"]))
    k = draw(st.integers(1, 4))
    spec = SpeculativeConfig(method, k, parallel_drafting=method in ("eagle", "eagle3", "draft_model")
                             and draw(st.booleans()))
    rates = draw(st.one_of(st.none(), st.lists(st.sampled_from([0.0, 0.3, 0.7, 1.0]), min_size=1, max_size=3)))
    v2 = draw(st.booleans()) or (config.async_scheduling and method == "ngram")
    own = st.lists(st.integers(0, k + 1), min_size=1, max_size=4).map(tuple)
    requests = [replace(r, accept=draw(own if rates is None else st.one_of(st.none(), own)),
                        draft_lens=None if v2 else draw(st.one_of(st.none(), own))) for r in requests]
    blocks = config.num_gpu_blocks and max(config.num_gpu_blocks, blocks_for(longest, config.block_size) + 1)
    # (a draft model's input slots come out of the budget: chunking off, the longest prompt must still fit)
    budget = config.max_num_batched_tokens + (0 if config.enable_chunked_prefill else
                                              spec.max_num_new_slots_for_drafting)
    budget = max(budget, spec.max_num_new_slots_for_drafting + 1)
    return requests, replace(config, speculative_config=spec, acceptance_rate=rates and tuple(rates),
                             acceptance_seed=draw(st.integers(0, 3)), use_v2_model_runner=v2,
                             preemption_mode="recompute", num_cpu_blocks=None, num_gpu_blocks=blocks,
                             max_num_batched_tokens=budget)


def net_tokens(entry, request) -> int:
    """The computed tokens an entry adds once its rejected drafts and the tokens past the request's last are
    rolled back (speculative decoding; without it, its scheduled tokens)."""
    k = entry.num_scheduled_tokens
    if not entry.samples_token:
        return k
    # (async speculation: a request scheduled once more after its last token gains nothing, and computes nothing)
    sampled = 1 + entry.num_accepted
    kept = min(sampled, request.output_len - (entry.num_tokens_before - request.prompt_len))
    return k - (entry.num_spec_tokens - entry.num_accepted) - (sampled - kept)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_invariants_hold_and_every_request_finishes(scenario):
    requests, config, policy = scenario
    # check_invariants asserts after every step: budget, max_num_seqs, free + held = usable, no over-allocation
    r = simulate(requests, config, policy, "unit", check_invariants=True)
    by_id = {q.request_id: q for q in requests}
    for t in r.requests:
        assert t.finish_time is not None
        assert t.num_tokens == by_id[t.id].output_len  # (speculative decoding: a step can bring several)
        assert len(t.token_times) <= t.num_tokens
        assert list(t.token_times) == sorted(t.token_times)
        assert t.token_times[0] > t.arrival_time
    for s in r.steps:
        assert s.total_scheduled_tokens <= s.token_budget
        if s.free_blocks_after_schedule is not None:
            assert 0 <= s.free_blocks_after_schedule <= config.num_gpu_blocks - 1


@SETTINGS
@given(scenarios())
def test_tokens_are_neither_lost_nor_duplicated_across_preemptions(scenario):
    requests, config, policy = scenario
    r = simulate(requests, config, policy, "unit")
    processed, by_id = Counter(), {q.request_id: q for q in requests}
    for s in r.steps:
        for e in s.scheduled:
            processed[e.id] += net_tokens(e, by_id[e.id])
    discarded = Counter()
    for p in r.preemptions:
        discarded[p.id] += p.tokens_discarded
    for q in requests:
        # the prompt and every output but the last are processed once, plus whatever a recompute threw away
        assert processed[q.request_id] == q.prompt_len + q.output_len - 1 + discarded[q.request_id]


@SETTINGS
@given(scenarios())
def test_swap_and_recompute_produce_the_same_output_tokens(scenario):
    requests, config, policy = scenario
    fields = {f: getattr(config, f) for f in EngineConfig.field_names()}
    outs = []
    swaps = "preemption_mode" not in policy_class(policy).unread and config.speculative_config is None
    for mode in ("recompute", "swap") if swaps else ("recompute",):  # (vLLM v1, which speculates, has no swap)
        r = simulate(requests, EngineConfig(**{**fields, "preemption_mode": mode}), policy, "unit")
        outs.append({t.id: t.num_tokens for t in r.requests})
    assert all(out == {q.request_id: q.output_len for q in requests} for out in outs)


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_the_same_input_gives_the_same_records(scenario):
    requests, config, policy = scenario
    assert simulate(requests, config, policy, "toy") == simulate(requests, config, policy, "toy")


@SETTINGS
@given(scenarios(speculation=True))
def test_speculative_decoding_keeps_every_invariant(scenario):
    # with speculation always on: the budget and KV invariants after every step, every request finishing with its
    # output_len tokens, and the computed tokens net of rejected drafts and trimmed tokens adding up
    test_invariants_hold_and_every_request_finishes.hypothesis.inner_test(scenario)
    test_tokens_are_neither_lost_nor_duplicated_across_preemptions.hypothesis.inner_test(scenario)
