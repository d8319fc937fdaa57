"""gpt-oss-120b: sliding-window attention layers beside full ones, MXFP4 experts, and vLLM's hybrid KV pool.

References: openai/gpt-oss-120b's config.json (servesim's data/models/gpt-oss-120b.json); vLLM 0.33's
`vllm/v1/core/kv_cache_utils.py` and `single_type_kv_cache_manager.py` (`SlidingWindowManager`), and its
docs/design/hybrid_kv_cache_manager.md examples.
"""

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_block_pool import prefix_workloads

from servesim.cost.attention_kinds import window_pairs
from servesim.cost.base import StepShape
from servesim.cost.kv_groups import KVGroups, window_blocks
from servesim.cost.roofline import MXFP4_BYTES, Roofline
from servesim.cost.specs import load_gpu, load_model
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.engines.sglang.server_args import SGLangConfig
from servesim.engines.trtllm.llm_args import TrtllmConfig
from servesim.errors import ConfigError


def test_gpt_oss_config_read_from_its_keys():
    m = load_model("gpt-oss-120b")
    # layer_types: 18 sliding_attention and 18 full_attention, alternating; sliding_window 128
    assert (m.num_sliding_layers, m.num_full_attention_layers, m.sliding_window) == (18, 18, 128)
    assert (m.num_local_experts, m.num_experts_per_tok, m.expert_intermediate_size) == (128, 4, 2880)
    assert m.quant_method == "mxfp4"
    # OpenAI's model card: 116.83B parameters; the matrices here, less the experts' biases (36 layers x 128 experts
    # x (2 x 2880 + 2880)), the attention biases, sinks and norms
    assert m.num_parameters == 116_788_838_400
    assert round((m.num_parameters + 36 * 128 * 3 * 2880) / 1e9, 2) == 116.83
    # a token's KV: the 18 full layers' K and V of 8 heads x 64, bf16 (a sliding layer holds its window's only)
    assert m.kv_bytes_per_token == 18 * 2 * 8 * 64 * 2 == 36864


def test_mxfp4_weight_bytes_are_4_25_bits_for_the_experts_alone():
    r = Roofline("gpt-oss-120b", "h100-80gb")
    experts = 36 * 128 * 3 * 2880 * 2880  # gate_up (2880 x 5760) and down (2880 x 2880) of every expert
    attention = 36 * (2880 * (64 + 2 * 8) * 64 + 64 * 64 * 2880)  # qkv_proj, o_proj
    bf16 = attention + 36 * 2880 * 128 + 2 * 201088 * 2880  # + the router, the embedding and the LM head
    assert MXFP4_BYTES == 0.5 + 1 / 32
    assert r.weight_bytes == experts * 0.53125 + bf16 * 2 == 65_168_179_200


def _experts_gate_up(gpu, tokens=16384):
    r = Roofline("gpt-oss-120b", gpu)
    (op,) = [o for o in r.breakdown(StepShape.of(prefills=[(tokens, 0)])) if o.name == "experts.gate_up_proj"]
    return r, op


def test_mxfp4_gemm_is_w4a16_on_hopper_and_w4a4_on_b200():
    # 16,384 tokens x top-4 = 65,536 routed rows through a 2880 x 5760 gate_up: compute-bound on both GPUs
    rows, k, n = 16384 * 4, 2880, 5760
    flops = 36 * 2 * rows * k * n
    h100, op = _experts_gate_up("h100-80gb")
    g = h100.gpu
    assert op.flops == flops and op.bound == "compute"
    # W4A16 on H100: the bf16 peak (989.4 TFLOP/s x 0.713), no activation quantization kernel
    assert op.seconds == pytest.approx(36 * (2 * rows * k * n / (g.peak_flops * g.compute_efficiency)
                                             + g.kernel_latency), rel=1e-12)
    b200, op4 = _experts_gate_up("b200")
    g = b200.gpu
    # W4A4 on B200: the FP4 peak (9,000 TFLOP/s x 0.65), after a kernel quantizing the 65,536 x 2880 activations
    # (16 bits read, 4.25 written)
    quant = rows * k * (2 + MXFP4_BYTES) / (g.memory_bandwidth * g.memory_efficiency) + g.kernel_latency
    assert op4.seconds == pytest.approx(36 * (2 * rows * k * n / (g.fp4_flops * g.compute_efficiency) + quant
                                              + g.kernel_latency), rel=1e-12)
    # the same B200 without FP4 tensor cores runs W4A16 at its bf16 peak (2,250 TFLOP/s), no quantization kernel:
    # 1.487 ms a layer against W4A4's 0.372 + 0.083 (the quantization kernel): 3.26x
    _, op16 = _experts_gate_up(replace(load_gpu("b200"), fp4_flops=None))
    assert op16.seconds == pytest.approx(36 * (2 * rows * k * n / (g.peak_flops * g.compute_efficiency)
                                               + g.kernel_latency), rel=1e-12)
    assert op16.seconds / op4.seconds == pytest.approx(3.26, abs=0.01)


def test_mxfp4_is_the_checkpoints_own_and_refused_for_another():
    assert Roofline("gpt-oss-120b", "h200", quantization="mxfp4").quantization == "mxfp4"
    with pytest.raises(ConfigError, match="--quantization mxfp4: llama-3-8b's checkpoint is not MXFP4"):
        Roofline("llama-3-8b", "h200", quantization="mxfp4")


def test_window_pairs_by_hand():
    # a 300-token prompt in a window of 128: positions 1..128 see 1..128 keys, 129..300 see 128 each
    assert window_pairs(0, 300, 128) == 128 * 129 // 2 + 172 * 128 == 30272
    assert window_pairs(0, 100, 128) == 100 * 101 // 2  # shorter than the window: full attention's pairs
    assert window_pairs(1000, 1, 128) == 128  # a decode past the window


@given(st.integers(0, 3000), st.integers(1, 600), st.integers(1, 512))
def test_window_pairs_splits_and_caps(c, q, w):
    whole = window_pairs(c, q, w)
    assert whole == window_pairs(c, q // 2, w) + window_pairs(c + q // 2, q - q // 2, w)
    assert min(q, w) <= whole <= min(q * w, q * c + q * (q + 1) // 2)


def test_sliding_layers_read_the_window_at_long_context():
    r = Roofline("gpt-oss-120b", "h200")
    ops = {o.name: o for o in r.breakdown(StepShape.of(decodes=[1999]))}
    per_position, per_token = 2 * 8 * 64 * 2, (2 * 64 + 2 * 8) * 64 * 2  # K and V read; q, o, new K and V
    # the decode's 2,000 positions in each full layer, the last 128 in each sliding one
    assert ops["attention (decode)"].bytes == 18 * (2000 * per_position + per_token)
    assert ops["attention (decode, sliding window 128)"].bytes == 18 * (128 * per_position + per_token)


def test_step_time_is_the_breakdown_sum_with_sliding_layers():
    r = Roofline("gpt-oss-120b", "b200")
    shape = StepShape.of(prefills=[(700, 300)], decodes=[50, 4000])
    assert r.step_time(shape) == pytest.approx(sum(o.seconds for o in r.breakdown(shape)), rel=1e-12)


def test_decode_stretch_equals_steps_past_the_window():
    r = Roofline("gpt-oss-120b", "h100-80gb")
    n, ctx = 4, 4 * 1000
    steps = [r.step_time_with_decodes(n, ctx + i * n, StepShape((), (), (), 0)) for i in range(30)]
    assert r.decode_stretch(n, ctx, 30) == steps


def test_vllm_kv_groups_by_the_design_docs_examples():
    # gpt-oss: 18 full and 18 sliding layers -> two groups of 18
    assert KVGroups.of(18, 18) == KVGroups(18, 1, 1)
    # the doc's case 2: 10 full, 20 sliding -> groups of 10: one full, two sliding
    assert KVGroups.of(10, 20) == KVGroups(10, 1, 2)
    # Gemma-3-27B (case 3): 10 full, 52 sliding -> groups of 10, the last sliding group padded
    assert KVGroups.of(10, 52) == KVGroups(10, 1, 6)
    # window 32, block 16: a request holds the blocks of its last 31 positions and the new one, at most 3
    assert window_blocks(32, 16) == 3 and window_blocks(128, 16) == 9 and window_blocks(129, 16) == 9


def test_gpt_oss_pool_on_h200_by_hand():
    r = Roofline("gpt-oss-120b", "h200")
    # vLLM's profile run at the H100/H200 defaults (8,192 tokens, 1,024 sequences): weights, the MoE activations
    # (4 routed rows x (5,760 + 2,880) and 2 x 2,880 per token, bf16) and 1,024 rows of float32 logits
    act = 8192 * 2 * (2 * 2880 + 4 * (5760 + 2880)) + 1024 * 201088 * 4
    free = 141 * 2**30 * 0.9 - 65_168_179_200 - act
    # one page: 16 tokens x 18 layers x 2,048 bytes; a block of the full group and one of the sliding group alike
    assert r.num_gpu_blocks(16, 0.9, 8192, 1024) == int(free // (16 * 18 * 2048)) == 118010
    assert r.kv_blocks_per_request(16) == 9


def _two_requests(blocks: int):
    cost = Roofline("gpt-oss-120b", "h200")
    reqs = [Request("a", 0.0, 200, 10), Request("b", 0.0, 200, 10)]
    return simulate(reqs, EngineConfig(num_gpu_blocks=blocks), "vllm", cost, check_invariants=True)


def test_a_request_holds_its_window_blocks_beside_its_full_ones():
    # 200 + 10 tokens (209 cached at most): 14 full blocks and the sliding group's 9 = 23 of the 29 usable
    r = _two_requests(30)
    assert r.config.kv_blocks_per_request == 9
    first = r.steps[0]
    assert [e.id for e in first.scheduled] == ["a"]  # b needs 13 + 9 more: 6 are left
    assert first.free_blocks_after_step == 29 - (13 + 9)
    # with room for both (2 x 23 = 46 <= 47 usable) they start together
    assert [e.id for e in _two_requests(48).steps[0].scheduled] == ["a", "b"]


def test_layer_types_with_sliding_layers_need_a_window(tmp_path):
    config = json.loads(open(load_model.__globals__["_data_dir"]("models").joinpath("gpt-oss-120b.json")).read())
    del config["sliding_window"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config, indent=2))
    with pytest.raises(ConfigError, match="config.json: sliding_window: missing field; expected an integer >= 1"):
        load_model(str(path))


def test_sglang_pool_of_a_sliding_window_model_by_hand():
    # SGLang's set_num_token_hybrid: the tokens all 36 layers could hold (63.5 GB / 73,728 B = 861,542), x 36,
    # over 18 full + 0.8 x 18 sliding layers
    r = Roofline("gpt-oss-120b", "h200")
    free = 141 * 2**30 * 0.85 - 65_168_179_200
    every = int(free // (36 * 2048))
    assert r.max_total_num_tokens(0.85) == int(every * 36 / (0.8 * 18 + 18)) == 957_268


@st.composite
def hybrid_workloads(draw):
    n = draw(st.integers(1, 8))
    reqs = [Request(f"r{i}", draw(st.floats(0, 0.05)), draw(st.integers(1, 400)), draw(st.integers(1, 60)))
            for i in range(n)]
    cfg = EngineConfig(num_gpu_blocks=draw(st.integers(45, 120)), max_num_seqs=draw(st.integers(1, 6)),
                       max_num_batched_tokens=draw(st.sampled_from([64, 256, 1024])))
    return reqs, cfg, draw(st.sampled_from(["vllm", "sglang", "trtllm"]))


@settings(max_examples=25, deadline=None)
@given(hybrid_workloads())
def test_window_blocks_keep_the_books_and_the_fast_path_exact(case):
    # every request holds its window's 9 blocks beside its full ones (the invariants after every step: free +
    # held = usable, never over-allocated), every request finishes, and the decode stretches give the same
    # timelines as stepping one by one
    reqs, cfg, engine = case
    blocks = cfg.num_gpu_blocks
    if engine == "sglang":  # (the same pool under each engine's own knobs)
        cfg = EngineConfig(sglang=SGLangConfig(max_total_num_tokens=16 * blocks, max_running_requests=cfg.max_num_seqs))
    elif engine == "trtllm":
        cfg = EngineConfig(trtllm=TrtllmConfig(max_tokens=32 * blocks // 2, max_batch_size=cfg.max_num_seqs))
    cost = Roofline("gpt-oss-120b", "h200")
    fast = simulate(reqs, cfg, engine, cost, check_invariants=True, fast=True)
    slow = simulate(reqs, cfg, engine, cost, check_invariants=True, fast=False)
    assert all(len(t.token_times) == r.output_len for t, r in zip(fast.requests, reqs))
    for x, y in zip(fast.requests, slow.requests):
        assert x.token_times == pytest.approx(y.token_times, rel=1e-12, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(prefix_workloads())
def test_prefix_caching_keeps_the_window_blocks_apart(w):
    # with prefix caching (requests carrying block identities) a request's window blocks are held apart from its
    # hashed full blocks: the books hold (block lists and counts agree, ref counts match, nothing held is free),
    # every request finishes, and the fast path gives the step-by-step timelines
    reqs, blocks, budget = w
    cfg = EngineConfig(max_num_batched_tokens=budget, max_num_seqs=4, block_size=4, num_gpu_blocks=blocks + 33)
    cost = Roofline("gpt-oss-120b", "h200")
    try:
        fast = simulate(reqs, cfg, "vllm", cost, check_invariants=True)
    except ConfigError as exc:  # a request too big for this pool is refused before the run
        assert "whole pool" in str(exc)
        return
    assert fast.config.kv_blocks_per_request == 33  # cdiv(127, 4) + 1
    slow = simulate(reqs, cfg, "vllm", cost, check_invariants=True, fast=False)
    assert all(len(t.token_times) == r.output_len for t, r in zip(fast.requests, reqs))
    for x, y in zip(fast.requests, slow.requests):
        assert x.token_times == pytest.approx(y.token_times, rel=1e-12, abs=1e-12)
