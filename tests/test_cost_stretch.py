"""`decode_stretch` (the fast path's durations) agrees with `step_time` step by step."""

import pytest

from servesim.cost import StepShape, get_cost_model
from servesim.cost.host import get_engine

CONTEXTS = [5, 130, 1021, 17, 4000, 64]


def shapes(k):
    n = len(CONTEXTS)
    return [StepShape((1,) * n, tuple(c + j for c in CONTEXTS), (True,) * n, n) for j in range(k)]


@pytest.mark.parametrize("cost", [
    get_cost_model("toy"), get_cost_model("toy", overhead_ms=0.3), get_cost_model("unit"),
    get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb", tp=1),
    get_cost_model("roofline", model="llama-2-70b", gpu="a100-80gb", tp=4),
    get_cost_model("roofline", model="mixtral-8x7b", gpu="h100-80gb", tp=2),
    # with the engine's host work: overlapped, in series, eager launches, Ray's RPC
    get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb", tp=1, engine=get_engine("vllm-0.33")),
    get_cost_model("roofline", model="llama-2-7b", gpu="a100-80gb", tp=1, engine=get_engine("vllm-0.2")),
    get_cost_model("roofline", model="llama-2-70b", gpu="a100-80gb", tp=4, engine=get_engine("vllm-0.2")),
    get_cost_model("roofline", model="llama-2-70b", gpu="a100-80gb", tp=4,
                   engine=get_engine("vllm-0.2", enforce_eager=False)),
    get_cost_model("roofline", model="mixtral-8x7b", gpu="h100-80gb", tp=2, engine=get_engine("trtllm")),
    # whole experts per GPU (--enable-expert-parallel), and a MoE model with FP8 weights
    get_cost_model("roofline", model="qwen3-30b-a3b", gpu="h100-80gb", tp=2, enable_expert_parallel=True,
                   engine=get_engine("vllm-0.33")),
    get_cost_model("roofline", model="minimax-m2.5", gpu="h200", tp=4, quantization="fp8"),
])
def test_decode_stretch_matches_step_time(cost):
    k = 300
    got = cost.decode_stretch(len(CONTEXTS), sum(CONTEXTS), k)
    want = [cost.step_time(s) for s in shapes(k)]
    assert list(got) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("engine", ["vllm-0.33", "vllm-0.2", "trtllm"])
@pytest.mark.parametrize("k", [5, 40])  # the loop and the numpy paths
def test_decode_stretch_is_the_same_floats_as_step_time_with_decodes(engine, k):
    """The fast path plans stretches with `decode_stretch` and single steps with `step_time_with_decodes`: both
    must give the same floats, host part included, or a run's clock would depend on the path taken."""
    cost = get_cost_model("roofline", model="llama-2-70b", gpu="a100-80gb", tp=4, engine=get_engine(engine))
    n, ctx = len(CONTEXTS), sum(CONTEXTS)
    empty = StepShape((), (), (), 0)
    assert cost.decode_stretch(n, ctx, k) == [cost.step_time_with_decodes(n, ctx + n * j, empty) for j in range(k)]
