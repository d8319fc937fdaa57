"""Run scenarios in the format of `../shared/conformance/` and compare with traces recorded from vLLM v1.

Time in the fixtures is counted in steps: every step costs 1.0 and `arrival_time = arrival_step`. A request is
added before the first step whose index is >= its arrival, so fractional arrival times round up.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from servesim.cost import UnitCost
from servesim.engine import simulate
from servesim.engine.config import EngineConfig
from servesim.engine.request import Request
from servesim.engine.result import SimResult
from servesim.errors import WorkloadError

CONFIG_KEYS = (
    "max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "long_prefill_token_threshold",
    "block_size", "num_gpu_blocks", "watermark", "scheduler_reserve_full_isl", "async_scheduling", "max_model_len",
)
ENTRY_KEYS = ("id", "num_scheduled_tokens", "kind", "num_blocks")
STEP_KEYS = ("preempted", "finished", "free_blocks_after_schedule", "free_blocks_after_step")


def load_scenario(path: str | Path) -> dict[str, Any]:
    try:
        scenario = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise WorkloadError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
    for key in ("config", "requests"):
        if key not in scenario:
            raise WorkloadError(f"{path}: missing field {key!r}; expected a scenario with 'config' and 'requests'")
    return scenario


def scenario_requests(scenario: dict[str, Any]) -> list[Request]:
    reqs = []
    for i, r in enumerate(scenario["requests"]):
        t = r.get("arrival_step", r.get("arrival_time", 0))
        reqs.append(Request(str(r.get("id", i)), float(math.ceil(t)), int(r["prompt_len"]), int(r["output_len"]),
                            int(r.get("priority") or 0)))
    return reqs


def scenario_config(scenario: dict[str, Any], requests: list[Request]) -> EngineConfig:
    c = scenario["config"]
    kw = {k: c[k] for k in CONFIG_KEYS if k in c}
    kw.setdefault("max_model_len", max(r.prompt_len + r.output_len for r in requests) + 16)
    return EngineConfig(policy=c.get("policy", "fcfs"), **kw)


def run_scenario(scenario: dict[str, Any]) -> SimResult:
    reqs = scenario_requests(scenario)
    step = scenario["config"].get("step_duration", 1.0)
    return simulate(reqs, scenario_config(scenario, reqs), policy="vllm", cost=UnitCost(step))


def to_trace(scenario: dict[str, Any], result: SimResult) -> dict[str, Any]:
    """The result in the fixtures' trace schema (step index = the step's start time on the step clock)."""
    steps = []
    for s in result.steps:
        d: dict[str, Any] = {
            "step": round(s.start_time), "arrivals": list(s.arrivals),
            "scheduled": [
                {"id": e.id, "num_scheduled_tokens": e.num_scheduled_tokens, "kind": e.kind.value,
                 "num_computed_tokens_before": e.num_computed_tokens_before, "num_tokens_before": e.num_tokens_before,
                 "resumed": e.resumed, "samples_token": e.samples_token, "num_blocks": e.num_blocks}
                for e in s.scheduled
            ],
            "total_scheduled_tokens": s.total_scheduled_tokens, "preempted": list(s.preempted),
            "finished": list(s.finished), "num_running_after": s.num_running_after,
            "num_waiting_after": s.num_waiting_after, "free_blocks_after_schedule": s.free_blocks_after_schedule,
            "free_blocks_after_step": s.free_blocks_after_step,
        }
        if s.finished_observed:
            d["finished_observed"] = list(s.finished_observed)
        steps.append(d)
    step_of = {s.start_time: round(s.start_time) for s in result.steps}
    requests = {}
    for r in result.requests:
        requests[r.id] = {
            "arrival_step": math.ceil(r.arrival_time),
            "first_scheduled_step": step_of.get(r.first_scheduled_time),
            "first_token_step": round(r.token_times[0] - 1) if r.token_times else None,
            "finish_step": round(r.finish_time - 1) if r.finish_time is not None else None,
            "num_preemptions": r.num_preemptions,
        }
    return {
        "scenario": scenario.get("name", ""), "engine": "servesim vllm policy",
        "summary": {"num_steps": len(steps), "last_step": steps[-1]["step"] if steps else None,
                    "num_finished": sum(r.finish_time is not None for r in result.requests),
                    "num_requests": len(result.requests), "total_preemptions": len(result.preemptions)},
        "requests": requests, "steps": steps,
    }


def first_difference(expected: dict[str, Any], actual: dict[str, Any]) -> tuple[int, str, Any, Any] | None:
    """The first step at which two traces differ, as the fixtures' README defines a match; None if they match."""
    exp, act = expected["steps"], actual["steps"]
    for i, (e, a) in enumerate(zip(exp, act)):
        if e["step"] != a["step"]:
            return i, "step", e["step"], a["step"]
        es = [{k: x[k] for k in ENTRY_KEYS} for x in e["scheduled"]]
        as_ = [{k: x[k] for k in ENTRY_KEYS} for x in a["scheduled"]]
        if es != as_:
            return i, "scheduled", es, as_
        for k in STEP_KEYS:
            if e[k] != a[k]:
                return i, k, e[k], a[k]
    if len(exp) != len(act):
        return min(len(exp), len(act)), "number of steps", len(exp), len(act)
    return None
