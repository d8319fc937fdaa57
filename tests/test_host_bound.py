"""The host/device split of a run's decode steps (`servesim.analysis.host_bound`), and `idle_step_time`."""

import pytest
from helpers import reqs, run

from servesim.analysis.explain import explain_run
from servesim.analysis.host_bound import decode_split, host_bound_sentence
from servesim.cost import Roofline, StepShape
from servesim.cost.host import EAGER_LAUNCH_US, VIDUR_SEQ_MS, VIDUR_STEP_MS, get_engine


def _run(engine: str):
    cost = Roofline("llama-2-7b", "a100", 1, engine=get_engine(engine))
    # Two requests of 16 prompt tokens and 4 output tokens: one prefill step, then 3 decode-only steps of 2.
    return cost, run(reqs(("a", 0, 16, 4), ("b", 0, 16, 4)), cost=cost)


def test_eager_engine_decodes_are_host_bound_by_the_presets_constants():
    cost, result = _run("vllm-0.2")
    split = decode_split(result, cost)
    assert (split.steps, split.of) == (3, 3)
    # vllm-0.2 at TP 1 (host.py, Vidur's cpu_overheads fit): 0.851 ms a step + 0.0417 ms a sequence, 2 sequences;
    # eager: 32 layers x (4 GEMMs + 4 elementwise + 1 attention) + 4 per step = 292 launches x 38 us.
    launch = 292 * EAGER_LAUNCH_US * 1e-6
    assert EAGER_LAUNCH_US == 38.0  # host.py: (12.0 - 0.851 - 0.042) ms / 292, vLLM PR 1440
    assert split.launch == pytest.approx(launch)
    assert split.host == pytest.approx((VIDUR_STEP_MS + 2 * VIDUR_SEQ_MS) * 1e-3 + launch)
    # The GPU part is the roofline's kernels alone: two Llama-2-7B decodes stream the 12.6 GiB of weights (~9 ms
    # on an A100), less than the 11.1 ms of launches plus 0.93 ms of host work.
    assert split.device < split.host and split.host_bound
    sentence = host_bound_sentence(result, cost)
    assert sentence.startswith(f"Decode steps were host-bound: {split.host * 1e3:.1f} ms of host work "
                               f"({launch * 1e3:.1f} ms of it launching kernels eagerly) against "
                               f"{split.device * 1e3:.1f} ms of GPU work per step (means over all 3")
    assert sentence in explain_run(result, cost=cost)


def test_cuda_graph_engine_is_not_host_bound_and_says_nothing():
    cost, result = _run("vllm-0.33")
    split = decode_split(result, cost)
    assert split.launch == 0 and split.host == pytest.approx((VIDUR_STEP_MS + 2 * VIDUR_SEQ_MS) * 1e-3)
    assert not split.host_bound and host_bound_sentence(result, cost) is None
    assert decode_split(result, Roofline("llama-2-7b", "a100", 1)) is None  # no engine profile: no split


def test_idle_step_pays_host_and_device_in_series():
    """A first token on an idle engine: async scheduling has no previous step to hide the host work behind."""
    cost = Roofline("llama-2-7b", "a100", 1, engine=get_engine("vllm-0.33"))
    shape = StepShape.of(prefills=[(128, 0)])
    device, host, issue = cost.split(shape)
    assert issue == 0 and host == pytest.approx((VIDUR_STEP_MS + VIDUR_SEQ_MS) * 1e-3)
    assert cost.step_time(shape) == max(device, host)
    assert cost.idle_step_time(shape) == pytest.approx(device + host)
