"""GLM-5: DeepSeek sparse attention (DSA), an MLA whose queries attend to the top-k tokens a lightning indexer picks.

References: zai-org/GLM-5's and zai-org/GLM-5-FP8's config.json (servesim's data/models/glm-5*.json); SGLang's
`calculate_mla_kv_cache_dim` for DSA models (FP8 latent 512 + 4 bytes a 128 + rope in bf16) and its DSA token pool
(an FP8 index key of 128 and a 4-byte scale a token a layer); DeepSeek-V3.2's indexer (wq_b, wk, weights_proj).
"""

import json

import pytest

from servesim.cost.attention_kinds import window_pairs
from servesim.cost.base import StepShape
from servesim.cost.roofline import Roofline
from servesim.cost.specs import load_model
from servesim.errors import ConfigError


def test_glm5_config_read_from_its_keys():
    m = load_model("glm-5")
    assert (m.index_topk, m.index_n_heads, m.index_head_dim) == (2048, 32, 128)
    assert (m.kv_lora_rank, m.q_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) == (
        512, 2048, 192, 64, 256)
    assert (m.num_local_experts, m.num_experts_per_tok, m.num_dense_layers) == (256, 8, 3)
    # the indexer a layer: wq_b 2048 x 32 x 128, wk 6144 x 128, weights_proj 6144 x 32
    assert m.indexer_parameters == 2048 * 4096 + 6144 * 128 + 6144 * 32
    # Z.ai's 744B total and 40B active: 41.8B here less the embedding and the LM head (2 x 154,880 x 6,144 = 1.9B)
    assert round(m.num_parameters / 1e9) == 744 and round(m.num_active_parameters / 1e9) == 42
    assert round((m.num_active_parameters - 2 * 154_880 * 6144) / 1e9) == 40
    assert load_model("glm-5-fp8").weight_block_size == (128, 128)


def test_dsa_kv_bytes_per_token():
    # bf16 latent (512 + 64) x 2 and the FP8 index key 128 + 4, in each of 78 layers
    assert load_model("glm-5").kv_bytes_per_token == 78 * (576 * 2 + 132) == 100_152
    # an FP8 cache: 512 + 512 / 128 x 4 scale bytes + 64 rope dims in bf16 = 656, and the index key
    r = Roofline("glm-5-fp8", "h200", tp=8, kv_cache_dtype="fp8")
    assert r.kv_bytes_per_token == 78 * (656 + 132) == 61_464
    free = 141 * 2**30 * 0.85 - r.weight_bytes
    assert r.max_total_num_tokens(0.85) == int(free // 61_464)


def test_dsa_decode_reads_top_k_latents_and_every_index_key_at_long_context():
    r = Roofline("glm-5-fp8", "h200", tp=8, kv_cache_dtype="fp8")
    ops = {o.name: o for o in r.breakdown(StepShape.of(decodes=[99_999]))}
    # attention over the 2,048 picked latents of the 100,000 (656 bytes each), its query and output at 8 heads
    q_bytes = (8 * (2 * 512 + 64) + 512 + 64) * 2
    assert ops["attention (decode, top-k 2048)"].bytes == 78 * (2048 * 656 + q_bytes)
    # the indexer scores all 100,000: their keys read (132 bytes), float32 logits written and read again, its
    # 32 x 128 query in bf16; 2 x 32 x 128 FLOPs a key
    assert ops["indexer (decode)"].bytes == 78 * (100_000 * 132 + 100_000 * 8 + 32 * 128 * 2)
    assert ops["indexer (decode)"].flops == 78 * 2 * 32 * 128 * 100_000
    # a dense MLA would read 100,000 latents: DSA's attention reads 2% of that
    assert ops["attention (decode, top-k 2048)"].bytes < 0.03 * 78 * 100_000 * 656


def test_dsa_prefill_pairs_are_capped_at_top_k():
    r = Roofline("glm-5", "b200", tp=8)
    ops = {o.name: o for o in r.breakdown(StepShape.of(prefills=[(4096, 0)]))}
    pairs = window_pairs(0, 4096, 2048)
    assert pairs == 2048 * 2049 // 2 + 2048 * 2048
    # per pair 2 x 8 heads x (qk 256 + v 256); per position the latent's decompression, 2 x 512 x 8 x (192 + 256)
    flops = 2 * 8 * (256 + 256) * pairs + 2 * 512 * 8 * (192 + 256) * 4096
    assert ops["attention (prefill, top-k 2048)"].flops == 78 * flops
    # the indexer's pairs are causal over everything: 4096 x 4097 / 2
    assert ops["indexer (prefill)"].flops == 78 * 2 * 32 * 128 * (4096 * 4097 // 2)


def test_step_time_is_the_breakdown_sum_with_dsa():
    r = Roofline("glm-5-fp8", "b200", tp=8, kv_cache_dtype="fp8")
    shape = StepShape.of(prefills=[(3000, 500)], decodes=[10, 9000])
    assert r.step_time(shape) == pytest.approx(sum(o.seconds for o in r.breakdown(shape)), rel=1e-12)


def test_index_topk_without_mla_is_refused(tmp_path):
    config = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
              "intermediate_size": 128, "index_topk": 2048}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config, indent=1))
    with pytest.raises(ConfigError, match="index_topk: DeepSeek sparse attention without MLA: expected "
                                          "kv_lora_rank"):
        load_model(str(path))


def test_dsa_without_its_indexer_shape_is_refused_naming_the_key(tmp_path):
    config = json.loads(load_model.__globals__["_data_dir"]("models").joinpath("glm-5.json").read_text())
    del config["index_n_heads"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config, indent=1))
    with pytest.raises(ConfigError, match="config.json: index_n_heads: missing field; expected an integer >= 1"):
        load_model(str(path))
