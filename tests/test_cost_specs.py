"""Model specs from config.json, GPU specs from TOML: values, aliases, and the errors users see."""

import json

import pytest

from servesim.cost.specs import builtin_gpus, builtin_models, load_gpu, load_model
from servesim.errors import ConfigError

ISSUE_MODELS = ["bloom-176b", "llama-2-70b", "llama-2-7b", "llama-3-70b", "llama-3-8b", "mistral-7b",
                "mixtral-8x7b", "qwen2.5-72b", "qwen2.5-7b"]
# the measured deployments' dense models (AIConfigurator's silicon file, `servesim validate aic-silicon`)
MEASURED_MODELS = ["llama-3.1-70b", "llama-3.1-8b", "qwen3-32b"]
# issue 26's: MoE (Qwen3-MoE, MiniMax-M2) and Llama-3.1-405B
TODAY_MODELS = ["deepseek-r1", "deepseek-v3", "glm-5", "glm-5-fp8", "gpt-oss-120b", "kimi-k2.5", "llama-3.1-405b",
                "minimax-m2.5", "qwen3-235b-a22b", "qwen3-235b-a22b-fp8", "qwen3-30b-a3b", "qwen3.5-397b-a17b",
                "qwen3.5-397b-a17b-nvfp4"]


def test_builtin_models_are_the_issue_list():
    assert builtin_models() == sorted(ISSUE_MODELS + MEASURED_MODELS + TODAY_MODELS)


def test_qwen3_32b_has_its_published_size():
    # Qwen's model card: 32.8B parameters (head_dim 128, not hidden_size / heads = 80)
    assert round(load_model("qwen3-32b").num_parameters / 1e9, 1) == 32.8


def test_llama_3_8b_parameter_count_is_the_published_one_less_norms():
    # 8,030,261,248 published weights = 8,029,995,008 in the matrices + 266,240 norm weights (32 x 2 x 4096 + 4096).
    assert load_model("llama-3-8b").num_parameters == 8_030_261_248 - (32 * 2 * 4096 + 4096)


def test_head_dim_defaults_to_hidden_over_heads():
    assert load_model("qwen2.5-7b").head_dim == 3584 // 28 == 128


def test_bloom_fields_and_ungated_4x_mlp():
    m = load_model("bloom-176b")
    assert (m.hidden_size, m.num_hidden_layers, m.num_attention_heads, m.num_key_value_heads) == (14336, 70, 112, 112)
    assert m.intermediate_size == 4 * 14336 and not m.gated_mlp and m.tie_word_embeddings
    assert round(m.num_parameters / 1e9, 1) == 176.2  # "BLOOM-176B"


def test_bloom_n_head_spelling_is_accepted(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bloom", "n_embed": 64, "n_layer": 2, "n_head": 8, "vocab_size": 100}))
    m = load_model(str(path))
    assert (m.name, m.hidden_size, m.num_hidden_layers, m.num_attention_heads) == (tmp_path.name, 64, 2, 8)


def test_mixtral_experts():
    m = load_model("mixtral-8x7b")
    assert (m.num_local_experts, m.num_experts_per_tok) == (8, 2)
    assert round(m.num_parameters / 1e9, 1) == 46.7  # Mixtral-8x7B: 46.7B total parameters


def test_bad_config_names_file_and_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 8, "vocab_size": 10}))
    with pytest.raises(ConfigError, match=r"config\.json: num_hidden_layers: missing field; expected an integer >= 1"):
        load_model(str(path))
    path.write_text(json.dumps({"hidden_size": "64", "num_attention_heads": 8}))
    with pytest.raises(ConfigError, match=r'config\.json:1: hidden_size: expected an integer >= 1, got "64"'):
        load_model(str(path))
    path.write_text("{not json")
    with pytest.raises(ConfigError, match=r"config\.json:1: not valid JSON"):
        load_model(str(path))


def test_unknown_model_lists_builtins():
    with pytest.raises(ConfigError, match="built-in models: bloom-176b, deepseek-r1, deepseek-v3, glm-5, glm-5-fp8, "
                                          "gpt-oss-120b, kimi-k2.5, llama-2-70b"):
        load_model("gpt-5")


def test_gpu_aliases_and_datasheet_numbers():
    assert load_gpu("h100").name == "h100-80gb" and load_gpu("a100").name == "a100-80gb"
    a100 = load_gpu("a100-80gb")  # NVIDIA A100 datasheet, 80GB SXM column
    assert (a100.peak_flops, a100.memory_bandwidth, a100.memory_bytes) == (312e12, 2039e9, 80 * 2**30)
    assert (a100.interconnect_bandwidth, a100.pcie_bandwidth) == (600e9, 64e9)
    assert sorted(builtin_gpus()) == ["a100-80gb", "b200", "b300", "gb200", "gb300", "h100-80gb", "h100-nvl",
                                      "h100-pcie", "h20", "h200", "l40s", "mi300x", "mi325x", "mi355x",
                                      "rtx-pro-6000"]


@pytest.mark.parametrize("name, bf16, fp8, fp4, hbm_gb_s, gib, link", [
    # each from its datasheet (the TOML's comments): dense peaks (half the sparse ones), HBM, capacity, GPU link
    ("h100-pcie", 756.5, 1513.0, None, 2000, 80, 600),
    ("h100-nvl", 835.5, 1670.5, None, 3900, 94, 600),
    ("h20", 148, 296, None, 4000, 96, 900),
    ("rtx-pro-6000", 467.8, 935.6, 1871.2, 1792, 95.59, 128),
    ("mi325x", 1307.4, 2614.9, None, 6000, 256, 896),
    ("mi355x", 2516.6, 5033.2, 10066.3, 8000, 288, 1075.2)])
def test_issue_27s_gpus_from_their_datasheets(name, bf16, fp8, fp4, hbm_gb_s, gib, link):
    g = load_gpu(name)
    assert (g.peak_flops, g.fp8_flops, g.memory_bandwidth, g.interconnect_bandwidth) == (
        bf16 * 1e12, fp8 * 1e12, hbm_gb_s * 1e9, link * 1e9)
    assert g.fp4_flops == (None if fp4 is None else fp4 * 1e12) and g.memory_bytes == int(gib * 2**30)


def test_nvfp4_is_refused_on_amd():
    from servesim.cost import Roofline

    with pytest.raises(ConfigError, match="NVFP4's kernels are NVIDIA's"):
        Roofline("llama-3.1-8b", "mi355x", quantization="modelopt_fp4")


def test_unknown_gpu_lists_builtins_with_aliases():
    with pytest.raises(ConfigError, match=r"built-in GPUs: a100-80gb \(a100\), b200 \(b200-180gb, b200-sxm\)"):
        load_gpu("tpu-v5e")


def test_user_gpu_from_toml(tmp_path):
    path = tmp_path / "mygpu.toml"
    path.write_text('dense_bf16_tflops = 100.0\nmemory_bandwidth_gb_s = 1000.0\nmemory_gib = 24\n'
                    'interconnect_gb_s = 64\npcie_gb_s = 64\n[efficiency]\ncompute = 0.5\n')
    g = load_gpu(str(path))
    assert (g.name, g.peak_flops, g.memory_bytes, g.compute_efficiency) == ("mygpu", 100e12, 24 * 2**30, 0.5)
    path.write_text("dense_bf16_tflops = \n")
    with pytest.raises(ConfigError, match="mygpu.toml:1: not valid TOML"):
        load_gpu(str(path))
    path.write_text("dense_bf16_tflops = 1.0\n")
    with pytest.raises(ConfigError, match="mygpu.toml: memory_bandwidth_gb_s: missing field"):
        load_gpu(str(path))


def tiny_config(**fields) -> dict:
    return {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 8, "intermediate_size": 128,
            "vocab_size": 100} | fields


def test_bloom_n_embed_overrides_hidden_size_as_bloomconfig_does(tmp_path):
    path = tmp_path / "config.json"
    # transformers' BloomConfig: `self.hidden_size = hidden_size if n_embed is None else n_embed`
    path.write_text(json.dumps(tiny_config(model_type="bloom", n_embed=32)))
    m = load_model(str(path))
    assert (m.hidden_size, m.head_dim) == (32, 32 // 8)


@pytest.mark.parametrize("model_type, tied", [("llama", False), ("qwen2", False), ("mixtral", False), ("", True)])
def test_tie_word_embeddings_default_is_the_architecture_config_class(tmp_path, model_type, tied):
    # LlamaConfig, Qwen2Config, MixtralConfig default to untied embeddings; PretrainedConfig to tied.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_config(model_type=model_type)))
    m = load_model(str(path))
    # 8 heads x 8 head_dim: QKV 64 x 3 x 64 + O 64 x 64 = 16,384; gated MLP 3 x 64 x 128 = 24,576; embeddings 6,400
    assert m.tie_word_embeddings is tied
    assert m.num_parameters == 16_384 + 24_576 + 6_400 * (1 if tied else 2)


def test_gpus_command_shows_the_fp8_peaks():
    """Datasheet dense FP8 peaks: H100 SXM 1,979 TFLOPS (3,958 with sparsity); A100: none (Ampere has no FP8)."""
    from typer.testing import CliRunner

    from servesim.cli.app import app

    out = CliRunner().invoke(app, ["gpus"], terminal_width=200).output
    row = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("a100-80gb", "h100-80gb"))}
    assert row["h100-80gb"][1:3] == ["989", "1979"] and row["a100-80gb"][1:3] == ["312", "-"]


def test_gpu_file_kernels_and_allreduce_tables(tmp_path):
    """[kernels] in microseconds, read into seconds; a partial table or a bad value is one line naming the field."""
    from servesim.cost.specs import load_gpu
    from servesim.errors import ConfigError

    base = ('dense_bf16_tflops = 100\nmemory_bandwidth_gb_s = 1000\nmemory_gib = 24\ninterconnect_gb_s = 64\n'
            'pcie_gb_s = 64\n')
    kernels = ('[kernels]\nnorm = [0.5, 2.0]\nrotary = [0.5, 2.0]\nactivation = [0.6, 1.0]\n'
               'prefill_attention = [0.4, 0.1, 4.0]\ndecode_attention = [0.7, 14.0]\n'
               '[allreduce]\ntp2 = [[10.0, 0.3], [40.0, 0.7]]\n')
    path = tmp_path / "g.toml"
    path.write_text(base + kernels)
    g = load_gpu(str(path))
    assert g.kernel_fit.prefill_attention == pytest.approx((0.4, 0.1e-6, 4e-6))
    assert [pytest.approx(p) for p in ((10e-6, 0.3), (40e-6, 0.7))] == list(g.allreduce_protocols(2))
    assert [pytest.approx((30e-6, 0.55))] == list(g.allreduce_protocols(4))  # not listed: the [efficiency] defaults
    path.write_text(base + kernels.replace("rotary = [0.5, 2.0]\n", ""))
    with pytest.raises(ConfigError, match=r"g.toml:\d+: kernels.rotary: missing field; expected \[efficiency, "):
        load_gpu(str(path))
    path.write_text(base + kernels.replace("[0.7, 14.0]", "[1.5, 14.0]"))
    with pytest.raises(ConfigError, match=r"kernels.decode_attention\[0\]: expected efficiency a fraction"):
        load_gpu(str(path))
    path.write_text(base + kernels.replace("tp2 =", "two ="))
    with pytest.raises(ConfigError, match=r"allreduce.two: unknown key; expected tpN"):
        load_gpu(str(path))
