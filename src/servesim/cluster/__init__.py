"""Clusters: replicas behind a router, and prefill/decode disaggregation (`simulate_cluster`).

`replicas` (the shared clock, `Pool`), `routers`, `pd` (the KV link), `result` (`ClusterResult`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from servesim.cluster.pd import Link, check_link
from servesim.cluster.replicas import MAX_REPLICAS, ROLES, Cluster, Pool, make_replica
from servesim.cluster.result import ClusterResult, cluster_timelines
from servesim.cluster.routers import ROUTERS, make_router
from servesim.cost import CostModel, get_cost_model
from servesim.cost.speculative import with_drafter
from servesim.engine.loop import RECORD_LEVELS
from servesim.engine.request import Request
from servesim.engine.resolve import resolve_config
from servesim.engine.result import SimResult
from servesim.engines.config import EngineConfig
from servesim.engines.registry import engines
from servesim.errors import ConfigError

__all__ = ["ROUTERS", "ClusterResult", "Pool", "simulate_cluster"]

DEFAULT_KV_BANDWIDTH = 50e9  # bytes/s: a 400 Gb/s RDMA NIC (ConnectX-7), the link llm-d's P/D guides assume
DEFAULT_KV_LATENCY = 0.0


def simulate_cluster(
    requests: Sequence[Request],
    pools: Sequence[Pool] | None = None,
    *,
    num_replicas: int = 1,
    config: EngineConfig | None = None,
    policy: str = "vllm",
    cost: CostModel | str = "toy",
    router: str = "round-robin",
    seed: int = 0,
    router_delay: float = 0.0,
    kv_transfer_bandwidth: float = DEFAULT_KV_BANDWIDTH,
    kv_transfer_latency: float = DEFAULT_KV_LATENCY,
    record: str = "full",
    fast: bool = True,
    check_invariants: bool = False,
) -> ClusterResult:
    """Run `requests` on a cluster: `num_replicas` copies of one engine (`config`, `policy`, `cost`), or the
    `pools` given (heterogeneous replicas; pools of role "prefill" and "decode" make it disaggregated). `router`
    picks each request's replica at its arrival from what the replicas report `router_delay` seconds earlier
    (`servesim.cluster.routers`). P/D: the KV moves over `kv_transfer_bandwidth` bytes/s per prefill replica
    with `kv_transfer_latency` seconds (`servesim.cluster.pd`)."""
    if record not in RECORD_LEVELS:
        raise ConfigError(f"unknown record level {record!r}; valid: {', '.join(RECORD_LEVELS)}")
    if pools is None:
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise ConfigError(f"--num-replicas {num_replicas!r}: expected an integer >= 1")
        pools = [Pool(num_replicas, config, policy, cost)]
    if not isinstance(router_delay, int | float) or not 0 <= router_delay < float("inf"):
        raise ConfigError(f"--router-delay-ms: got {router_delay!r} s; expected a finite number >= 0")
    roles = {p.role for p in pools}
    caps = {p.config.max_concurrency if p.config is not None else None for p in pools}
    if len(caps) > 1:
        raise ConfigError(f"max_concurrency {sorted(caps, key=str)}: the client's cap spans the cluster; give every "
                          "pool the same")
    max_concurrency = caps.pop()
    fronts = {(p.config.frontend_latency, p.config.frontend_latency_per_token) if p.config is not None
              else (0.0, 0.0) for p in pools}
    if len(fronts) > 1:
        raise ConfigError(f"frontend_latency {sorted(fronts)}: the path outside the engine core is the client's "
                          "way to the router, one for the cluster; give every pool the same")
    front = fronts.pop()
    if any(p.config is not None and p.config.client_sends_in_order for p in pools):
        raise ConfigError("client_sends_in_order: AIPerf's paced sends under a cap are not modelled on a cluster "
                          "yet; drop it")
    for p in pools:
        if p.role not in ROLES:
            raise ConfigError(f"pool role {p.role!r}: expected one of {', '.join(ROLES)}")
        if isinstance(p.count, bool) or not isinstance(p.count, int) or p.count < 1:
            raise ConfigError(f"pool of {p.role} replicas: count {p.count!r}; expected an integer >= 1")
    if sum(p.count for p in pools) > MAX_REPLICAS:
        raise ConfigError(f"{sum(p.count for p in pools):,} replicas: servesim simulates at most {MAX_REPLICAS:,} "
                          "(each is an engine in this process); simulate one replica at its share of the rate")
    disaggregated = roles & {"prefill", "decode"}
    if disaggregated and roles != {"prefill", "decode"}:
        raise ConfigError("a disaggregated cluster has prefill and decode pools only "
                          f"(got {', '.join(sorted(roles))})")
    sent = list(requests)
    # each request reaches the router the front end's time after its send (`servesim.engine.frontend`); the
    # replicas' engines run without one (it is before them), and every timeline counts from the send again
    requests = [replace(r, arrival_time=r.arrival_time + front[0] + front[1] * r.prompt_len) for r in sent] \
        if front != (0.0, 0.0) and max_concurrency is None else sent  # (under a cap: at each send, `Cluster`)
    hashed = any(r.hash_ids for r in requests)
    replicas = []
    decode_policies = [name for e in engines() for name in e.pd_decode]
    for p in pools:
        if p.role == "decode" and p.policy not in decode_policies:  # (before its config is resolved for prompts)
            raise ConfigError(f"a decode pool runs the {' or '.join(decode_policies)} policy (it admits remotely "
                              f"prefilled requests), got {p.policy!r}")
        cm = with_drafter(get_cost_model(p.cost) if isinstance(p.cost, str) else p.cost, p.config)
        # the client's cap on requests in flight spans the cluster (`Cluster`), not each replica's engine
        seen = decode_side(requests) if p.role == "decode" else requests
        cfg = replace(resolve_config(p.config or EngineConfig(), p.policy, seen, cm), max_concurrency=None,
                      frontend_latency=0.0, frontend_latency_per_token=0.0)
        if disaggregated and hashed and cfg.enable_prefix_caching:
            raise ConfigError("prefix caching on a disaggregated cluster is not modelled yet: set "
                              "enable_prefix_caching=false (--no-prefix-caching)")
        on = fast and not cfg.async_scheduling and not check_invariants
        for _ in range(p.count):
            replicas.append(make_replica(len(replicas), p.role, cfg, p.policy, cm, record, on, check_invariants,
                                         hashed))
    links = None
    if disaggregated:
        check_link(kv_transfer_bandwidth, kv_transfer_latency)
        links = [Link(kv_transfer_bandwidth, kv_transfer_latency) for _ in replicas]
    routers = {role: make_router(router, seed) for role in ROLES}
    cluster = Cluster(replicas, routers, requests, router_delay, links, max_concurrency, front)
    cluster.run()
    result = _result(cluster, requests, record, routers["both"].name)
    return _from_the_send(result, front) if front != (0.0, 0.0) else result


def decode_side(requests: list[Request]) -> list[Request]:
    """The requests as a decode pool's engine is checked for them: it runs no prompt (its prompts' KV comes
    computed), every token past the first a decode; their lengths, and so the KV they need, unchanged (an engine
    that refuses a prompt over its batch's token budget, TensorRT-LLM's with chunking off, admits these)."""
    return [replace(r, prompt_len=1, output_len=r.prompt_len + r.output_len - 1, hash_ids=None)
            for r in requests]


def _result(cluster: Cluster, requests: list[Request], record: str, router: str) -> ClusterResult:
    replicas = cluster.replicas
    local = [sorted(s.index for s in r.states) for r in replicas]
    results = [_local(r.result(), rows) for r, rows in zip(replicas, local)]
    clocks = [res.timelines.clock for res in results]
    rejected = set(cluster.rejected)
    timelines = cluster_timelines(requests, cluster.states, cluster.decode_states, cluster.placed, clocks, rejected)
    first = results[0]
    merged = SimResult(first.policy, first.cost_model, first.config, (), timelines,
                       tuple(p for res in results for p in res.preemptions), None, record,
                       tuple(requests[i].request_id for i in sorted(rejected)))
    return ClusterResult(tuple(results), tuple(r.role for r in replicas), router, tuple(cluster.routes), merged,
                         tuple(p for p, _ in cluster.placed), tuple(cluster.transfers),
                         tuple(link.busy for link, r in zip(cluster.links or (), replicas) if r.role == "prefill"))


def _from_the_send(result: ClusterResult, front: tuple[float, float]) -> ClusterResult:
    """Every timeline's arrival back at the client's send (the front end's time before it reached the router);
    each result's config carries the front end, so that its queue times count at the engine again."""
    def back(res: SimResult) -> SimResult:
        t = res.timelines
        t.arrival_time = t.arrival_time - (front[0] + front[1] * t.prompt_len)
        return replace(res, config=replace(res.config, frontend_latency=front[0],
                                           frontend_latency_per_token=front[1]))

    return replace(result, cluster=back(result.cluster), replicas=tuple(back(r) for r in result.replicas))


def _local(result: SimResult, rows: list[int]) -> SimResult:
    """A replica's timelines name the request whose blocks served a prefix hit by its workload index: make it
    the replica's own row."""
    import numpy as np

    t = result.timelines
    if len(t) and (t.cached_from >= 0).any():
        have = t.cached_from >= 0
        t.cached_from[have] = np.searchsorted(np.array(rows), t.cached_from[have])
    return result
