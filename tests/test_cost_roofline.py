"""Roofline step cost: every expected number below is derived by hand from config.json and datasheet values."""

import pytest

from servesim.cost import StepShape, get_cost_model
from servesim.cost.roofline import Roofline
from servesim.errors import ConfigError

# a100-80gb.toml's GEMM constants, fitted to Vidur's A100 GEMM profiles (bench.cost_vs_vidur --fit)
A100_C = 312e12 * 0.734  # dense bf16 FLOP/s x compute efficiency
A100_M = 2039e9 * 0.760  # HBM bytes/s x memory efficiency
KL = 6.60e-6  # floor per GEMM


def test_kv_bytes_per_token():
    assert Roofline("llama-3-8b", "h100", 1).kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072
    assert Roofline("llama-3-8b", "h100", 2).kv_bytes_per_token == 2 * 32 * 4 * 128 * 2
    # tp=16 > 8 KV heads: vLLM replicates, one KV head per GPU.
    assert Roofline("llama-3-70b", "h100", 16).kv_bytes_per_token == 2 * 80 * 1 * 128 * 2


def test_num_gpu_blocks_as_vllm_derives_it():
    r = Roofline("llama-3-8b", "h100", 1)
    usable = 80 * 2**30 * 0.9
    weights = 2 * 8_029_995_008
    activations = 2048 * 2 * (2 * 4096 + 2 * 14336 + 14336) + 256 * 128256 * 4  # MLP live set + fp32 logits
    assert r.num_gpu_blocks(16, 0.9, 2048) == int((usable - weights - activations) // (16 * 131072)) == 29043


def test_model_that_does_not_fit_is_a_config_error():
    with pytest.raises(ConfigError, match="does not fit on a100-80gb at tp=1"):
        Roofline("llama-3-70b", "a100", 1).num_gpu_blocks(16)


def test_decode_gemm_is_weight_read():
    r = Roofline("llama-2-7b", "a100", 1)
    qkv = {o.name: o for o in r.breakdown(StepShape.of(decodes=[100]))}["qkv_proj"]
    weight_and_act = 2 * (4096 * 12288 + 1 * (4096 + 12288))  # bytes: weights once, 1 token in and out
    assert qkv.bound == "memory"
    assert qkv.seconds == pytest.approx(32 * (weight_and_act / A100_M + KL))


def test_large_prefill_gemm_is_compute_bound():
    r = Roofline("llama-2-7b", "a100", 1)
    up = {o.name: o for o in r.breakdown(StepShape.of(prefills=[(4096, 0)]))}["gate_up_proj"]
    assert up.bound == "compute"
    assert up.seconds == pytest.approx(32 * (2 * 4096 * 4096 * 2 * 11008 / A100_C + KL))


def test_gemm_flops_count_whole_128_token_tiles():
    r = Roofline("llama-2-7b", "a100", 1)
    t = [{o.name: o for o in r.breakdown(StepShape.of(prefills=[(n, 0)]))}["down_proj"].flops for n in (2049, 2176)]
    assert t[0] == t[1] == 32 * 2 * 2176 * 11008 * 4096


def test_attention_prefill_vs_decode():
    r = Roofline("llama-3-8b", "a100", 1)
    parts = {o.name: o for o in r.breakdown(StepShape.of(decodes=[1000], prefills=[(512, 1024)]))}
    # Prefill: 512 queries x 1024 cached keys, plus causal 512 x 513 / 2 within the chunk; 4 FLOPs/pair/head_dim.
    assert parts["attention (prefill)"].flops == 32 * 4 * 32 * 128 * (512 * 1024 + 512 * 513 // 2)
    # Decode: reads its whole KV (1000 cached + its own) and writes its own K, V; Q in, O out.
    dec = parts["attention (decode)"]
    assert dec.bytes == 32 * (2 * 8 * 128 * 2 * 1001 + (2 * 32 + 2 * 8) * 128 * 2)
    assert dec.bound == "memory" and parts["attention (prefill)"].bound == "compute"


def test_lm_head_runs_for_sampled_tokens_only():
    r = Roofline("llama-3-8b", "h100", 1)
    chunk = StepShape((512,), (0,), (False,), num_sampled=0)  # a middle chunk of a longer prompt
    last = StepShape((512,), (0,), (False,), num_sampled=1)
    assert "lm_head + sampler" not in {o.name for o in r.breakdown(chunk)}
    lm = {o.name: o for o in r.breakdown(last)}["lm_head + sampler"]
    assert r.step_time(last) - r.step_time(chunk) == pytest.approx(lm.seconds)


def test_tensor_parallel_all_reduces():
    r = Roofline("llama-2-7b", "a100", 2)
    ar = [o for o in r.breakdown(StepShape.of(decodes=[10] * 8)) if o.bound == "communication"]
    assert [o.name for o in ar] == ["all_reduce x65 (0.06 MiB each)"]  # 2 per layer + the embedding's
    wire = 2 * (2 - 1) / 2 * (8 * 4096 * 2) / 300e9  # ring, per-direction NVLink (600 GB/s both ways)
    # a100-80gb.toml's [allreduce] tp2 = [[42.9, 0.564], [44.7, 0.559]] (us, efficiency): the faster protocol
    assert ar[0].seconds == pytest.approx(65 * min(42.9e-6 + wire / 0.564, 44.7e-6 + wire / 0.559))
    # a TP size the table does not list falls back to the file's allreduce_latency_us (30) and interconnect (0.55)
    assert Roofline("llama-2-7b", "a100", 2).params.allreduce != Roofline("llama-2-7b", "a100", 16).params.allreduce
    assert Roofline("llama-2-7b", "a100", 16).params.allreduce == (pytest.approx((30e-6, 0.55)),)
    assert Roofline("llama-2-7b", "a100", 1).breakdown(StepShape.of(decodes=[10]))[-1].name == "step overhead"


def test_tensor_parallel_divides_gemm_work():
    shape = StepShape.of(prefills=[(4096, 0)])
    f1, f4 = ({o.name: o for o in Roofline("llama-2-7b", "a100", tp).breakdown(shape)}["o_proj"].flops
              for tp in (1, 4))
    assert f1 == 4 * f4


def test_moe_reads_touched_experts_only():
    r = Roofline("mixtral-8x7b", "h100", 1)
    up = {o.name: o for o in r.breakdown(StepShape.of(decodes=[10]))}["experts.gate_up_proj"]
    # One token, top-2 of 8: 8 x (1 - (1 - 2/8)^1) = 2 experts' weights; 2 routed token copies in and out.
    assert up.bytes == pytest.approx(32 * 2 * (2 * 4096 * 2 * 14336 + 2 * (4096 + 2 * 14336)))


@pytest.mark.parametrize(("model", "tp"), [("llama-3-8b", 1), ("llama-2-7b", 2), ("mixtral-8x7b", 2),
                                           ("bloom-176b", 8)])
@pytest.mark.parametrize("shape", [StepShape.of(decodes=[1]), StepShape.of(decodes=[700] * 9, prefills=[(300, 50)]),
                                   StepShape.of(prefills=[(2048, 0), (5, 4000)], num_sampled=1),
                                   StepShape((), (), (), 0)])
def test_step_time_is_the_sum_of_the_breakdown(model, tp, shape):
    r = Roofline(model, "h100", tp)
    assert r.step_time(shape) == pytest.approx(sum(o.seconds for o in r.breakdown(shape)), rel=1e-12)


def test_registry_and_tp_validation():
    r = get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb", tp=1)
    assert r.name == "roofline" and r.step_time(StepShape.of(decodes=[1])) > 0
    with pytest.raises(ConfigError, match="tp=3: must divide num_attention_heads"):
        get_cost_model("roofline", model="llama-3-8b", tp=3)


def test_an_fp8_gemm_on_a_b200_at_its_datasheet_peak():
    # Llama-3-8B's qkv_proj (4,096 x 6,144) over 4,096 tokens in FP8 on a B200: 2 x 4,096 x 4,096 x 6,144 FLOPs at
    # the datasheet's dense 4,500 TFLOP/s x 0.65 (the default efficiency: no B200 profile in the files) is 70.5 us,
    # above its bytes (25.2 MB of weights, 83.9 MB of activations at 7.7 TB/s x 0.8: 17.7 us); + the 4 us floor;
    # over 32 layers
    r = Roofline("llama-3-8b", "b200", 1, quantization="fp8")
    op = {o.name: o for o in r.breakdown(StepShape.of(prefills=[(4096, 0)]))}["qkv_proj"]
    assert op.bound == "compute"
    assert op.seconds == pytest.approx(32 * (2 * 4096 * 4096 * 6144 / (4500e12 * 0.65) + 4e-6), rel=1e-12)


def test_nvfp4_weights_and_gemm_on_a_b200_and_an_h200():
    # NVFP4 (--quantization modelopt_fp4): 4-bit weights with an FP8 scale per 16, 0.5625 bytes a weight; the
    # embedding and LM head stay 16-bit. Llama-3-8B: 32 x 218,103,808 linear weights + 2 x 128,256 x 4,096
    from servesim.cost.roofline import NVFP4_BYTES

    b200 = Roofline("llama-3-8b", "b200", 1, quantization="modelopt_fp4")
    assert NVFP4_BYTES == 0.5 + 1 / 16
    assert b200.weight_bytes == int(0.5625 * 32 * 218_103_808 + 2 * 2 * 128_256 * 4096)
    # on the B200, W4A4 at the dense FP4 peak (9,000 TFLOP/s x 0.65) after a kernel quantizing the 4,096 x 4,096
    # input (reads 2 bytes, writes 0.5625, at 7.7 TB/s x 0.8, + a 4 us floor); the GEMM compute-bound
    shape = StepShape.of(prefills=[(4096, 0)])
    quant = 4096 * 4096 * 2.5625 / (7.7e12 * 0.8) + 4e-6
    qkv = {o.name: o for o in b200.breakdown(shape)}["qkv_proj"]
    assert qkv.seconds == pytest.approx(32 * (2 * 4096 * 4096 * 6144 / (9000e12 * 0.65) + quant + 4e-6), rel=1e-12)
    # on the H200 (no FP4 tensor cores) the weights are dequantized into 16-bit GEMMs (Marlin W4A16): the BF16
    # peak, 989.4 TFLOP/s x 0.65, no quantization kernel
    h200 = Roofline("llama-3-8b", "h200", 1, quantization="modelopt_fp4")
    qkv = {o.name: o for o in h200.breakdown(shape)}["qkv_proj"]
    assert qkv.seconds == pytest.approx(32 * (2 * 4096 * 4096 * 6144 / (989.4e12 * 0.65) + 4e-6), rel=1e-12)
