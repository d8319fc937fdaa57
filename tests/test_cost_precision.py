"""Precision: `--quantization fp8` (linear layers at the GPU's dense FP8 peak, 1-byte weights) and
`--kv-cache-dtype fp8` (1-byte KV: more blocks, cheaper decode attention). Peaks from the datasheets."""

from __future__ import annotations

import json

import pytest
from helpers import cli

from servesim.cost import Roofline, StepShape, load_gpu
from servesim.errors import ConfigError


def test_fp8_peaks_from_the_datasheets():
    assert load_gpu("h100").fp8_flops == 1979e12  # H100 SXM: FP8 3,958 TFLOPS with sparsity, half dense
    assert load_gpu("l40s").fp8_flops == 733e12  # L40S: 1,466 with sparsity
    assert load_gpu("a100").fp8_flops is None  # Ampere: no FP8 tensor cores


def test_fp8_kv_halves_kv_bytes_and_doubles_the_blocks():
    """Llama-3-8B: 32 layers x 2 (K, V) x 8 KV heads x 128 head_dim x 2 bytes = 131072 B a token; 65536 at fp8."""
    auto, fp8 = Roofline("llama-3-8b", "h100", 1), Roofline("llama-3-8b", "h100", 1, kv_cache_dtype="fp8")
    assert (auto.kv_bytes_per_token, fp8.kv_bytes_per_token) == (131072, 65536)
    free = 80 * 2**30 * 0.9 - auto.weight_bytes - auto.activation_peak_bytes(8192, 1024)
    assert auto.num_gpu_blocks(16, 0.9, 8192, 1024) == int(free // (16 * 131072))
    assert fp8.num_gpu_blocks(16, 0.9, 8192, 1024) == int(free // (16 * 65536))


def test_fp8_kv_halves_decode_attention_bytes():
    shape = StepShape.of(decodes=[4095] * 8)
    kv = [{o.name: o for o in r.breakdown(shape)}["attention (decode)"].bytes
          for r in (Roofline("llama-3-8b", "h100", 1), Roofline("llama-3-8b", "h100", 1, kv_cache_dtype="fp8"))]
    # per layer: KV of 8 x 4096 positions (2 x 8 x 128 x bytes each) + Q, O, new K and V of 8 tokens at 2 bytes
    q = 8 * (2 * 32 + 2 * 8) * 128 * 2
    assert kv == [32 * (8 * 4096 * 2 * 8 * 128 * 2 + q), 32 * (8 * 4096 * 2 * 8 * 128 + q)]


def test_fp8_weights_are_one_byte_except_embeddings_and_lm_head():
    """Llama-3-8B per layer: qkv 4096 x (32 + 2 x 8) x 128, o 4096 x 4096, MLP 3 x 4096 x 14336; the embedding and
    the untied LM head (128256 x 4096 each) stay in bf16, as vLLM's fp8 quantization leaves them."""
    linear = 32 * (4096 * 48 * 128 + 4096 * 4096 + 3 * 4096 * 14336)
    embed = 2 * 128256 * 4096
    assert Roofline("llama-3-8b", "h100", 1).weight_bytes == 2 * (linear + embed)
    assert Roofline("llama-3-8b", "h100", 1, quantization="fp8").weight_bytes == linear + 2 * embed


def test_fp8_prefill_gemms_run_at_the_fp8_peak():
    """4096 tokens through gate_up_proj are compute-bound at either precision: the time scales by the peaks."""
    shape = StepShape.of(prefills=[(4096, 0)])
    bf16, fp8 = ({o.name: o for o in r.breakdown(shape)}["gate_up_proj"] for r in (
        Roofline("llama-3-8b", "h100", 1), Roofline("llama-3-8b", "h100", 1, quantization="fp8")))
    assert bf16.bound == fp8.bound == "compute" and bf16.flops == fp8.flops
    kl = 32 * load_gpu("h100").kernel_latency  # the H100 file's GEMM floor (7.62 us), 32 layers
    assert (fp8.seconds - kl) / (bf16.seconds - kl) == pytest.approx(989.4 / 1979.0)


@pytest.mark.parametrize("kwargs, message", [
    ({"gpu": "a100", "quantization": "fp8"}, "a100-80gb has no FP8 tensor cores"),
    ({"gpu": "h100", "quantization": "int4"}, "expected one of fp8"),
    ({"gpu": "h100", "kv_cache_dtype": "int8"}, "expected one of auto, fp8"),
])
def test_precision_refusals(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Roofline("llama-3-8b", **kwargs)


def test_run_with_fp8_kv_gets_twice_the_blocks(monkeypatch, capsys, tmp_path):
    got = {}
    for dtype in ("auto", "fp8"):
        out = tmp_path / f"{dtype}.json"
        code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--num-prompts", "4",
                           "--kv-cache-dtype", dtype, "--json", str(out))
        assert code == 0, err
        got[dtype] = json.loads(out.read_text())["config"]["num_gpu_blocks"]
    free = 80 * 2**30 * 0.9 - Roofline("llama-3-8b", "h100", 1).weight_bytes \
        - Roofline("llama-3-8b", "h100", 1).activation_peak_bytes(8192, 1024)
    assert got == {"auto": int(free // (16 * 131072)), "fp8": int(free // (16 * 65536))}


@pytest.mark.parametrize("args, message", [
    (["run", "--workload", "seed", "--cost", "toy", "--quantization", "fp8"], "not an option of the toy cost"),
    (["run", "--workload", "seed", "--dtype", "fp8"], "FP8: --quantization fp8"),
    (["cost", "--gpu", "a100", "--decodes", "1", "-q", "fp8"], "no FP8 tensor cores"),
])
def test_precision_flags_on_the_command_line(monkeypatch, capsys, args, message):
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and message in err and err.count("\n") == 1
