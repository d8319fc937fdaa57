"""Qwen3.5-397B-A17B: Gated DeltaNet linear-attention layers beside full attention, their state per request, and the
pools vLLM and SGLang build for it.

References: Qwen/Qwen3.5-397B-A17B's config.json (servesim's data/models/qwen3.5-397b-a17b.json); transformers'
Qwen3-Next Gated DeltaNet (`conv_dim` = 2 x key dim + value dim, the recurrent state a key x value matrix per value
head); vLLM's `HybridAttentionMambaModelConfig` (the attention block size raised to hold a layer's state); SGLang's
`_handle_max_mamba_cache` and `_resolve_max_num_reqs` (mamba_full_memory_ratio 0.9, 3 slots a running request).
"""

import json

import pytest

from servesim.cost.base import StepShape
from servesim.cost.kv_groups import KVGroups, state_block_size
from servesim.cost.roofline import Roofline
from servesim.cost.specs import load_model
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError


def test_qwen3_5_config_read_from_its_keys():
    m = load_model("qwen3.5-397b-a17b")
    # layer_types: every 4th layer full attention (full_attention_interval 4): 15 full, 45 Gated DeltaNet
    assert (m.num_full_attention_layers, m.num_linear_layers) == (15, 45)
    assert (m.linear_num_key_heads, m.linear_num_value_heads, m.linear_key_head_dim, m.linear_value_head_dim,
            m.linear_conv_kernel_dim, m.mamba_ssm_dtype) == (16, 64, 128, 128, 4, "float32")
    assert (m.num_local_experts, m.num_experts_per_tok, m.expert_intermediate_size,
            m.shared_expert_intermediate_size) == (512, 10, 1024, 1024)
    # the composite config's tie_word_embeddings (false) where text_config has none
    assert m.attn_output_gate and not m.tie_word_embeddings
    # Qwen's 397B total and 17B active, less the MTP layer, the vision tower, norms and per-head scalars
    assert (m.num_parameters, m.num_active_parameters) == (396_343_377_920, 17_346_068_480)


def test_a_linear_layer_holds_a_constant_state_per_request():
    m = load_model("qwen3.5-397b-a17b")
    conv = (2 * 16 * 128 + 64 * 128) * (4 - 1) * 2  # q, k, v channels x (kernel - 1) positions, bf16
    ssm = 64 * 128 * 128 * 4  # a 128 x 128 float32 state per value head
    assert m.linear_state_bytes() == conv + ssm == 73_728 + 4_194_304
    # on each of 8 GPUs: 1,536 channels and 8 value heads
    assert m.linear_state_bytes(8) == 1536 * 3 * 2 + 8 * 128 * 128 * 4 == 533_504
    r = Roofline(m, "h200", tp=8)
    assert r.state_bytes_per_request == 45 * 533_504
    # the full layers' KV a token: 15 layers x K and V of one KV head (2 heads replicated over 8 GPUs) x 256, bf16
    assert r.kv_bytes_per_token == 15 * 2 * 1 * 256 * 2 == 15_360


def test_gated_deltanet_decode_reads_and_writes_its_state_once():
    r = Roofline("qwen3.5-397b-a17b", "h200", tp=8)
    ops = {o.name: o for o in r.breakdown(StepShape.of(decodes=[5000, 100]))}
    # per layer: each sequence's state read and written, its token's q, k, v in and out of the conv, the output
    # and z (1,024 each), a and b per value head, bf16 -- whatever the context (5,000 or 100 tokens)
    per_token = (3 * 1536 + 2 * 1024 + 2 * 8) * 2
    assert ops["linear attention (decode)"].bytes == 45 * 2 * (per_token + 2 * 533_504)
    assert ops["linear attention (decode)"].bound == "memory"
    # the full layers read every position
    assert ops["attention (decode)"].bytes == 15 * ((5001 + 101) * 1024 + 2 * (2 * 4 + 2 * 1) * 256 * 2)


def test_gated_deltanet_projections_and_gated_attention():
    r = Roofline("qwen3.5-397b-a17b", "b200", tp=8)
    names = {o.name: o for o in r.breakdown(StepShape.of(prefills=[(1, 0)]))}
    # q_proj with its output gate (2 x 4 heads x 256) beside K and V (1 head each): 15 layers of 4096 x 2560
    assert names["qkv_proj"].flops == 15 * 2 * 128 * 4096 * (2 * 4 + 2) * 256
    # in_proj_qkvz: 45 layers of 4096 x (1,536 + 1,024) on each GPU (a 128-token tile)
    assert names["in_proj_qkvz"].flops == 45 * 2 * 128 * 4096 * 2560


def test_vllm_block_size_and_pool_beside_linear_state():
    r = Roofline("qwen3.5-397b-a17b", "h200", tp=8)
    # 533,504 state bytes over 1,024 KV bytes a token a layer: 16 x cdiv(533,504, 16,384) = 528 tokens a block
    assert state_block_size(16, 533_504, 1024) == r.kv_block_size(16) == 528
    assert r.kv_block_size(1024) == 1024  # a larger block given is kept
    # groups of 15 layers: one of full attention, three of Gated DeltaNet, a block each a request
    assert r.kv_groups == KVGroups(15, 1, 3) and r.kv_blocks_per_request(528) == 3
    with pytest.raises(ConfigError, match="block_size 16: below the 528 tokens vLLM sets"):
        r.num_gpu_blocks(16)


def test_vllm_runs_at_the_raised_block_size_and_holds_the_state_blocks():
    cost = Roofline("qwen3.5-397b-a17b", "h200", tp=8)
    reqs = [Request("a", 0.0, 1000, 10), Request("b", 0.0, 1000, 10)]
    r = simulate(reqs, EngineConfig(num_gpu_blocks=7), "vllm", cost, check_invariants=True)
    assert (r.config.block_size, r.config.kv_blocks_per_request) == (528, 3)
    # 1,000 prompt tokens: 2 blocks of 528 and 3 state blocks = 5 of the 6 usable; b waits for a
    first = r.steps[0]
    assert [e.id for e in first.scheduled] == ["a"] and first.free_blocks_after_step == 1


def test_sglang_state_slots_and_running_requests_by_hand():
    r = Roofline("qwen3.5-397b-a17b", "h200", tp=8)
    free = 141 * 2**30 * 0.85 - r.weight_bytes
    slots = int(free * 0.9 / 1.9 // (45 * 533_504))
    assert r.state_slots(0.85) == slots == 578
    assert r.max_total_num_tokens(0.85) == int((free - slots * 45 * 533_504) // 15_360)
    from servesim.engines.config import EngineConfig as Cfg
    from servesim.engines.sglang.server_args import SGLangConfig

    res = simulate([Request("a", 0.0, 100, 2)], Cfg(sglang=SGLangConfig(mem_fraction_static=0.85)), "sglang",
                   r)
    assert res.config.sglang.max_running_requests == 578 // 3


def test_linear_layers_without_their_shapes_are_refused(tmp_path):
    config = json.loads(load_model.__globals__["_data_dir"]("models").joinpath("qwen3.5-397b-a17b.json")
                        .read_text())
    del config["text_config"]["linear_value_head_dim"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config, indent=2))
    with pytest.raises(ConfigError, match=r"config.json:\d+: text_config.linear_value_head_dim: missing field"):
        load_model(str(path))


def test_tp_must_divide_the_linear_heads():
    with pytest.raises(ConfigError, match=r"tp=32: must divide linear_num_key_heads \(16\)"):
        Roofline("qwen3.5-397b-a17b", "b200", tp=32)


def test_nvidias_nvfp4_checkpoint_keeps_its_ignored_families_in_16_bits():
    # its quantization_config: quant_method modelopt, NVFP4, `ignore` globs matching layer 3's self_attn, layer 0's
    # linear_attn and every shared expert; the routed experts are 4-bit
    m = load_model("qwen3.5-397b-a17b-nvfp4")
    assert (m.quant_method, m.unquantized) == ("modelopt_fp4", ("attention", "linear_attention", "shared_experts"))
    nv, bf = Roofline(m, "b200", tp=4), Roofline("qwen3.5-397b-a17b", "b200", tp=4)
    # the same bytes for the 16-bit families, 0.5625 a weight (4 bits and an FP8 scale a 16) for the experts
    experts = 60 * 512 * 3 * 4096 * 256  # every expert's width split over the 4 GPUs (MoE TP 4)
    assert bf.weight_bytes - nv.weight_bytes == experts * (2 - 0.5625)
    ops = {o.name: o for o in nv.breakdown(StepShape.of(prefills=[(4096, 0)]))}
    assert ops["qkv_proj"].bound == "compute" and ops["qkv_proj"].seconds == pytest.approx(
        {o.name: o for o in bf.breakdown(StepShape.of(prefills=[(4096, 0)]))}["qkv_proj"].seconds, rel=1e-12)


def test_a_modelopt_checkpoint_with_16_bit_experts_is_refused(tmp_path):
    config = json.loads(load_model.__globals__["_data_dir"]("models").joinpath("qwen3.5-397b-a17b-nvfp4.json")
                        .read_text())
    config["quantization_config"]["ignore"].append("*.mlp.experts*")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config, indent=2))
    with pytest.raises(ConfigError, match="quantization_config.ignore: routed experts kept in 16 bits"):
        load_model(str(path))
