"""What a cluster run returns: each replica's own `SimResult`, the routing decisions, the KV transfers (P/D), and
the whole cluster as one `SimResult` for the client-side metrics.

The cluster's result puts every replica's steps on one clock, replica after replica (`TokenClock` ends
concatenated), so a request's tokens are runs of that clock's steps wherever they were sampled: on a P/D cluster
its first token on the prefill replica and the rest on the decode replica, and the gap between them (the KV
transfer) is one of its ITLs. Everything that reads `SimResult.timelines` works on it; the steps themselves are
each replica's (`replicas[i].steps`, `.step_log`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from servesim.cluster.pd import Transfer
from servesim.cluster.replicas import Route
from servesim.engine.records import TokenClock
from servesim.engine.result import SimResult
from servesim.engine.timelines import FLOAT_COLUMNS, INT_COLUMNS, Timelines


@dataclass(frozen=True, slots=True)
class ClusterResult:
    replicas: tuple[SimResult, ...]  # each replica's own run: its step records (the replica's steps) and requests
    roles: tuple[str, ...]  # "both" | "prefill" | "decode", per replica
    router: str
    routes: tuple[Route, ...]  # every routing decision, in time order (P/D: the prefill pick, then the decode pick)
    cluster: SimResult  # the whole cluster: timelines in workload order on one clock (see the module docstring)
    placement: tuple[int, ...]  # each request's replica (P/D: its prefill replica), workload order; -1: rejected
    transfers: tuple[Transfer, ...] = ()  # P/D, in the order they were sent
    link_busy: tuple[float, ...] = ()  # P/D: seconds each prefill replica's link spent sending

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"{role}-{i}" if role != "both" else f"replica-{i}" for i, role in enumerate(self.roles))

    def routes_of(self, request_id: str) -> list[Route]:
        return [r for r in self.routes if r.request_id == request_id]

    def benchmark(self, percentiles=(99.0,), goodput=None, warmup: float = 0.0, cooldown: float = 0.0):
        """`vllm bench serve`'s block for the whole cluster."""
        from servesim.analysis.benchmark import (
            benchmark_metrics,
            peak_output_tokens_per_s,
            request_arrays,
            window,
        )

        m = benchmark_metrics(self.cluster, percentiles, goodput, warmup, cooldown)
        keep = window(self.cluster, warmup, cooldown) if warmup or cooldown else None
        a = request_arrays(self.cluster, keep)
        order = np.argsort(a.step_ends, kind="stable")  # the replicas' steps in time order, for the 1-s buckets
        peak = peak_output_tokens_per_s(a.step_ends[order], a.step_tokens[order], float(a.arrival.min(initial=0.0)))
        return replace(m, max_output_tokens_per_s=peak)

    def transfer_summary(self) -> dict[str, float | int]:
        """`kv_transfer_*`: how many, bytes, seconds per request (from the first token to the KV landed), link use."""
        if not self.transfers:
            return {}
        seconds = np.array([t.seconds for t in self.transfers])
        span = self.cluster.makespan or 1.0
        return {"kv_transfer_count": len(self.transfers),
                "kv_transfer_bytes": int(sum(t.num_bytes for t in self.transfers)),
                "mean_kv_transfer_ms": float(seconds.mean() * 1000),
                "p99_kv_transfer_ms": float(np.percentile(seconds, 99) * 1000),
                "max_kv_transfer_ms": float(seconds.max() * 1000),
                "kv_transfer_link_utilization": float(sum(self.link_busy) / (len(self.link_busy) * span))}

    def replica_rows(self) -> list[dict[str, object]]:
        """Per replica: requests, tokens, KV use, queue, preemptions, prefix-cache hit rate."""
        rows = []
        for name, role, r in zip(self.names, self.roles, self.replicas):
            log = r.step_log
            t = r.timelines
            kv = None
            if log is not None and len(log) and log.usable_blocks:
                used = 1.0 - log.free_blocks_after_schedule / log.usable_blocks
                kv = float(np.average(used, weights=log.duration) if log.duration.sum() > 0 else used.mean())
            rows.append({
                "replica": name, "role": role, "requests": len(t), "completed": int(t.finished.sum()),
                "steps": len(log) if log is not None else len(r.steps), "tokens": r.tokens_processed,
                "output_tokens": int(t.output_len[t.finished].sum()) if len(t) else 0,
                "mean_kv_use": kv,
                "max_waiting": int(log.num_waiting_after.max()) if log is not None and len(log) else 0,
                "preemptions": len(r.preemptions),
                "prefix_hit_rate": None if r.prefix_cache is None else r.prefix_cache.hit_rate,
            })
        return rows

    def records_dict(self) -> dict[str, object]:
        """Every step record with its replica (in start order, ties by replica), the requests on the cluster's
        clock, the routing decisions and the KV transfers: `servesim trace --json` on a cluster."""
        from dataclasses import asdict

        from servesim.export.json_records import result_to_dict, step_to_dict, timeline_to_dict

        names = self.names
        steps = sorted(((s.start_time, j, s) for j, res in enumerate(self.replicas) for s in res.steps),
                       key=lambda x: x[:2])
        base = result_to_dict(self.cluster)  # (its own steps are none: they are the replicas')
        return {**base, "router": self.router,
                "replicas": [{"replica": n, "role": r} for n, r in zip(names, self.roles)],
                "steps": [{"replica": names[j], **step_to_dict(s)} for _, j, s in steps],
                "requests": [{**timeline_to_dict(t), "replica": names[j] if j >= 0 else None}
                             for t, j in zip(self.cluster.requests, self.placement)],
                "routes": [{"request_id": r.request_id, "time": r.time, "replica": names[r.replica],
                            "candidates": [names[k] for k in r.candidates], "scores": list(r.scores),
                            "reported": [asdict(s) for s in r.states],
                            "prefix": None if r.prefix is None else list(r.prefix)} for r in self.routes],
                "kv_transfers": [asdict(t) for t in self.transfers]}

    def to_json(self) -> dict[str, object]:
        """The result file's cluster part: the router, every replica's row, the KV link's; `num_prompts` and
        `num_steps` (all replicas' steps) as a single engine's result file has them."""
        steps = sum(len(r.step_log) if r.step_log is not None else len(r.steps) for r in self.replicas)
        return {"router": self.router, "num_prompts": len(self.cluster.requests), "num_steps": steps,
                "num_replicas": len(self.replicas), "replicas": self.replica_rows(), **self.transfer_summary()}


def cluster_timelines(requests, states, decode_states, placed, clocks: list[TokenClock], rejected: set[int]
                      ) -> Timelines:
    """The whole cluster's timelines, workload order, on the replicas' clocks concatenated (their steps' ends, and
    the steps nobody decoded in, which token runs step over)."""
    offsets = np.cumsum([0] + [c.ends.size for c in clocks]).tolist()
    nan = float("nan")
    ids, lengths, runs = [], [], []
    cols = {name: [] for name in (*FLOAT_COLUMNS, *INT_COLUMNS)}
    arrival, first, finish, preempted = (cols[c] for c in FLOAT_COLUMNS)
    prompt, output, priority, num_preemptions, chunks, cached, cached_from = (cols[c] for c in INT_COLUMNS)
    for i, r in enumerate(requests):
        s = states[i]
        ids.append(r.request_id)
        arrival.append(s.request.arrival_time)
        prompt.append(r.prompt_len)
        output.append(r.output_len)
        priority.append(r.priority)
        if i in rejected:
            first.append(nan), finish.append(nan), preempted.append(0.0)
            num_preemptions.append(0), chunks.append(0), cached.append(0), cached_from.append(-1), lengths.append(0)
            continue
        d = decode_states.get(i)
        last = d if d is not None else s
        first.append(nan if s.first_scheduled_time is None else s.first_scheduled_time)
        finish.append(nan if last.finish_time is None else last.finish_time)
        preempted.append(s.time_preempted + (d.time_preempted if d is not None else 0.0))
        num_preemptions.append(s.num_preemptions + (d.num_preemptions if d is not None else 0))
        chunks.append(s.num_prefill_chunks)
        cached.append(max(0, s.first_cached_tokens))
        cached_from.append(s.cached_from)
        n = len(runs)
        for state, j in ((s, placed[i][0]), (d, placed[i][1])):
            if state is None:
                continue
            o, tr = offsets[j], state.token_runs
            for k in range(0, len(tr), 2):
                runs += (tr[k] + o, tr[k + 1])
        lengths.append(len(runs) - n)
    if not clocks:
        return Timelines.from_lists(ids, cols, lengths, runs, TokenClock(np.zeros(0)))
    skip = np.concatenate([np.zeros(c.ends.size, bool) if c.skip is None else c.skip for c in clocks])
    return Timelines.from_lists(ids, cols, lengths, runs, TokenClock(np.concatenate([c.ends for c in clocks]), skip))
