"""vLLM's conformance format (pinned: vLLM 0.33.0): run scenarios in the format of `../shared/conformance/` and
compare with traces recorded from vLLM v1's scheduler.

Time in the fixtures is counted in steps: every step costs 1.0 and `arrival_time = arrival_step`. A request is
added before the first step whose index is >= its arrival, so fractional arrival times round up. A bad scenario or
trace file is refused in one line, `FILE:LINE: field: what was expected`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from pathlib import Path
from typing import Any

from servesim.cost import UnitCost
from servesim.cost.specs import (
    InputDoc,
    check_keys,
    decode_input,
    is_finite,
    is_int,
    is_real,
    parse_json_input,
    read_input_bytes,
)
from servesim.engine import simulate
from servesim.engine.request import HASH_SCOPES, Request
from servesim.engine.resolve import resolve_config
from servesim.engine.result import SimResult
from servesim.engines.config import EngineConfig
from servesim.engines.conformance import check_scenario_shape, count_difference, read_trace_text, step_difference
from servesim.engines.vllm.speculative import speculative_config
from servesim.errors import ConfigError, WorkloadError

CONFIG_KEYS = (
    "max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "long_prefill_token_threshold",
    "block_size", "num_gpu_blocks", "watermark", "scheduler_reserve_full_isl", "async_scheduling", "max_model_len",
    "enable_prefix_caching", "long_prefill_token_threshold_adaptive", "max_num_active_seqs",
    "prefill_schedule_interval", "speculative_config", "use_v2_model_runner",
)
ENTRY_KEYS = ("id", "num_scheduled_tokens", "kind", "num_blocks")
STEP_KEYS = ("preempted", "finished", "free_blocks_after_schedule", "free_blocks_after_step")

# The scenario format (../shared/conformance/README.md, and round2/README.md's additions): every key it has.
POLICY = "vllm"  # the policy the recorded schedules are reproduced with
SCENARIO_KEYS = ("name", "description", "config", "requests")
REQUIRED_CONFIG = ("max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "block_size",
                   "num_gpu_blocks")
# (round 1 gave both; the specdec scenarios leave them at vLLM's defaults, 0 and "fcfs")
SCENARIO_CONFIG_KEYS = (*REQUIRED_CONFIG, "long_prefill_token_threshold", "policy", "watermark",
                        "scheduler_reserve_full_isl", "async_scheduling", "max_model_len", "step_duration",
                        "enable_prefix_caching", "prefix_caching_hash_algo", "long_prefill_token_threshold_adaptive",
                        "max_num_active_seqs", "prefill_schedule_interval", "speculative_config",
                        "use_v2_model_runner")
# specdec/README.md: `accept` (drafts accepted per verification step, cyclic), `draft_lens` (the V1 runner's
# proposals), `accept_p` (the probability an `accept` list was drawn with: informational, the list decides)
REQUEST_KEYS = ("id", "arrival_step", "arrival_time", "prompt_len", "output_len", "priority", "hash_ids",
                "hash_scope", "accept", "draft_lens", "accept_p")
# the speculative traces' fields a match compares too (where the expected trace has them)
SPEC_ENTRY_KEYS = ("num_spec_tokens", "num_accepted", "num_new_outputs", "num_computed_tokens_after")
SCENARIO = "a conformance scenario: a JSON object with 'config' and 'requests' (see ../shared/conformance)"
TRACE = "a conformance trace: a JSON object (or .json.gz) with 'steps' (see ../shared/conformance)"


def _check_config(doc: InputDoc, c: Any) -> None:
    """Every key known and required one present, each value of its type and range (as EngineConfig's fields)."""
    if not isinstance(c, dict):
        doc.fail_type(("config",), c, "an object of scheduler settings", ConfigError)
    check_keys(doc, c, ("config",), SCENARIO_CONFIG_KEYS, ConfigError)
    for key in REQUIRED_CONFIG:
        if key not in c:
            doc.fail(("config", key), "missing field; the scenario's config needs "
                     + ", ".join(REQUIRED_CONFIG), ConfigError)
    for key, value in c.items():
        where = ("config", key)
        if key in ("max_num_batched_tokens", "max_num_seqs", "block_size", "max_model_len", "num_gpu_blocks",
                   "max_num_active_seqs", "prefill_schedule_interval"):
            low = 2 if key == "num_gpu_blocks" else 1  # one block is vLLM's null block
            ok, expected = is_int(value) and value >= low, f"an integer >= {low}"
        elif key == "long_prefill_token_threshold":
            ok, expected = is_int(value) and value >= 0, "an integer >= 0 (0 = off)"
        elif key == "speculative_config":
            try:
                speculative_config(value)
            except ConfigError as exc:
                doc.fail(where, str(exc).removeprefix("speculative_config").lstrip(".: "), ConfigError)
            continue
        elif key in ("enable_chunked_prefill", "scheduler_reserve_full_isl", "async_scheduling",
                     "enable_prefix_caching", "long_prefill_token_threshold_adaptive", "use_v2_model_runner"):
            ok, expected = isinstance(value, bool), "true or false"
        elif key == "policy":
            ok, expected = value in ("fcfs", "priority"), '"fcfs" or "priority"'
        elif key == "watermark":
            ok, expected = is_real(value) and 0 <= value < 1, "a fraction of num_gpu_blocks in [0, 1)"
        elif key == "step_duration":
            ok, expected = is_finite(value) and value > 0, "a finite number of seconds > 0"
        else:  # prefix_caching_hash_algo
            ok, expected = isinstance(value, str), "a string"
        if not ok:
            doc.fail_type(where, value, expected, ConfigError)


def _check_request(doc: InputDoc, r: Any, i: int, seen: dict[str, int], step_duration: float, bs: int) -> None:
    where = ("requests", i)
    if not isinstance(r, dict):
        doc.fail_type(where, r, "a request object with id, arrival_step, prompt_len and output_len")
    check_keys(doc, r, where, REQUEST_KEYS)
    for key in ("id", "prompt_len", "output_len"):
        if key not in r:
            doc.fail((*where, key), "missing field; a request needs id, arrival_step (or arrival_time), prompt_len "
                     "and output_len")
    rid = r["id"]
    if not (isinstance(rid, str) or is_int(rid)) or str(rid) == "":
        doc.fail_type((*where, "id"), rid, "a non-empty string or an integer")
    if str(rid) in seen:
        doc.fail((*where, "id"), f"expected every id once, {rid!r} is also requests[{seen[str(rid)]}]'s")
    seen[str(rid)] = i
    arrivals = [k for k in ("arrival_step", "arrival_time") if k in r]
    if len(arrivals) != 1:
        doc.fail((*where, arrivals[-1] if arrivals else "arrival_step"),
                 "expected exactly one of arrival_step and arrival_time" + ("" if arrivals else "; missing"))
    t = r[arrivals[0]]
    step = 1.0 if arrivals[0] == "arrival_step" else step_duration
    if not (is_finite(t) and t >= 0):
        doc.fail_type((*where, arrivals[0]), t, "a finite number >= 0")
    if not math.isfinite(t / step):
        doc.fail_type((*where, arrivals[0]), t, "a time whose step, arrival_time / step_duration, is finite")
    for key in ("prompt_len", "output_len"):
        if not is_int(r[key]) or r[key] < 1:
            doc.fail_type((*where, key), r[key], "an integer >= 1")
    if r.get("priority") is not None and not is_int(r["priority"]):
        doc.fail_type((*where, "priority"), r["priority"], "an integer (lower runs first)")
    scope = r.get("hash_scope", "prompt")
    if scope not in HASH_SCOPES:
        doc.fail_type((*where, "hash_scope"), scope, " or ".join(f'"{s}"' for s in HASH_SCOPES))
    for key in ("accept", "draft_lens"):
        v = r.get(key)
        if v is not None and not (isinstance(v, list) and v and all(is_int(n) and n >= 0 for n in v)):
            doc.fail_type((*where, key), v, "a non-empty list of integers >= 0")
    if "accept_p" in r and not (is_real(r["accept_p"]) and 0 <= r["accept_p"] <= 1):
        doc.fail_type((*where, "accept_p"), r["accept_p"], "a probability in [0, 1]")
    hashes = r.get("hash_ids")
    if hashes is not None and not (isinstance(hashes, list) and all(is_int(h) for h in hashes)):
        doc.fail_type((*where, "hash_ids"), hashes, "a list of integers")
    # round 3's "sequence": the ids cover the prompt and the output (a turn that repeats the previous answer)
    covered, what = ((r["prompt_len"], "the prompt") if scope == "prompt"
                     else (r["prompt_len"] + r["output_len"], "the prompt and the output"))
    if hashes is not None and len(hashes) != -(-covered // bs):
        doc.fail_type((*where, "hash_ids"), hashes, f"one id per {bs}-token block of {what} "
                      f"({-(-covered // bs)} ids)")


def check_scenario(scenario: Any, doc: InputDoc) -> dict[str, Any]:
    """Refuse, with `FILE:LINE: field: what was expected`, anything the scenario format does not allow, and any
    configuration the engine would refuse; return the scenario unchanged."""
    check_scenario_shape(scenario, doc, SCENARIO_KEYS)
    for key in ("name", "description"):
        if not isinstance(scenario.get(key, ""), str):
            doc.fail_type((key,), scenario[key], "a string")
    _check_config(doc, scenario["config"])
    requests = scenario["requests"]
    if not isinstance(requests, list) or not requests:
        doc.fail_type(("requests",), requests, "a non-empty list of request objects")
    seen: dict[str, int] = {}
    for i, r in enumerate(requests):
        _check_request(doc, r, i, seen, scenario["config"].get("step_duration", 1.0),
                       scenario["config"]["block_size"])
    reqs = scenario_requests(scenario)
    try:
        resolve_config(scenario_config(scenario, reqs), POLICY, reqs, UnitCost())
    except ConfigError as exc:  # what the engine refuses (a budget below max_num_seqs, a request the pool cannot hold)
        doc.fail(("config",), str(exc), ConfigError)
    return scenario


def load_scenario(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    text = decode_input(path, read_input_bytes(path, SCENARIO, WorkloadError), SCENARIO, WorkloadError)
    return check_scenario(parse_json_input(path, text, SCENARIO, WorkloadError), InputDoc(path, text, WorkloadError))


def check_trace(trace: Any, doc: InputDoc) -> dict[str, Any]:
    """Refuse a trace `first_difference` could not compare: its steps, their fields and scheduled entries."""
    if not isinstance(trace, dict):
        doc.fail_type((), trace, "a JSON object with 'steps'")
    if "steps" not in trace:
        doc.fail(("steps",), "missing field; expected a trace in the conformance format")
    if not isinstance(trace["steps"], list):
        doc.fail_type(("steps",), trace["steps"], "a list of step objects")
    for i, step in enumerate(trace["steps"]):
        where = ("steps", i)
        if not isinstance(step, dict):
            doc.fail_type(where, step, "a step object")
        for key in ("step", "scheduled", *STEP_KEYS):
            if key not in step:
                doc.fail((*where, key), f"missing field; a step needs step, scheduled, {', '.join(STEP_KEYS)}")
        if not isinstance(step["scheduled"], list):
            doc.fail_type((*where, "scheduled"), step["scheduled"], "a list of scheduled entries")
        for j, entry in enumerate(step["scheduled"]):
            if not isinstance(entry, dict):
                doc.fail_type((*where, "scheduled", j), entry, "a scheduled entry object")
            for key in ENTRY_KEYS:
                if key not in entry:
                    doc.fail((*where, "scheduled", j, key), f"missing field; an entry needs {', '.join(ENTRY_KEYS)}")
    return trace


def load_trace(path: str | Path) -> dict[str, Any]:
    """A trace recorded from vLLM (round 2's are gzipped: read as they are)."""
    path = Path(path)
    text = read_trace_text(path, TRACE)
    return check_trace(parse_json_input(path, text, TRACE, WorkloadError), InputDoc(path, text, WorkloadError))


def scenario_requests(scenario: dict[str, Any]) -> list[Request]:
    """Arrivals on the step clock: `arrival_step`, or `ceil(arrival_time / step_duration)` (round2/README.md)."""
    step = scenario["config"].get("step_duration", 1.0)
    spec = "speculative_config" in scenario["config"]
    reqs = []
    for i, r in enumerate(scenario["requests"]):
        t = r["arrival_step"] if "arrival_step" in r else r.get("arrival_time", 0) / step
        hashes = tuple(r["hash_ids"]) if r.get("hash_ids") is not None else None
        accept = tuple(r.get("accept", [0])) if spec else None  # (specdec/README.md: default [0])
        lens = tuple(r["draft_lens"]) if r.get("draft_lens") is not None else None
        reqs.append(Request(str(r.get("id", i)), float(math.ceil(t)), int(r["prompt_len"]), int(r["output_len"]),
                            int(r.get("priority") or 0), hashes, hash_scope=r.get("hash_scope", "prompt"),
                            sends_max_tokens=False,  # (driven offline: a long output stops at max_model_len)
                            accept=accept, draft_lens=lens))
    return reqs


def scenario_config(scenario: dict[str, Any], requests: list[Request]) -> EngineConfig:
    c = scenario["config"]
    kw = {k: c[k] for k in CONFIG_KEYS if k in c}
    kw.setdefault("max_model_len", max(r.prompt_len + r.output_len for r in requests) + 16)
    return EngineConfig(policy=c.get("policy", "fcfs"), **kw)


def run_scenario(scenario: dict[str, Any], record: str = "steps") -> SimResult:
    """Every step costs 1.0 (step k starts at time k), whatever `step_duration`: it only scales arrival times.
    `record`: "steps" is all `to_trace` reads; "full" adds why each waiting request got nothing (slower: a few
    hundred queued requests are noted every step)."""
    reqs = scenario_requests(scenario)
    return simulate(reqs, scenario_config(scenario, reqs), policy=POLICY, cost=UnitCost(1.0), record=record)


def to_trace(scenario: dict[str, Any], result: SimResult) -> dict[str, Any]:
    """The result in the fixtures' trace schema (step index = the step's start time on the step clock)."""
    steps = []
    spec = result.config.speculative_config is not None
    lengths = {r.id: (r.prompt_len, r.output_len) for r in result.requests} if spec else {}
    for s in result.steps:
        d: dict[str, Any] = {
            "step": round(s.start_time), "arrivals": list(s.arrivals),
            "scheduled": [
                {"id": e.id, "num_scheduled_tokens": e.num_scheduled_tokens, "kind": e.kind.value,
                 "num_computed_tokens_before": e.num_computed_tokens_before, "num_tokens_before": e.num_tokens_before,
                 "resumed": e.resumed, "samples_token": e.samples_token, "num_blocks": e.num_blocks,
                 "num_cached_tokens": e.num_cached_tokens, **(_spec_entry(e, lengths[e.id]) if spec else {})}
                for e in s.scheduled
            ],
            "total_scheduled_tokens": s.total_scheduled_tokens, "preempted": list(s.preempted),
            "finished": list(s.finished), "num_running_after": s.num_running_after,
            "num_waiting_after": s.num_waiting_after, "free_blocks_after_schedule": s.free_blocks_after_schedule,
            "free_blocks_after_step": s.free_blocks_after_step,
        }
        if s.finished_observed:
            d["finished_observed"] = list(s.finished_observed)
        if spec:
            d["num_spec_tokens"] = sum(e.num_spec_tokens for e in s.scheduled)
            if s.skip_drafts:
                d["skip_drafts"] = True
        steps.append(d)
    _add_rejected(steps, result)
    step_of = {s.start_time: round(s.start_time) for s in result.steps}
    requests = {}
    rejected, clamped = set(result.rejected), set(result.clamped)
    for r in result.requests:
        requests[r.id] = {
            "arrival_step": math.ceil(r.arrival_time),
            "first_scheduled_step": step_of.get(r.first_scheduled_time),
            "first_token_step": round(r.token_times[0] - 1) if r.token_times else None,
            "finish_step": round(r.finish_time - 1) if r.finish_time is not None else None,
            "num_preemptions": r.num_preemptions,
        }
        if r.id in rejected:
            requests[r.id]["rejected"] = True
        elif r.id in clamped:
            requests[r.id]["max_tokens"] = r.output_len
    summary = {"num_steps": len(steps), "last_step": steps[-1]["step"] if steps else None,
               "num_finished": sum(r.finish_time is not None for r in result.requests),
               "num_requests": len(result.requests), "total_preemptions": len(result.preemptions),
               "num_rejected": len(result.rejected)}
    if spec:
        _add_spec_totals(steps, requests, summary)
    return {"scenario": scenario.get("name", ""), "engine": "servesim vllm policy", "summary": summary,
            "requests": requests, "steps": steps}


def _spec_entry(e, lengths: tuple[int, int]) -> dict[str, Any]:
    """specdec/README.md's entry fields: the drafts verified, accepted, the outputs appended after the stop trimmed
    them, the computed tokens after the rollbacks (rejected drafts, trimmed tokens)."""
    prompt_len, output_len = lengths
    computed = e.num_computed_tokens_before + e.num_cached_tokens + e.num_scheduled_tokens
    new = 0
    if e.samples_token:
        sampled = 1 + e.num_accepted
        new = min(sampled, output_len - (e.num_tokens_before - prompt_len))
        computed -= e.num_spec_tokens - e.num_accepted + sampled - new
    d = {"num_spec_tokens": e.num_spec_tokens, "drafts_before": e.drafts_before}
    if e.spec_padded:
        d["spec_padded"] = True
    accepted = e.num_accepted if e.samples_token else None  # (a partial chunk verifies nothing: null, as recorded)
    return d | {"num_accepted": accepted, "num_new_outputs": new, "num_computed_tokens_after": computed}


def _add_spec_totals(steps: list[dict[str, Any]], requests: dict[str, Any], summary: dict[str, Any]) -> None:
    """Per request the accepted drafts of each verification, drafts and accepted tokens; the run's totals."""
    for r in requests.values():
        r.update(accepted=[], num_draft_tokens=0, num_accepted_tokens=0)
    padded = scheduled = 0
    for step in steps:
        for e in step["scheduled"]:
            if e["num_spec_tokens"]:
                r = requests[e["id"]]
                r["accepted"].append(e["num_accepted"])
                r["num_draft_tokens"] += e["num_spec_tokens"]
                r["num_accepted_tokens"] += e["num_accepted"]
                scheduled += e["num_spec_tokens"]
            padded += e.get("spec_padded", False)
    drafts = sum(r["num_draft_tokens"] for r in requests.values())
    accepted = sum(r["num_accepted_tokens"] for r in requests.values())
    summary.update(spec_draft_tokens=drafts, spec_accepted_tokens=accepted,
                   spec_verify_steps=sum(len(r["accepted"]) for r in requests.values()),
                   spec_acceptance_rate=round(accepted / drafts, 4) if drafts else 0.0,
                   spec_padded_entries=padded, spec_scheduled_tokens=scheduled)


def _add_rejected(steps: list[dict[str, Any]], result: SimResult) -> None:
    """Round 3's step `rejected`: the ids refused at arrival, on the first step at or after their arrival."""
    if not result.rejected or not steps:
        return
    starts = [d["step"] for d in steps]
    arrival = {r.id: math.ceil(r.arrival_time) for r in result.requests}
    for rid in result.rejected:
        k = bisect_left(starts, arrival[rid])
        if k < len(steps):
            steps[k].setdefault("rejected", []).append(rid)


def first_difference(expected: dict[str, Any], actual: dict[str, Any]) -> tuple[int, str, Any, Any] | None:
    """The first step at which two traces differ, as the fixtures' README defines a match; None if they match."""
    check_trace(expected, InputDoc("expected trace", error=WorkloadError))
    exp, act = expected["steps"], actual["steps"]
    asynchronous = bool((expected.get("config_in_force") or {}).get("async_scheduling"))
    for i, (e, a) in enumerate(zip(exp, act)):
        if e["step"] != a["step"]:
            return i, "step", e["step"], a["step"]
        keys = ENTRY_KEYS + (("num_cached_tokens",) if any("num_cached_tokens" in x for x in e["scheduled"]) else ())
        if any("num_spec_tokens" in x for x in e["scheduled"]):  # (async: the drafts only; what a step's entry
            keys += SPEC_ENTRY_KEYS[:1] if asynchronous else SPEC_ENTRY_KEYS  # says of its output is recorded late)
        diff = step_difference(i, e, a, keys, STEP_KEYS + (("rejected",) if "rejected" in e or "rejected" in a else ()))
        if diff is not None:
            return diff
    return count_difference(exp, act)


def compare(scenario: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]):
    """`first_difference` under this format's rule of a match."""
    return first_difference(expected, actual)
