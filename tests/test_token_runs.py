"""Token runs over live steps (`servesim.engine.token_runs`): kept compact, expanded to runs of consecutive steps."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.request import Request, RequestState
from servesim.engine.token_runs import LiveSteps, expand


def consecutive_runs(steps: list[int]) -> list[int]:
    """The plain encoding: a run per stretch of consecutive steps."""
    runs: list[int] = []
    for t in steps:
        if runs and runs[-2] + runs[-1] == t:
            runs[-1] += 1
        else:
            runs += (t, 1)
    return runs


def record(steps_of: list[list[int]], skip: list[bool]) -> tuple[list[RequestState], LiveSteps]:
    """Mark the steps and sample each request's tokens in step order, as the engine does."""
    live = LiveSteps()
    states = [RequestState(Request(f"r{i}", 0.0, 1, max(1, len(s))), i) for i, s in enumerate(steps_of)]
    for t, masked in enumerate(skip):
        live.mark(not masked)
        for s, steps in zip(states, steps_of):
            if t in steps:
                s.sampled(t, 1, live)
    return states, live


def test_sglang_alternating_steps_are_one_run():
    # steps 0, 2, 4 run prompts alone (nobody decodes); the request's first token comes in step 0 (its prompt
    # completes there), then it decodes in 1, 3, 5: one run over live steps, three of consecutive steps
    states, live = record([[0, 1, 3, 5]], [True, False, True, False, True, False])
    assert states[0].token_runs == [0, 4]
    runs, offsets = expand(np.array(states[0].token_runs), np.array([0, 2]), live.skip())
    assert runs.tolist() == [0, 2, 3, 1, 5, 1] and offsets.tolist() == [0, 6]
    assert live.last_token_at(states[0].token_runs, 5) and not live.last_token_at(states[0].token_runs, 4)


def test_a_live_step_sat_out_breaks_the_run():
    # step 2 is live (someone decoded) but the request got nothing there (preempted): two runs either way
    states, live = record([[0, 1, 3], [0, 1, 2, 3]], [False, False, False, False])
    assert states[0].token_runs == [0, 2, 3, 1] and states[1].token_runs == [0, 4]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_expand_gives_the_consecutive_runs_of_the_same_steps(data):
    n = data.draw(st.integers(1, 30))
    skip = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    k = data.draw(st.integers(1, 4))
    steps_of = [sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n))) for _ in range(k)]
    states, live = record(steps_of, skip)
    lengths = [len(s.token_runs) for s in states]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = np.array([v for s in states for v in s.token_runs], np.int64)
    runs, out_offsets = expand(flat, offsets, live.skip())
    for i, steps in enumerate(steps_of):
        assert runs[out_offsets[i]:out_offsets[i + 1]].tolist() == consecutive_runs(steps)
        if steps:
            assert live.last_token_at(states[i].token_runs, steps[-1])
            assert not any(live.last_token_at(states[i].token_runs, t) for t in range(n) if t != steps[-1])
