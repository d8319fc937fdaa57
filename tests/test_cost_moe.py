"""MoE models as their config.json gives them (Qwen3-MoE's, DeepSeek's, MiniMax-M2's keys) and their experts on
the roofline: sharded by width (vLLM's default) or whole (--enable-expert-parallel). Every number by hand."""

import json

import pytest
from helpers import cli

from servesim.cost import Roofline, StepShape
from servesim.cost.layout import Layout
from servesim.cost.specs import load_model
from servesim.errors import ConfigError


def test_qwen3_moe_models_have_their_published_sizes():
    # Qwen's model cards: Qwen3-30B-A3B 30.5B parameters (29.9B non-embedding), 3.3B activated; Qwen3-235B-A22B
    # 235B (234B non-embedding), 22B activated. Embeddings: 2 x 151,936 x hidden
    for name, total, non_embedding, active in (("qwen3-30b-a3b", 30.5, 29.9, 3.3), ("qwen3-235b-a22b", 235, 234, 22)):
        m = load_model(name)
        assert (m.num_local_experts, m.num_experts_per_tok, m.num_moe_layers) == (128, 8, m.num_hidden_layers)
        digits = 1 if total < 100 else 0
        assert round(m.num_parameters / 1e9, digits) == total
        assert round((m.num_parameters - 2 * 151_936 * m.hidden_size) / 1e9, digits) == non_embedding
        assert abs(m.num_active_parameters / (active * 1e9) - 1) < 0.02


def test_minimax_m2_5_has_its_published_size():
    # MiniMax's model card: 230B parameters, 10B activated (the embeddings apart: 2 x 200,064 x 3,072)
    m = load_model("minimax-m2.5")
    assert m.expert_intermediate_size == m.intermediate_size == 1536  # (its experts' width is intermediate_size)
    assert abs(m.num_parameters / 230e9 - 1) < 0.01
    assert round((m.num_active_parameters - 2 * 200_064 * 3072) / 1e9) == 10


def _config(tmp_path, **keys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
                                "vocab_size": 100, "intermediate_size": 256, "tie_word_embeddings": False} | keys,
                               indent=1))
    return str(path)


def test_deepseek_style_shared_experts_and_dense_layers(tmp_path):
    # DeepSeek's keys: 8 routed experts of width 32, 2 shared ones, the first layer dense. Per layer: attention
    # 64 x 12 x 16 (qkv) + 64 x 64 (o) = 16,384; the dense MLP 3 x 64 x 256 = 49,152; a MoE layer 8 x 3 x 64 x 32
    # + 64 x 8 (router) + 3 x 64 x 64 (shared) = 61,952; embeddings 2 x 100 x 64. 4 x 16,384 + 49,152 + 3 x
    # 61,952 + 12,800 = 313,344
    m = load_model(_config(tmp_path, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                           n_shared_experts=2, first_k_dense_replace=1))
    assert (m.num_dense_layers, m.num_moe_layers, m.shared_expert_intermediate_size) == (1, 3, 64)
    assert m.num_parameters == 313_344
    # on one GPU in 16 bits the roofline holds every one of them
    assert Roofline(m, "h100", 1).weight_bytes == 2 * 313_344


def test_qwen_sparse_step_and_mlp_only_layers(tmp_path):
    # Qwen-MoE's rule: layer i has experts when it is not in mlp_only_layers and (i + 1) % step == 0: of 0..3 at
    # step 2, layers 1 and 3; layer 1 listed: only layer 3 has experts
    m = load_model(_config(tmp_path, num_experts=4, num_experts_per_tok=1, decoder_sparse_step=2,
                           mlp_only_layers=[1]))
    assert (m.num_moe_layers, m.num_dense_layers) == (1, 3)


@pytest.mark.parametrize(("keys", "said"), [
    ({"index_topk": 2048}, "config.json:[0-9]+: index_topk: DeepSeek sparse attention without MLA"),
    ({"layer_types": ["full_attention", "chunked_attention", "full_attention", "full_attention"]},
     "layer_types: chunked_attention layers are not modelled yet"),
    ({"layer_types": ["full_attention", "sliding_attention"] * 2}, "sliding_window: missing field"),
    ({"layer_types": ["full_attention"] * 3}, "layer_types: expected one kind per layer"),
    ({"linear_num_key_heads": 16}, "full_attention_interval: missing field"),
    ({"layer_types": ["linear_attention"] * 3 + ["full_attention"]}, "linear_num_key_heads: missing field"),
    ({"num_experts": 4, "num_experts_per_tok": 1, "mlp_only_layers": [0, 1, 2, 3]}, "no layer has experts"),
])
def test_architectures_not_modelled_are_refused_naming_the_key(tmp_path, keys, said):
    with pytest.raises(ConfigError, match=said):
        load_model(_config(tmp_path, **keys))


def test_experts_sharded_by_width_or_whole_read_the_same_bytes_differently():
    # Qwen3-30B-A3B at TP 2, one decode token: its top-8 of 128 experts, 128 x (1 - (1 - 8/128)) = 8 of them.
    # By width (vLLM's default) each GPU reads 8 half-experts (gate_up 2,048 x 768, bf16) and moves the token's 8
    # routed copies in and out; whole experts (--enable-expert-parallel) each GPU holds 64 experts, 4 of the 8
    # touched and 4 of the routed copies, each at full width (gate_up 2,048 x 1,536). Over 48 layers.
    # (uniform routing: no load imbalance between the two EP ranks)
    tp = Roofline("qwen3-30b-a3b", "h100", 2)
    ep = Roofline("qwen3-30b-a3b", "h100", layout=Layout.vllm(2, enable_expert_parallel=True, imbalance=1.0))
    shape = StepShape.of(decodes=[100])
    up = {r: {o.name: o for o in r.breakdown(shape)}["experts.gate_up_proj"] for r in (tp, ep)}
    assert up[tp].bytes == pytest.approx(48 * (8 * 2048 * 768 * 2 + 8 * (2048 + 768) * 2))
    assert up[ep].bytes == pytest.approx(48 * (4 * 2048 * 1536 * 2 + 4 * (2048 + 1536) * 2))
    # the weights a GPU holds are the same: 64 whole experts = 128 halves
    assert tp.weight_bytes == ep.weight_bytes
    assert tp.step_time(shape) == pytest.approx(sum(o.seconds for o in tp.breakdown(shape)), rel=1e-12)
    assert ep.step_time(shape) == pytest.approx(sum(o.seconds for o in ep.breakdown(shape)), rel=1e-12)


def test_expert_parallel_is_refused_where_it_cannot_be(tmp_path):
    with pytest.raises(ConfigError, match="--enable-expert-parallel: llama-3-8b has no experts"):
        Roofline("llama-3-8b", "h100", 1, enable_expert_parallel=True)
    m = load_model(_config(tmp_path, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32))
    with pytest.raises(ConfigError, match="the experts' 4 ranks must divide the 6 experts"):
        Roofline(m, "h100", 4, enable_expert_parallel=True)
    Roofline(m, "h100", 4)  # (by width: 32 / 4 each)


def test_the_flag_reaches_the_cost_and_is_refused_for_a_profile(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "cost", "--model", "qwen3-30b-a3b", "--tp", "2",
                         "--enable-expert-parallel", "--decodes", "4", "--json")
    assert code == 0, err
    code, _, err = cli(monkeypatch, capsys, "cost", "--model", "llama-3-8b", "--enable-expert-parallel",
                       "--decodes", "4")
    assert code == 2 and "has no experts" in err


def test_deepseek_v3_has_its_published_size_and_latent_kv():
    # DeepSeek-V3's report: 671B parameters, 37B activated per token (the MTP module apart). MLA caches one latent
    # of kv_lora_rank + rope = 512 + 64 per layer and token: 61 x 576 x 2 bytes = 70,272 B in BF16, the same on
    # every GPU whatever the TP (vLLM does not split the latent)
    m = load_model("deepseek-v3")
    assert (m.num_dense_layers, m.num_moe_layers, m.shared_expert_intermediate_size) == (3, 58, 2048)
    assert round(m.num_parameters / 1e9) == 671 and round(m.num_active_parameters / 1e9) == 38  # 37.55
    assert Roofline(m, "h200", 8).kv_bytes_per_token == Roofline(m, "h200", 1).kv_bytes_per_token == 61 * 576 * 2
    assert Roofline(m, "h200", 8, kv_cache_dtype="fp8").kv_bytes_per_token == 61 * 576


def test_deepseek_v3_blocks_on_eight_h200s():
    # FP8 weights per GPU at TP 8 (16 heads each): attention per layer fused_qkv_a_proj 7,168 x (1,536 + 512 + 64)
    # (replicated) + q_b_proj 1,536 x 16 x 192 + W_UK 16 x 128 x 512 + W_UV 16 x 512 x 128 + o_proj 16 x 128 x
    # 7,168 = 36,634,624; 3 dense MLPs 7,168 x 4,608 + 2,304 x 7,168; 58 MoE layers of 256 experts (7,168 x 512 +
    # 256 x 7,168 each, widths / 8) and the shared expert at the same widths; 16-bit router (7,168 x 256 each) and
    # embeddings (16,160 x 7,168, twice)
    from servesim.cost.specs import load_gpu

    r = Roofline("deepseek-v3", "h200", 8, quantization="fp8")
    expert = 7168 * 512 + 256 * 7168
    weights = (61 * 36_634_624 + 3 * (7168 * 4608 + 2304 * 7168) + 58 * 257 * expert
               + 2 * (58 * 7168 * 256 + 2 * 16160 * 7168))
    assert r.weight_bytes == weights
    # vLLM's profile at 8,192 batched tokens, 1,024 sequences: 8,192 x 2 x (2 x 7,168 + 6,912) (8 routed rows x
    # (512 + 256) + the shared expert's 768, as the dense MLP's 4,608 + 2,304) + 1,024 x 129,280 x 4 B of logits
    activation = 8192 * 2 * (2 * 7168 + 6912) + 1024 * 129_280 * 4
    free = load_gpu("h200").memory_bytes * 0.9 - weights - activation
    assert r.num_gpu_blocks(16, 0.9, 8192, 1024) == int(free // (16 * 70_272))


def test_an_mla_decode_reads_the_latents_once_for_every_head():
    # one decode at 999 cached tokens reads 1,000 latents of 576 x 2 B per layer; its query in (16 heads x (512 +
    # 512 + 64)), its latent written: (16 x 1,088 + 576) x 2 B; 61 layers
    r = Roofline("deepseek-v3", "h200", 8, quantization="fp8")
    attn = {o.name: o for o in r.breakdown(StepShape.of(decodes=[999]))}["attention (decode)"]
    assert attn.bytes == 61 * (576 * 2 * 1000 + (16 * 1088 + 576) * 2)
    # absorbed: 2 x 16 x (2 x 512 + 64) FLOPs per (query, position) pair
    assert attn.flops == 61 * 2 * 16 * (2 * 512 + 64) * 1000


def test_the_measured_kernel_tier_refuses_mla_for_now():
    from servesim.cost.aic import AicKernels

    with pytest.raises(ConfigError, match="deepseek-v3's multi-head latent attention is not mapped"):
        AicKernels("deepseek-v3", "h200", 8, quantization="fp8")


def test_a_block_fp8_checkpoint_is_served_as_its_config_says(tmp_path):
    # Qwen3-235B-A22B-FP8's config.json: quant_method fp8, weight_block_size [128, 128]; vLLM reads it without
    # --quantization. Each FP8 GEMM then runs after a kernel quantizing its input per token and 128-column group:
    # it reads the tokens' 16-bit activations and writes 8-bit ones (T x k x 3 bytes) and costs a kernel floor
    block = Roofline("qwen3-235b-a22b-fp8", "h200", 4)
    tensor = Roofline("qwen3-235b-a22b", "h200", 4, quantization="fp8")  # the same shapes, per-tensor FP8
    assert block.quantization == "fp8" and block.weight_bytes == tensor.weight_bytes
    shape = StepShape.of(decodes=[500] * 16)
    qkv = [{o.name: o for o in r.breakdown(shape)}["qkv_proj"].seconds for r in (block, tensor)]
    assert qkv[0] - qkv[1] == pytest.approx(94 * (16 * 4096 * 3 * block._m + block._kl), rel=1e-9)
    # its work as the breakdown counts it: 16 tokens padded to a 128-row tile x 4,096 x 2,304 (16 + 2 x 1 heads of
    # 128 on each of 4 GPUs) FLOPs; 1-byte weights, 16-bit activations in and out, and the quantization kernel's
    # 16 x 4,096 x 3 bytes
    op = {o.name: o for o in block.breakdown(shape)}["qkv_proj"]
    assert op.flops == 94 * 2 * 128 * 4096 * 2304
    assert op.bytes == 94 * (4096 * 2304 + 2 * 16 * (4096 + 2304) + 16 * 4096 * 3)
    # a checkpoint quantized otherwise is refused, naming the key
    with pytest.raises(ConfigError, match="quantization_config.quant_method: \"awq\" checkpoints are not modelled"):
        load_model(_config(tmp_path, quantization_config={"quant_method": "awq"}))


def test_servesim_models_shows_the_latent_kv_and_the_experts_width(monkeypatch, capsys):
    code, out, _ = cli(monkeypatch, capsys, "models")
    row = next(line for line in out.splitlines() if line.startswith("deepseek-v3 "))
    assert code == 0 and "128/MLA" in row and " 70272 " in row and "2048 x256/8" in row  # 61 x 576 x 2


def test_each_engine_takes_expert_parallelism_under_its_own_flag(monkeypatch, capsys):
    run = ["run", "--workload", "random", "--num-requests", "4", "--model", "qwen3-30b-a3b", "--tp", "2"]
    for extra, said in ((["--ep-size", "2"], "--ep-size is an SGLang server option: add --policy sglang"),
                        (["--policy", "sglang", "--enable-expert-parallel"], "SGLang's is --ep-size N"),
                        (["--policy", "sglang", "--ep-size", "3"], "--ep-size 3: must divide --tp-size 2")):
        code, _, err = cli(monkeypatch, capsys, *run, *extra)
        assert code == 2 and said in err, err
    # and the same run under either engine's flag
    for extra in (["--enable-expert-parallel"], ["--policy", "sglang", "--ep-size", "2"]):
        code, _, err = cli(monkeypatch, capsys, *run, *extra)
        assert code == 0, err


def test_a_multimodal_configs_language_model_is_read_from_its_text_config(tmp_path):
    # transformers' get_text_config: the language model's keys under text_config; an error names them there
    path = tmp_path / "config.json"
    inner = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
             "intermediate_size": 128, "tie_word_embeddings": False}
    path.write_text(json.dumps({"model_type": "kimi_k25", "text_config": inner}, indent=1))
    m = load_model(str(path))
    assert (m.hidden_size, m.num_hidden_layers) == (64, 2)
    path.write_text(json.dumps({"model_type": "kimi_k25", "text_config": inner | {"vocab_size": "x"}}, indent=1))
    with pytest.raises(ConfigError, match=r"config\.json:[0-9]+: text_config\.vocab_size: expected an integer"):
        load_model(str(path))


def test_kimi_k2_5s_4_bit_experts_and_16_bit_rest():
    # Kimi-K2.5's config.json (its text_config): DeepSeek-V3's layout with 384 experts, 64 heads, one dense
    # layer; Moonshot's card: 1T parameters, 32B activated. Its compressed-tensors quantization_config: 4-bit
    # symmetric integer weights in groups of 32 (0.5 + 2/32 bytes a weight), attention, shared experts and dense
    # MLPs ignored (16-bit): the routed experts alone are 4-bit, served W4A16
    m = load_model("kimi-k2.5")
    assert round(m.num_parameters / 1e12, 2) == 1.03 and round(m.num_active_parameters / 1e9) == 33  # 32.9
    assert (m.quant_method, m.int4_group_size, m.int4_experts_only, m.num_dense_layers) == (
        "compressed-tensors", 32, True, 1)
    r = Roofline(m, "h200", 8)
    ops = {o.name: o for o in r.breakdown(StepShape.of(decodes=[100]))}
    # one token: its 8 experts of 60 MoE layers, 7,168 x 512 (2 x 2,048 / 8) at 0.5625 B, 8 routed rows in and out
    assert ops["experts.gate_up_proj"].bytes == pytest.approx(60 * (8 * 7168 * 512 * 0.5625 + 8 * (7168 + 512) * 2))
    # the attention's GEMMs stay 16-bit: q_b_proj 1,536 x 8 x 192 at 2 B, the token in and out
    assert ops["q_b_proj"].bytes == 61 * (1536 * 8 * 192 * 2 + 2 * (1536 + 8 * 192))


def test_other_compressed_tensors_schemes_are_refused(tmp_path):
    scheme = {"quant_method": "compressed-tensors", "ignore": ["lm_head"], "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}}}}
    with pytest.raises(ConfigError, match="only 4-bit symmetric integer weights per group"):
        load_model(_config(tmp_path, quantization_config=scheme))
