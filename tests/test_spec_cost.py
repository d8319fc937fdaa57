"""Speculative decoding's cost on the roofline (the target's verification, the drafter's passes and memory) and
its metrics as vLLM counts them (`SpecDecodingStats`, `vllm bench serve`'s "Speculative Decoding" block)."""

from dataclasses import replace

import pytest

from servesim.analysis.benchmark import benchmark_metrics, format_result, spec_decode_json
from servesim.cost import Roofline, StepShape
from servesim.cost.speculative import EAGLE3_DRAFT_VOCAB, SpeculativeCost, draft_model_spec, with_drafter
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.engines.vllm.speculative import speculative_config
from servesim.errors import ConfigError


def spec(method, k=3, **more):
    return speculative_config({"method": method, "num_speculative_tokens": k, **more})


TARGET = Roofline("llama-3.1-8b", "h100-80gb")
# two decodes verifying 3 drafts each (4 new tokens against 1,000 and 2,000 tokens), one prefill chunk of 512
SHAPE = StepShape((4, 4, 512), (1000, 2000, 0), (True, True, False), 3)


def test_verification_reads_the_targets_logits_at_every_draft_position():
    # n-gram drafting costs no GPU work: the step is the target's over the same rows, its LM head and sampler over
    # 3 + 2 x 3 = 9 rows (each verifying decode's 1 + 3 positions, the completing prefill's one) instead of 3
    cost = SpeculativeCost(TARGET, spec("ngram"))
    assert cost.drafter is None
    assert cost.step_time(SHAPE) == TARGET.step_time(replace(SHAPE, num_sampled=9))
    assert cost.step_time(SHAPE) > TARGET.step_time(SHAPE)
    plain = StepShape((1, 1), (1000, 2000), (True, True), 2)  # no drafts: the target's step exactly
    assert cost.step_time(plain) == TARGET.step_time(plain)


def test_an_eagle3_head_is_one_layer_of_the_target_with_a_32k_vocabulary():
    head = draft_model_spec(TARGET.model, "eagle3")
    assert (head.num_hidden_layers, head.hidden_size, head.intermediate_size, head.vocab_size) == (
        1, 4096, 14336, EAGLE3_DRAFT_VOCAB)
    cost = SpeculativeCost(TARGET, spec("eagle3"))
    # one Llama-3.1-8B layer: qkv 4096 x (32 + 2 x 8) x 128 = 25,165,824, o 4096 x 4096 = 16,777,216,
    # gate_up 4096 x 2 x 14336 = 117,440,512, down 14336 x 4096 = 58,720,256: 218,103,808 weights; embedding and
    # LM head 2 x 32,000 x 4096 = 262,144,000; 480,247,808 x 2 bytes
    assert cost.drafter.weight_bytes == 960_495_616
    # its layer's KV per token, 2 x 8 x 128 x 2 = 4,096 bytes, beside the target's 32 x 4,096 = 131,072
    assert cost.kv_bytes_per_token == 131_072 + 4_096
    # the pool: (80 GiB x 0.9 - both weights - the activation peak) / (16 x 135,168) blocks
    free = TARGET.gpu.memory_bytes * 0.9 - TARGET.weight_bytes - 960_495_616 - TARGET.activation_peak_bytes(8192, 1024)
    assert cost.num_gpu_blocks(16, 0.9, 8192, 1024) == int(free // (16 * 135_168))
    assert cost.num_gpu_blocks(16, 0.9, 8192, 1024) < TARGET.num_gpu_blocks(16, 0.9, 8192, 1024)


def test_an_eagle_head_shares_the_targets_embedding_and_lm_head():
    cost = SpeculativeCost(TARGET, spec("eagle"))
    # its own: the layer's 218,103,808 x 2 bytes; the 128,256 x 4096 embedding and LM head are the target's
    assert cost.weight_bytes - TARGET.weight_bytes == 436_207_616


def test_the_drafter_runs_once_over_the_steps_tokens_then_k_minus_1_times_one_token_each():
    # EagleProposer.propose: the first pass over the 520 tokens the target ran, then K - 1 = 2 passes of one token
    # for each of the 3 sampling requests, against their contexts after the step (1,004 + 2,004 + 512: the
    # prefill's, as the shape does not say which prefill rows complete, its own 512)
    cost = SpeculativeCost(TARGET, spec("eagle3"))
    head = Roofline(draft_model_spec(TARGET.model, "eagle3"), "h100-80gb", 1,
                    replace(TARGET.params, step_overhead=0.0))
    first = head.step_time_with_decodes(0, 0, SHAPE, device_only=True)
    later = head.step_time_with_decodes(3, 1004 + 2004 + 512, StepShape((), (), (), 0), device_only=True)
    assert cost.draft_time(SHAPE) == pytest.approx(first + 2 * later, rel=1e-12)
    target_device = TARGET.step_time(replace(SHAPE, num_sampled=9))  # (no engine profile: the device's time)
    assert cost.step_time(SHAPE) == pytest.approx(target_device + first + 2 * later, rel=1e-12)


def test_a_draft_model_is_priced_by_its_own_roofline_and_must_be_named():
    cost = SpeculativeCost(TARGET, spec("draft_model", model="llama-2-7b"))
    assert cost.drafter.model.name == "llama-2-7b" and cost.drafter.tp == 1
    with pytest.raises(ConfigError, match="speculative_config.model: a draft_model drafter must name its model"):
        SpeculativeCost(TARGET, spec("draft_model"))
    with pytest.raises(ConfigError, match="unknown model 'tiny-llama'"):
        SpeculativeCost(TARGET, spec("draft_model", model="tiny-llama"))


def test_only_a_roofline_is_given_a_drafter():
    cfg = EngineConfig(speculative_config=spec("eagle3"))
    assert isinstance(with_drafter(TARGET, cfg), SpeculativeCost)
    assert with_drafter(TARGET, EngineConfig()) is TARGET
    assert with_drafter("toy", cfg) == "toy"  # (the lesson's toy cost and the unit clock stay as they are)


def run(accept=None, rate=None):
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, max_model_len=1024,
                       speculative_config=spec("ngram"), acceptance_rate=rate)
    return simulate([Request("A", 0.0, 64, 101, accept=accept)], cfg, "vllm", "toy")


def test_spec_decoding_stats_count_as_vllm_does():
    # output 101 at K = 3: all accepted, 100 tokens in 25 verifications of 3 drafts, 75 drafted and accepted,
    # 1 + 75 / 25 = 4 tokens a verification, every position accepted every time
    s = run(rate=1.0).spec_decoding
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens) == (25, 75, 75)
    assert (s.acceptance_rate, s.acceptance_length, s.per_position_acceptance_rates) == (1.0, 4.0, [1.0] * 3)
    # one draft accepted a verification: 2 tokens each, 100 / 2 = 50 verifications, 150 drafted, 50 accepted
    # (a third), 1 + 50 / 50 = 2 tokens a verification; the first position always, the others never; 100 wasted
    s = run(accept=(1,)).spec_decoding
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens, s.num_wasted_tokens) == (50, 150, 50, 100)
    assert (s.acceptance_rate, s.acceptance_length, s.per_position_acceptance_rates) == (1 / 3, 2.0, [1.0, 0, 0])


def test_the_speculative_decoding_block_and_result_keys_as_vllm_bench_serve_writes_them():
    r = run(accept=(1,))
    text = format_result(benchmark_metrics(r), spec=r.spec_decoding)
    lines = text.splitlines()
    i = lines.index(f"{'Speculative Decoding':-^50}")
    assert [line.rstrip() for line in lines[i + 1:i + 10]] == [
        "Acceptance rate (%):                     33.33", "Acceptance length:                       2.00",
        "Drafts:                                  50", "Draft tokens:                            150",
        "Accepted tokens:                         50", "Per-position acceptance (%):",
        "  Position 0:                            100.00", "  Position 1:                            0.00",
        "  Position 2:                            0.00"]
    assert lines[-1] == "=" * 50
    assert spec_decode_json(r.spec_decoding) == {
        "spec_decode_acceptance_rate": pytest.approx(100 / 3), "spec_decode_acceptance_length": 2.0,
        "spec_decode_num_drafts": 50,
        "spec_decode_draft_tokens": 150, "spec_decode_accepted_tokens": 50,
        "spec_decode_per_position_acceptance_rates": [1.0, 0.0, 0.0]}
    plain = simulate([Request("A", 0.0, 64, 101)], EngineConfig(max_num_batched_tokens=256, max_num_seqs=8),
                     "vllm", "toy")
    assert plain.spec_decoding is None and "Speculative" not in format_result(benchmark_metrics(plain))


def sglang(algorithm="EAGLE3", steps=3, **more):
    from servesim.engines.sglang.server_args import SGLangConfig

    return EngineConfig(sglang=SGLangConfig(speculative_algorithm=algorithm, speculative_num_steps=steps,
                                            speculative_eagle_topk=1, **more), acceptance_rate=0.7)


def test_sglang_drafts_k_minus_1_one_token_passes_for_the_decodes_that_verify():
    # EAGLEWorkerV2: draft() runs num_steps - 1 = 2 one-token passes for each request of the decode batch, the
    # draft extend one pass over the tokens the target ran (the verify width for a decode, a prefill's tokens).
    # SHAPE: 2 decodes verify (4 tokens each, contexts after the step 1,004 and 2,004); its completing prefill row
    # gets no one-token pass (SGLang drafts for it at its first decode), unlike vLLM's 3 sampling rows
    cost = with_drafter(TARGET, sglang())
    head = Roofline(draft_model_spec(TARGET.model, "eagle3"), "h100-80gb", 1,
                    replace(TARGET.params, step_overhead=0.0))
    first = head.step_time_with_decodes(0, 0, SHAPE, device_only=True)
    later = head.step_time_with_decodes(2, 1004 + 2004, StepShape((), (), (), 0), device_only=True)
    assert cost.draft_time(SHAPE) == pytest.approx(first + 2 * later, rel=1e-12)
    prefill = StepShape((512,), (0,), (False,), 1)  # a prefill batch: the draft extend only
    assert cost.draft_time(prefill) == head.step_time_with_decodes(0, 0, prefill, device_only=True)
    assert SpeculativeCost(TARGET, spec("eagle3")).draft_time(prefill) > cost.draft_time(prefill)


def test_sglang_drafters_by_algorithm_and_the_token_pool_they_leave():
    # NEXTN (SGLang's alias of EAGLE for a model's own NextN layer) is an MTP layer; STANDALONE its draft model's
    # roofline at the target's TP; EAGLE the head sharing the target's embedding and LM head
    assert with_drafter(TARGET, sglang("NEXTN")).method == "mtp"
    standalone = with_drafter(TARGET, sglang("STANDALONE", speculative_draft_model_path="llama-2-7b"))
    assert standalone.method == "draft_model" and standalone.drafter.model.name == "llama-2-7b"
    # the token pool at mem_fraction_static 0.8: (80 GiB x 0.8 - the target's and the EAGLE-3 head's weights) /
    # (131,072 + 4,096 bytes a token: SGLang gives the draft a KV slot per target slot)
    cost = with_drafter(TARGET, sglang())
    pool = int((TARGET.gpu.memory_bytes * 0.8 - TARGET.weight_bytes - 960_495_616) // 135_168)
    assert cost.max_total_num_tokens(0.8) == pool < TARGET.max_total_num_tokens(0.8)
    # and a run takes it: the resolved pool is the drafter's
    r = simulate([Request("A", 0.0, 64, 9)], sglang(max_total_num_tokens=None, mem_fraction_static=0.8), "sglang",
                 TARGET)
    assert r.config.sglang.max_total_num_tokens == pool


def test_explain_says_what_speculation_did_and_where_it_stops_paying():
    # toy cost: a decode step costs 1 ms whatever drafts it verifies, the 64-token prefill 6.4 ms. One request,
    # output 101, one draft of 3 accepted a verification: 100 tokens in 50 verify steps (50 ms) against 100 plain
    # ones (100 ms): TPOT 50 / 100 = 0.5 ms against 1.0, each streamed chunk 1 ms apart either way; output
    # 101 tokens over 6.4 + 50 = 56.4 ms (1,791 tok/s) against 106.4 ms (949 tok/s). At batch size 1 a verify
    # step brings 2 tokens in 1 ms, a plain one 1: 2.00x
    from servesim.analysis.speculation import speculation_sentences

    spec_run = run(accept=(1,))
    plain = simulate([Request("A", 0.0, 64, 101)], replace(spec_run.config, speculative_config=None), "vllm", "toy")
    assert speculation_sentences(spec_run, plain) == [
        "Speculation (ngram, K = 3) accepted 1.00 of 3 drafts per verification (33.3% of 150 drafted tokens; 2.00 "
        "tokens a step per request); 100 drafted tokens were rejected, computed for nothing.",
        "Against the same run without it: TPOT 1.0 -> 0.5 ms, ITL (per streamed chunk) 1.0 -> 1.0 ms, output "
        "throughput 949 -> 1,791 tok/s.",
        "Per decoding request, a verify step brought 2.00x the tokens per second of a plain one at batch size 1 "
        "(1 ms against 1 ms a step)."]
    assert speculation_sentences(plain) == []
