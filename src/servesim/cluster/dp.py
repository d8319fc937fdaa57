"""Data-parallel ranks: vLLM's `--data-parallel-size` engine ranks and SGLang's attention-DP ranks, each an engine
with its own scheduler and KV pool, fed by the engine's DP load balancing (vLLM's `vllm-dp`, SGLang's round
robin, `servesim.cluster.routers`).

A dense model's ranks are independent replicas (vLLM's DP ranks of a dense model never synchronise): the cluster's
clock runs them. A MoE model's ranks step together (`DpGroup`): every MoE layer gathers (or dispatches) the
tokens of all ranks, so each step starts on every rank at once, a rank with nothing to run takes a dummy batch
(vLLM's `execute_dummy_batch`, SGLang's idle batch), and the step lasts as long as the cost model's
`dp_step_time` says for the ranks' shapes together: the slowest rank's, every rank's GEMMs at the largest rank's
token count. Requests are routed at the first step boundary at or after their arrival (their arrival time kept),
from the ranks' state there. The fast path is off for a lockstep group: every step goes through each rank's
`schedule()`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from servesim.cluster.replicas import Cluster, make_replica
from servesim.cluster.result import ClusterResult
from servesim.cluster.routers import make_router
from servesim.cost import CostModel, StepShape
from servesim.engine.loop import step_shape
from servesim.engine.request import Request
from servesim.engine.resolve import resolve_config
from servesim.engine.result import SimResult
from servesim.engines.config import EngineConfig
from servesim.engines.registry import engine_for
from servesim.errors import ConfigError


class _Shared:
    """A rank's cost model inside a lockstep group: the group's step duration, set before each step."""

    __slots__ = ("name", "value")

    def __init__(self, name: str) -> None:
        self.name, self.value = name, 0.0

    def step_time(self, shape: StepShape) -> float:
        return self.value


class DpGroup(Cluster):
    """The ranks of one MoE deployment on one clock, stepping together."""

    def run(self) -> None:
        ranks, shared = self.replicas, self.shared
        clock = 0.0
        while True:
            self.route_due(clock)
            outs = []
            for r in ranks:
                r.now, r.horizon, r.until = clock, math.inf, math.inf  # (the cluster's stops: none in lockstep)
                r.add_arrivals()
                r.sched.step_index = r.step
                outs.append(r.sched.schedule(0))
            busy = [bool(o.scheduled or o.preempted or r.release or r.sched.in_flight) and not o.processed_only
                    for r, o in zip(ranks, outs)]
            if not any(busy):
                if any(r.sched.unprocessed for r in ranks):
                    continue  # (SGLang's overlap loop processed a last result: no forward, no time)
                nxt = min([self.next_routing()] + [r.next_arrival for r in ranks if r.next_arrival is not None])
                if nxt == math.inf:
                    return
                clock = max(clock, nxt)
                continue
            shapes = [step_shape(list(o.scheduled.items()))[0] if b else StepShape((), (), (), 0)
                      for o, b in zip(outs, busy)]
            shared.value = self.cost.dp_step_time(shapes)
            end = clock + shared.value
            for r, o, b in zip(ranks, outs, busy):
                if b:
                    r.run_step(o, 0)
                r.now = end  # (a rank that swapped ends with the group: its swap time is not stepped together)
            clock = end


def simulate_dp(requests: Sequence[Request], config: EngineConfig, policy: str, cost: CostModel,
                record: str = "full", check_invariants: bool = False, fast: bool = True) -> SimResult:
    """`requests` on the layout's data-parallel ranks (`cost.layout.dp`), under `config` (each rank's engine:
    its own KV pool and budget; `max_concurrency`, the client's cap, spans the ranks). The ranks' results merged
    as one deployment's (`ClusterResult.cluster`: timelines and preemptions, no step log)."""
    return replace(run_dp(requests, config, policy, cost, record, check_invariants, fast).cluster,
                   cost_model=cost.name)


# how each engine spreads requests over its ranks: vLLM's DP load balancing; TensorRT-LLM's attention DP gives a
# new request to a rank with the fewest active ones (its `_balance_requests_across_ranks` heap orders by active
# tokens, then requests: the same for identical requests, least-loaded here); SGLang's DP controller round robin
DP_ROUTERS = {"vllm": "vllm-dp", "trtllm": "least-loaded"}


def run_dp(requests: Sequence[Request], config: EngineConfig, policy: str, cost: CostModel, record: str = "full",
           check_invariants: bool = False, fast: bool = True) -> ClusterResult:
    """As `simulate_dp`, each rank's result apart (its steps, the routes)."""
    from servesim.cluster import _from_the_send, _result

    dp, lockstep = cost.layout.dp, bool(cost.model.num_local_experts)
    engine = engine_for(policy).name
    if config.client_sends_in_order:
        raise ConfigError("client_sends_in_order: AIPerf's paced sends are not modelled over data-parallel ranks "
                          "yet; drop it")
    front = (config.frontend_latency, config.frontend_latency_per_token)
    sent = list(requests)
    requests = [replace(r, arrival_time=r.arrival_time + front[0] + front[1] * r.prompt_len) for r in sent] \
        if front != (0.0, 0.0) else sent
    cfg = replace(resolve_config(config, policy, requests, cost), max_concurrency=None, frontend_latency=0.0,
                  frontend_latency_per_token=0.0)
    hashed = any(r.hash_ids for r in requests)
    rank_cost = _Shared(cost.name) if lockstep else cost
    fast = fast and not lockstep and not cfg.async_scheduling and not check_invariants
    ranks = [make_replica(i, "both", cfg, policy, rank_cost, record, fast, check_invariants, hashed)
             for i in range(dp)]
    router = make_router(DP_ROUTERS.get(engine, "round-robin"))
    cls = DpGroup if lockstep else Cluster
    group = cls(ranks, {"both": router, "prefill": router, "decode": router}, requests, 0.0, None,
                config.max_concurrency, front)
    if lockstep:
        group.cost, group.shared = cost, rank_cost
    group.run()
    result = _result(group, requests, record, router.name)
    return _from_the_send(result, front) if front != (0.0, 0.0) else result
