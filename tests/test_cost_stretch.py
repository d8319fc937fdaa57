"""`decode_stretch` (the fast path's durations) agrees with `step_time` step by step."""

import pytest

from servesim.cost import StepShape, get_cost_model

CONTEXTS = [5, 130, 1021, 17, 4000, 64]


def shapes(k):
    n = len(CONTEXTS)
    return [StepShape((1,) * n, tuple(c + j for c in CONTEXTS), (True,) * n, n) for j in range(k)]


@pytest.mark.parametrize("cost", [
    get_cost_model("toy"), get_cost_model("toy", overhead_ms=0.3), get_cost_model("unit"),
    get_cost_model("roofline", model="llama-3-8b", gpu="h100-80gb", tp=1),
    get_cost_model("roofline", model="llama-2-70b", gpu="a100-80gb", tp=4),
    get_cost_model("roofline", model="mixtral-8x7b", gpu="h100-80gb", tp=2),
])
def test_decode_stretch_matches_step_time(cost):
    k = 300
    got = cost.decode_stretch(len(CONTEXTS), sum(CONTEXTS), k)
    want = [cost.step_time(s) for s in shapes(k)]
    assert list(got) == pytest.approx(want, rel=1e-12)
