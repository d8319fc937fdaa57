"""The engine takes KV capacity and KV bytes per token from a cost model that knows the model and the GPU."""

from servesim.cost import get_cost_model
from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.workloads import load_workload


def test_num_gpu_blocks_is_derived_from_gpu_memory_when_not_given():
    cost = get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb", tp=1)
    r = simulate(load_workload("seed"), EngineConfig(max_num_batched_tokens=256, max_num_seqs=8), "vllm", cost)
    # vLLM's profile run at this budget and sequence cap: 80 GiB x 0.9 usable, minus the bf16 weights, minus the
    # activation peak of 256 tokens (MLP live set) and 8 sequences' fp32 logits, in blocks of 16 x 131072 bytes
    usable = 80 * 2**30 * 0.9
    weights = 2 * 8_029_995_008
    activations = 256 * 2 * (2 * 4096 + 2 * 14336 + 14336) + 8 * 128256 * 4
    assert r.config.num_gpu_blocks == int((usable - weights - activations) // (16 * 131072)) == 29191
    # Llama-3-8B: 2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes (bf16)
    assert r.config.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2


def test_a_given_num_gpu_blocks_is_kept():
    cost = get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb", tp=1)
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, num_gpu_blocks=500)
    assert simulate(load_workload("seed"), cfg, "vllm", cost).config.num_gpu_blocks == 500


def test_the_toy_cost_leaves_kv_unlimited():
    r = simulate(load_workload("seed"), EngineConfig(max_num_batched_tokens=256, max_num_seqs=8), "vllm", "toy")
    assert r.config.num_gpu_blocks is None
    assert r.steps[0].free_blocks_after_step is None
