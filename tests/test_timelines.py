"""The engine's timelines are columns; as a sequence they give the same `RequestTimeline`s as objects would."""

import math

import pytest
from helpers import reqs

from servesim.engine import simulate
from servesim.engine.timelines import Timelines
from servesim.engines.config import EngineConfig


def test_columns_round_trip_through_timeline_objects():
    # a and b fill the 6 usable blocks with their prompts (3 each); when a's decode needs a 4th, b (the last
    # admitted) is preempted and later resumes: b has two token runs
    r = simulate(reqs(("a", 0.0, 40, 30), ("b", 0.0, 40, 30), ("c", 0.001, 8, 4)),
                 EngineConfig(num_gpu_blocks=7, block_size=16), "vllm", "toy")
    t = r.requests
    assert isinstance(t, Timelines) and len(t) == 3
    assert t[1].num_preemptions == 1 and len(t[1].token_steps) == 4
    objects = list(t)
    assert Timelines.of(objects) == t
    assert t == objects and t[-1] == objects[2] and t[1:] == objects[1:]
    assert [x.id for x in t] == list(t.ids)
    assert t.first_token_time().tolist() == [x.first_token_time for x in objects]
    assert r.request(objects[1].id) == objects[1]
    with pytest.raises(KeyError):
        r.request("nope")
    with pytest.raises(IndexError):
        t[3]


def test_a_request_without_tokens_reads_none():
    t = Timelines.from_lists(["a"], {"arrival_time": [1.0], "first_scheduled_time": [math.nan],
                                     "finish_time": [math.nan], "time_preempted": [0.0], "prompt_len": [5],
                                     "output_len": [2], "priority": [0], "num_preemptions": [0],
                                     "num_prefill_chunks": [0]}, [0], [], None)
    (a,) = t
    assert (a.first_scheduled_time, a.finish_time, a.token_steps, a.first_token_time) == (None, None, (), None)
    assert math.isnan(t.first_token_time()[0])
