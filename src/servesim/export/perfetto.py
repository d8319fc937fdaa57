"""A run as a Chrome trace (the JSON trace event format that ui.perfetto.dev and chrome://tracing open).

One process, the engine; in it one track ("thread") for the engine's steps, each step a slice with its batch in
args, and one track per request, named by its id, with slices for queued, each prompt chunk (its tokens in args),
each run of consecutive decode steps (one slice, not one per token), preempted and swapped. Counter tracks: KV
blocks used / free (and cached free blocks under prefix caching), running / waiting requests, and the
step's scheduled tokens (decode, prefill, and what was left of the budget, stacked up to the budget).
Timestamps and durations are microseconds of simulated time.

Size: a one-hour trace has ~350,000 steps, and one slice and three counters a step is ~1.4 M events (~150 MB).
`max_events` caps the file: when the steps would take more than half of it, consecutive steps are merged into
groups (one slice and one counter sample per group, means in args); when the requests' slices would not fit in
the rest, every k-th request (workload order) is kept. What was merged or left out is said in `otherData` and
by the command. `max_events=None` writes everything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.engine.result import SimResult
from servesim.export.spans import Span, request_spans, step_times

MAX_EVENTS = 50_000  # default cap: ~5 MB of JSON
PID = 1
STEPS_TID = 0
US = 1e6  # seconds -> microseconds
BATCH_SHOWN = 16  # entries of a step's batch written in its args; the rest counted


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """What went into a trace: events written, steps per step slice, requests kept."""

    events: int
    steps: int
    step_groups: int
    requests: int
    requests_kept: int

    def note(self) -> str | None:
        parts = []
        if self.step_groups < self.steps:
            parts.append(f"{self.steps:,} steps merged into {self.step_groups:,} slices of "
                         f"~{math.ceil(self.steps / max(self.step_groups, 1))} consecutive steps")
        if self.requests_kept < self.requests:
            parts.append(f"{self.requests_kept:,} of {self.requests:,} requests kept (one in "
                         f"{math.ceil(self.requests / max(self.requests_kept, 1))})")
        return "; ".join(parts) + " to stay under --max-events" if parts else None


def _us(seconds: float) -> float:
    return round(seconds * US, 3)


def _slice(tid: int, name: str, start: float, end: float, cat: str, args: dict) -> dict:
    ts = _us(start)
    return {"ph": "X", "pid": PID, "tid": tid, "ts": ts, "dur": round(_us(end) - ts, 3), "name": name, "cat": cat,
            "args": args}


def _meta(name: str, tid: int, args: dict) -> dict:
    return {"ph": "M", "pid": PID, "tid": tid, "ts": 0, "name": name, "args": args}


def _batch_text(step) -> str:
    s = step.scheduled
    parts = [f"{e.id}:{e.num_scheduled_tokens}" for e in s.rest[:BATCH_SHOWN]]
    ids = s.ids[:max(0, BATCH_SHOWN - len(parts))]
    parts += [f"{rid}:1" for rid in ids]
    more = len(s) - len(parts)
    return " ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def _step_args(step) -> dict:
    args = {"step": step.step, "batch": _batch_text(step), "num_scheduled": len(step.scheduled),
            "decode_tokens": step.num_decodes, "prefill_tokens": step.prefill_tokens,
            "token_budget": step.token_budget}
    if step.preempted:
        args["preempted"] = " ".join(step.preempted)
    if step.finished:
        args["finished"] = " ".join(step.finished)
    if step.waiting:
        args["waiting"] = " ".join(f"{w.id}:{w.reason.value}" for w in step.waiting[:BATCH_SHOWN])
    return args


def _counters(ts: float, used: float | None, free: float | None, cached: float | None, running: float,
              waiting: float, decode: float, prefill: float, budget: float) -> list[dict]:
    out = []
    if used is not None:
        kv = {"used": used, "free": free}
        if cached is not None:
            kv["cached"] = cached
        out.append({"ph": "C", "pid": PID, "tid": STEPS_TID, "ts": ts, "name": "KV blocks", "args": kv})
    out.append({"ph": "C", "pid": PID, "tid": STEPS_TID, "ts": ts, "name": "requests", "args": {"running": running,
                                                                               "waiting": waiting}})
    out.append({"ph": "C", "pid": PID, "tid": STEPS_TID, "ts": ts, "name": "scheduled tokens",
                "args": {"decode": decode, "prefill": prefill, "unused budget": max(0.0, budget - decode - prefill)}})
    return out


def _step_columns(result: SimResult) -> dict[str, np.ndarray]:
    """Per step, the counters' values (the cached count only when the records carry one)."""
    usable = result.config.usable_blocks
    steps = result.steps
    free = np.array([-1 if s.free_blocks_after_schedule is None else s.free_blocks_after_schedule for s in steps],
                    float)
    cols = {
        "free": free, "used": (usable - free) if usable is not None else free * np.nan,
        "running": np.array([s.num_running_after for s in steps], float),
        "waiting": np.array([s.num_waiting_after for s in steps], float),
        "decode": np.array([s.num_decodes for s in steps], float),
        "prefill": np.array([s.prefill_tokens for s in steps], float),
        "budget": np.array([s.token_budget for s in steps], float),
    }
    cached = [s.cached_free_blocks_after_schedule for s in steps]  # prefix caching's cached free blocks
    if steps and all(c is not None for c in cached):
        cols["cached"] = np.array(cached, float)
    return cols


def _step_events(result: SimResult, groups: int) -> list[dict]:
    """The steps track and the counters: one slice and one sample per step, or per group of consecutive steps."""
    steps, n = result.steps, len(result.steps)
    times = step_times(result)
    cols = _step_columns(result)
    kv = result.config.usable_blocks is not None
    bounds = np.linspace(0, n, groups + 1).round().astype(int) if n else np.zeros(1, int)
    out: list[dict] = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if b <= a:
            continue
        start, end = float(times.start[a]), float(times.end[b - 1])
        mean = {k: round(float(v[a:b].mean()), 2) for k, v in cols.items()}
        if b - a == 1:
            out.append(_slice(STEPS_TID, f"step {a}", start, end, "step", _step_args(steps[a])))
        else:
            args = {"steps": f"{a}-{b - 1}", "num_steps": b - a, **{f"mean_{k}": v for k, v in mean.items()}}
            out.append(_slice(STEPS_TID, f"steps {a}-{b - 1}", start, end, "steps", args))
        out += _counters(_us(start), mean["used"] if kv else None, mean["free"] if kv else None, mean.get("cached"),
                         mean["running"], mean["waiting"], mean["decode"], mean["prefill"], mean["budget"])
        if b < n and times.start[b] > times.end[b - 1]:  # the engine idles until the next arrival: the pool as the
            last = steps[b - 1]  # last step left it (its finishers' blocks back), nothing scheduled
            free = last.free_blocks_after_step
            out += _counters(_us(end), result.config.usable_blocks - free if kv else None, free if kv else None,
                             None, last.num_running_after, last.num_waiting_after, 0.0, 0.0, mean["budget"])
    return out


def _span_event(tid: int, sp: Span) -> dict:
    name = f"prefill {sp.tokens}" if sp.kind == "prefill" else sp.kind
    args: dict = {"detail": sp.detail} if sp.detail else {}
    if sp.first_step is not None:
        args["steps"] = str(sp.first_step) if sp.first_step == sp.last_step else f"{sp.first_step}-{sp.last_step}"
    if sp.tokens:
        args["tokens"] = sp.tokens
    return _slice(tid, name, sp.start, sp.end, sp.kind, args)


def _kept(ids: list[str], by_id: dict[str, list[Span]], room: int | None) -> list[str]:
    """Every k-th request, the smallest k whose tracks (a name, a sort index, the slices) fit in `room` events."""
    def size(kept: list[str]) -> int:
        return sum(2 + len(by_id.get(rid, ())) for rid in kept)

    if room is None or size(ids) <= room:
        return ids
    every = max(2, math.ceil(size(ids) / max(room, 1)))
    while every < len(ids) and size(ids[::every]) > room:
        every += 1
    return ids[::every] if size(ids[::every]) <= room else []


def trace_events(result: SimResult, max_events: int | None = MAX_EVENTS) -> tuple[dict, TraceSummary]:
    """The trace as a JSON object (`traceEvents`, `displayTimeUnit`, `otherData`) and what went into it."""
    if max_events is not None and max_events < 100:
        from servesim.errors import ConfigError

        raise ConfigError(f"--max-events {max_events}: expected at least 100 (or 0 for no cap)")
    n = len(result.steps)
    # a slice and up to six counter samples a step (three more after an idle gap): the steps take at most half
    groups = n if max_events is None else min(n, max(1, max_events // 2 // 7))
    step_events = _step_events(result, groups)
    by_id: dict[str, list[Span]] = {}
    for sp in request_spans(result):
        by_id.setdefault(sp.request_id, []).append(sp)
    ids = list(result.timelines.ids)
    kept = _kept(ids, by_id, None if max_events is None else max_events - len(step_events) - 3)
    events = [_meta("process_name", 0, {"name": f"engine: {result.policy} ({result.cost_model} cost)"}),
              _meta("thread_name", STEPS_TID, {"name": "steps"}),
              _meta("thread_sort_index", STEPS_TID, {"sort_index": 0}), *step_events]
    for k, rid in enumerate(kept, start=1):
        events.append(_meta("thread_name", k, {"name": rid}))
        events.append(_meta("thread_sort_index", k, {"sort_index": k}))
        events += [_span_event(k, sp) for sp in by_id.get(rid, ())]
    summary = TraceSummary(len(events), n, groups, len(ids), len(kept))
    other = {"generator": "servesim", "policy": result.policy, "cost_model": result.cost_model,
             "time_unit": "microseconds of simulated time", "steps": n, "step_slices": groups,
             "requests": len(ids), "requests_kept": len(kept), "aggregated": summary.note() or "nothing"}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}, summary


def cluster_trace_events(cluster, max_events: int | None = MAX_EVENTS) -> tuple[dict, TraceSummary]:
    """A cluster (`servesim.cluster.ClusterResult`) as one trace: a process per replica (its steps, counters and
    the requests it served, as `trace_events` draws one engine), the cap shared out among them; under P/D a
    process for the KV links, each transfer a slice on its prefill replica's link."""
    n = len(cluster.replicas)
    share = None if max_events is None else max(100, max_events // n)
    events: list[dict] = []
    parts: list[TraceSummary] = []
    for pid, (name, r) in enumerate(zip(cluster.names, cluster.replicas), start=1):
        trace, summary = trace_events(r, share)
        for e in trace["traceEvents"]:
            e["pid"] = pid
            if e["ph"] == "M" and e["name"] == "process_name":
                e["args"] = {"name": f"{name}: {r.policy} ({r.cost_model} cost)"}
        events += trace["traceEvents"]
        events.append(_meta("process_sort_index", 0, {"sort_index": pid}) | {"pid": pid})
        parts.append(summary)
    if cluster.transfers:
        pid = n + 1
        events.append(_meta("process_name", 0, {"name": "KV transfers"}) | {"pid": pid})
        links = sorted({t.prefill for t in cluster.transfers})
        for t in links:
            events.append(_meta("thread_name", t + 1, {"name": f"link of {cluster.names[t]}"}) | {"pid": pid})
        for t in cluster.transfers:
            events.append(_slice(t.prefill + 1, t.request_id, t.start, t.end, "kv_transfer", {
                "bytes": t.num_bytes, "to": cluster.names[t.decode],
                "queued_us": round((t.start - t.ready) * 1e6, 3)}) | {"pid": pid})
    summary = TraceSummary(len(events), sum(p.steps for p in parts), sum(p.step_groups for p in parts),
                           sum(p.requests for p in parts), sum(p.requests_kept for p in parts))
    other = {"generator": "servesim", "router": cluster.router, "replicas": list(cluster.names),
             "time_unit": "microseconds of simulated time", "kv_transfers": len(cluster.transfers),
             "aggregated": summary.note() or "nothing"}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}, summary


def write_perfetto(path: Path, result, max_events: int | None = MAX_EVENTS) -> TraceSummary:
    """Write `result` (one engine's `SimResult`, or a `ClusterResult`), renamed into place when complete."""
    if hasattr(result, "replicas"):
        trace, summary = cluster_trace_events(result, max_events)
    else:
        trace, summary = trace_events(result, max_events)
    from servesim.output import open_output

    with open_output(path, "--output") as f:
        json.dump(trace, f, separators=(",", ":"))
    return summary
