"""The invariants' livelock check: a run whose outputs stop changing fails a property test instead of hanging it."""

import pytest

from servesim.engine import loop, simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig


def test_steps_without_an_output_change_past_the_limit_fail(monkeypatch):
    # a 100-token prompt in chunks of 10 (the budget) is ten steps with no output token: under a limit of 3
    # steps the check fails; under the real limit (100,000) the same run passes
    cfg = EngineConfig(max_num_batched_tokens=10, max_num_seqs=1, max_model_len=200, long_prefill_token_threshold=0)
    reqs = [Request("A", 0.0, 100, 2)]
    assert simulate(reqs, cfg, "vllm", "toy", check_invariants=True).request("A").finish_time is not None
    monkeypatch.setattr(loop, "LIVELOCK_STEPS", 3)
    with pytest.raises(AssertionError, match="no request's output changed in 3 steps: a livelock"):
        simulate(reqs, cfg, "vllm", "toy", check_invariants=True)
