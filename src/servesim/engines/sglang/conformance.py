"""SGLang's conformance format (pinned: SGLang 0.5.23): run scenarios in the format of
`../shared/conformance/sglang/` and compare with traces recorded from SGLang's scheduler.

Time is counted in steps (every step costs 1.0, `arrival_time = arrival_step`). A scenario's `segments`
([[token, count], ...]) spell its prompt; they become one hash id per token (`hash_block_size` 1), which the
sglang policy's radix cache reads as token ids. Runs go step by step (`fast=False`), so every record carries what
SGLang decided (the fast path's stretch records leave the ratio out). A bad file is refused in one line.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from servesim.cost import UnitCost
from servesim.cost.specs import InputDoc, check_keys, decode_input, is_int, is_real, parse_json_input, read_input_bytes
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engine.resolve import resolve_config
from servesim.engine.result import SimResult
from servesim.engines.config import EngineConfig
from servesim.engines.conformance import check_scenario_shape, count_difference, read_trace_text, step_difference
from servesim.engines.sglang.scheduler import PRIORITY
from servesim.engines.sglang.server_args import SGLangConfig
from servesim.errors import ConfigError, WorkloadError

POLICY = "sglang"  # the policy the recorded schedules are reproduced with
SCENARIO_KEYS = ("name", "description", "config", "requests")
CONFIG_KEYS = ("max_total_num_tokens", "page_size", "chunked_prefill_size", "max_prefill_tokens",
               "max_running_requests", "policy", "schedule_conservativeness", "enable_mixed_chunk", "radix_cache",
               "enable_priority_scheduling", "priority_scheduling_preemption_threshold",
               "schedule_low_priority_values_first", "retraction_policy", "overlap")
SCENARIO_CONFIG_KEYS = CONFIG_KEYS  # what tells this format from another (`registry.conformance_for`)
REQUEST_KEYS = ("id", "arrival_step", "prompt_len", "output_len", "ignore_eos", "segments", "priority")
STEP_KEYS = ("forward_mode", "retracted", "finished", "free_tokens_after_schedule", "free_tokens_after_step")
TRACE = "an SGLang conformance trace: a JSON object (or .json.gz) with 'steps' (see ../shared/conformance/sglang)"
SCENARIO = ("an SGLang conformance scenario: a JSON object with 'config' and 'requests' "
            "(see ../shared/conformance/sglang)")


def _check_config(doc: InputDoc, c: Any) -> None:
    if not isinstance(c, dict):
        doc.fail_type(("config",), c, "an object of SGLang server arguments", ConfigError)
    check_keys(doc, c, ("config",), CONFIG_KEYS, ConfigError)
    for key in ("max_total_num_tokens", "max_running_requests"):
        if key not in c:
            doc.fail(("config", key), "missing field; the scenario's config needs max_total_num_tokens and "
                     "max_running_requests", ConfigError)
    for key, v in c.items():
        if key in ("max_total_num_tokens", "page_size", "max_prefill_tokens", "max_running_requests"):
            ok, expected = is_int(v) and v >= 1, "an integer >= 1"
        elif key == "chunked_prefill_size":
            ok, expected = v is None or (is_int(v) and v >= 1), "an integer >= 1, or null (chunking off)"
        elif key == "policy":
            # (not random: SGLang's shuffles draw on Python's global random, which its other parts share)
            ok, expected = v in ("fcfs", "lpm", "lof", "dfs-weight"), '"fcfs", "lpm", "lof" or "dfs-weight"'
        elif key == "schedule_conservativeness":
            ok, expected = is_real(v) and 0 <= v < math.inf, "a finite number >= 0"
        elif key == "priority_scheduling_preemption_threshold":
            ok, expected = is_int(v), "an integer"
        elif key == "retraction_policy":
            ok, expected = v == "length", '"length" (SGLang\'s "priority" retraction order is not modelled)'
        else:
            ok, expected = isinstance(v, bool), "true or false"
        if not ok:
            doc.fail_type(("config", key), v, expected, ConfigError)


def _check_request(doc: InputDoc, r: Any, i: int, seen: set) -> None:
    where = ("requests", i)
    if not isinstance(r, dict):
        doc.fail_type(where, r, "a request object with id, arrival_step, prompt_len and output_len")
    check_keys(doc, r, where, REQUEST_KEYS)
    for key in ("id", "arrival_step", "prompt_len", "output_len"):
        if key not in r:
            doc.fail((*where, key), "missing field; a request needs id, arrival_step, prompt_len and output_len")
    if not isinstance(r["id"], str) or not r["id"] or r["id"] in seen:
        doc.fail_type((*where, "id"), r["id"], "a non-empty string used by no other request")
    seen.add(r["id"])
    if not is_int(r["arrival_step"]) or r["arrival_step"] < 0:
        doc.fail_type((*where, "arrival_step"), r["arrival_step"], "an integer >= 0")
    for key in ("prompt_len", "output_len"):
        if not is_int(r[key]) or r[key] < 1:
            doc.fail_type((*where, key), r[key], "an integer >= 1")
    if r.get("priority") is not None and not is_int(r["priority"]):
        doc.fail_type((*where, "priority"), r["priority"], "an integer (or absent: the lowest)")
    if not isinstance(r.get("ignore_eos", False), bool):
        doc.fail_type((*where, "ignore_eos"), r["ignore_eos"], "true or false")
    seg = r.get("segments")
    if seg is not None:
        ok = isinstance(seg, list) and all(isinstance(x, list) and len(x) == 2 and is_int(x[0]) and is_int(x[1])
                                           and x[1] >= 1 for x in seg)
        if not ok or sum(x[1] for x in seg) != r["prompt_len"]:
            doc.fail_type((*where, "segments"), seg, f"[[token, count], ...] with counts summing to prompt_len "
                          f"({r['prompt_len']})")


def check_scenario(scenario: Any, doc: InputDoc) -> dict[str, Any]:
    check_scenario_shape(scenario, doc, SCENARIO_KEYS)
    _check_config(doc, scenario["config"])
    reqs = scenario["requests"]
    if not isinstance(reqs, list) or not reqs:
        doc.fail_type(("requests",), reqs, "a non-empty list of request objects")
    seen: set = set()
    for i, r in enumerate(reqs):
        _check_request(doc, r, i, seen)
    requests = scenario_requests(scenario)
    try:
        resolve_config(scenario_config(scenario), POLICY, requests, UnitCost())
    except ConfigError as exc:
        doc.fail(("config",), str(exc), ConfigError)
    return scenario


def load_scenario(path) -> dict[str, Any]:
    from pathlib import Path

    path = Path(path)
    text = decode_input(path, read_input_bytes(path, SCENARIO, WorkloadError), SCENARIO, WorkloadError)
    return check_scenario(parse_json_input(path, text, SCENARIO, WorkloadError), InputDoc(path, text, WorkloadError))


def load_trace(path) -> dict[str, Any]:
    """A recorded SGLang trace (gzipped or not); its steps are checked as `first_difference` reads them."""
    from pathlib import Path

    path = Path(path)
    trace = parse_json_input(path, read_trace_text(path, TRACE), TRACE, WorkloadError)
    if not isinstance(trace, dict) or not isinstance(trace.get("steps"), list):
        raise WorkloadError(f"{path}: expected {TRACE}")
    return trace


def scenario_requests(scenario: dict[str, Any]) -> list[Request]:
    # a request without a priority gets the lowest there is (scheduler.py 3520-3527)
    lowest = sys.maxsize if scenario["config"].get("schedule_low_priority_values_first") else -sys.maxsize - 1
    out = []
    for r in scenario["requests"]:
        seg = r.get("segments")
        ids = tuple(t for t, k in seg for _ in range(k)) if seg else None
        priority = r.get("priority")
        out.append(Request(r["id"], float(r["arrival_step"]), r["prompt_len"], r["output_len"], hash_ids=ids,
                           hash_block_size=1 if ids else None, ignore_eos=r.get("ignore_eos", False),
                           priority=lowest if priority is None else priority))
    return out


def scenario_config(scenario: dict[str, Any]) -> EngineConfig:
    c = scenario["config"]
    sg = SGLangConfig(
        max_total_num_tokens=c["max_total_num_tokens"], page_size=c.get("page_size", 1),
        chunked_prefill_size=c.get("chunked_prefill_size", 8192), max_prefill_tokens=c.get("max_prefill_tokens", 16384),
        max_running_requests=c["max_running_requests"], schedule_policy=c.get("policy", "fcfs"),
        schedule_conservativeness=float(c.get("schedule_conservativeness", 1.0)),
        enable_mixed_chunk=c.get("enable_mixed_chunk", False), disable_radix_cache=not c.get("radix_cache", False),
        enable_priority_scheduling=c.get("enable_priority_scheduling", False),
        priority_scheduling_preemption_threshold=c.get("priority_scheduling_preemption_threshold", 10),
        schedule_low_priority_values_first=c.get("schedule_low_priority_values_first", False),
        retraction_policy=c.get("retraction_policy", "length"), disable_overlap_schedule=not c.get("overlap", False))
    return EngineConfig(sglang=sg)


def run_scenario(scenario: dict[str, Any], record: str = "steps") -> SimResult:
    reqs = scenario_requests(scenario)
    return simulate(reqs, scenario_config(scenario), policy=POLICY, cost=UnitCost(1.0), record=record, fast=False)


def to_trace(scenario: dict[str, Any], result: SimResult) -> dict[str, Any]:
    """The result in the SGLang fixtures' trace schema."""
    ps = result.config.sglang.page_size
    steps = []
    by_priority = {(p.step, p.id) for p in result.preemptions if p.mode == PRIORITY}
    for s in result.steps:
        preempted = [i for i in s.preempted if (s.step, i) in by_priority]
        retracted = [i for i in s.preempted if (s.step, i) not in by_priority]
        steps.append({
            "step": round(s.start_time), "arrivals": list(s.arrivals), "forward_mode": s.forward_mode,
            "scheduled": [
                {"id": e.id, "num_scheduled_tokens": e.num_scheduled_tokens, "kind": e.kind.value,
                 "num_computed_tokens_before": e.num_computed_tokens_before + e.num_cached_tokens,
                 "num_tokens_before": e.num_tokens_before, "resumed": e.resumed,
                 "cached_tokens": e.num_cached_tokens, "samples_token": e.samples_token}
                for e in s.scheduled
            ],
            "total_scheduled_tokens": s.total_scheduled_tokens, "retracted": retracted, "preempted": preempted,
            "finished": list(s.finished),
            "new_token_ratio_at_schedule": s.new_token_ratio, "chunked_req_after_schedule": s.chunked_request,
            "free_tokens_after_schedule": _tokens(s.free_blocks_after_schedule, ps),
            "free_tokens_after_step": _tokens(s.free_blocks_after_step, ps),
            "num_running_after": s.num_running_after, "num_waiting_after": s.num_waiting_after,
        })
    step_of = {r.start_time: round(r.start_time) for r in result.steps}
    requests = {}
    preemptions = {}
    for p in result.preemptions:
        if p.mode == PRIORITY:
            preemptions[p.id] = preemptions.get(p.id, 0) + 1
    for r in result.requests:
        requests[r.id] = {
            "arrival_step": math.ceil(r.arrival_time), "first_scheduled_step": step_of.get(r.first_scheduled_time),
            "first_token_step": round(r.token_times[0] - 1) if r.token_times else None,
            "finish_step": round(r.finish_time - 1) if r.finish_time is not None else None,
            "num_retractions": r.num_preemptions - preemptions.get(r.id, 0),
            "num_preemptions": preemptions.get(r.id, 0), "cached_tokens_first_admission": r.num_cached_tokens,
            "prefill_chunks": r.num_prefill_chunks,
        }
    modes = [s["forward_mode"] for s in steps]
    return {
        "scenario": scenario.get("name", ""), "engine": "servesim sglang policy",
        "summary": {"num_steps": len(steps), "last_step": steps[-1]["step"] if steps else None,
                    "finished": sum(r.finish_time is not None for r in result.requests),
                    "total_retractions": len(result.preemptions) - len(by_priority),
                    "total_preemptions": len(by_priority), "idle_overlap_iterations": result.idle_iterations,
                    "prefill_steps": modes.count("prefill"),
                    "decode_steps": modes.count("decode"), "mixed_steps": modes.count("mixed")},
        "requests": requests, "steps": steps,
    }


def _tokens(pages: int | None, page_size: int) -> int | None:
    return None if pages is None else pages * page_size


def first_difference(expected: dict[str, Any], actual: dict[str, Any], radix: bool = True,
                     priority: bool = False) -> tuple[int, str, Any, Any] | None:
    """The first step where two traces differ, as ../shared/conformance/sglang/README.md defines a match: the
    forward mode; the scheduled list (ids, order, tokens, kind, and cached_tokens with the radix cache); the
    retracted and finished; both free-token counts; and the number of steps."""
    exp, act = expected.get("steps"), actual["steps"]
    if not isinstance(exp, list):
        raise WorkloadError("expected trace: 'steps' must be a list of step objects (see ../shared/conformance/sglang)")
    keys = ("id", "num_scheduled_tokens", "kind") + (("cached_tokens",) if radix else ())
    for i, (e, a) in enumerate(zip(exp, act)):
        if not isinstance(e, dict) or any(k not in e for k in ("step", "scheduled", *STEP_KEYS)):
            raise WorkloadError(f"expected trace: steps[{i}] needs step, scheduled, {', '.join(STEP_KEYS)}")
        if e["step"] != a["step"]:
            return i, "step", e["step"], a["step"]
        if e["forward_mode"] != a["forward_mode"]:
            return i, "forward_mode", e["forward_mode"], a["forward_mode"]
        diff = step_difference(i, e, a, keys, STEP_KEYS[1:] + (("preempted",) if priority else ()))
        if diff is not None:
            return diff
    return count_difference(exp, act)


def compare(scenario: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]):
    """`first_difference` under this format's rule of a match (cached tokens only with the radix cache on)."""
    c = scenario["config"]
    return first_difference(expected, actual, radix=c.get("radix_cache", False),
                            priority=c.get("enable_priority_scheduling", False))
