"""Replicas on one simulated clock: each an unchanged servesim `Engine`, advanced in next-event order.

A replica may start a step at time `s` only once everything that can reach it at or before `s` is known:
- a request the router sends it: routing at time `a` needs every replica's state at `a`, so every replica is
  advanced to `a` first (its steps that start before `a`; its stretches stop there too, as its horizon);
- a prefill's KV landing on a decode replica, or (closed loop) a conversation's next turn released by a finish
  on another replica: these come at the end of some replica's step, after its start. So a replica that can be
  reached this way advances only up to the clocks of the replicas that can reach it (the lowest clock first,
  ties by replica index); without them (open loop, no P/D) every replica runs to the next arrival at once, its
  fast path planning the stretch up to it.
No randomness but the `random` router's seeded generator; ties by replica index, then workload order.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from heapq import heappop, heappush

from servesim.cluster.pd import Link, Transfer
from servesim.cluster.routers import ReplicaState, Router
from servesim.cost import CostModel
from servesim.engine.kv import blocks_for
from servesim.engine.loop import Engine
from servesim.engine.request import Request, RequestState
from servesim.engine.resolve import fit_to_max_model_len
from servesim.engines.config import EngineConfig

ROLES = ("both", "prefill", "decode")


MAX_REPLICAS = 4096  # replicas one cluster may have: each is an engine in this process


@dataclass(frozen=True, slots=True)
class Pool:
    """`count` identical replicas: one engine config, policy and cost model. A heterogeneous cluster is several
    pools (e.g. prefill on H100 TP2, decode on A100); `role` prefill / decode makes it disaggregated."""

    count: int = 1
    config: EngineConfig | None = None
    policy: str = "vllm"
    cost: CostModel | str = "toy"
    role: str = "both"


@dataclass(frozen=True, slots=True)
class Route:
    """One routing decision: the replica chosen, every candidate's score, what the router saw."""

    request_id: str
    time: float
    replica: int  # index in the cluster
    candidates: tuple[int, ...]  # the replicas it chose among (a pool)
    scores: tuple[float, ...]  # one per candidate
    states: tuple[ReplicaState, ...]  # what each candidate reported (as of `time - router delay`); () for a
    # router that reads none (round-robin, random)
    prefix: tuple[float, ...] | None  # the share of the prompt each candidate's prefix cache holds


class Replica(Engine):
    """An `Engine` that starts empty and is given its requests (`inject`); its next event is never past its
    `horizon`, the cluster's next event, so its fast path's stretches stop there."""

    __slots__ = ("horizon", "index", "role", "releases", "done_mark")

    def add_arrivals(self) -> None:
        self.done_mark = self.n_done  # finishes since: those of the iteration about to run (its last step's)
        Engine.add_arrivals(self)
        h = self.horizon
        if h < math.inf and (self.next_arrival is None or h < self.next_arrival):
            self.next_arrival = h

    @property
    def busy(self) -> bool:
        # (an overlap scheduler's last result still to process is work: the finishes it reports, as the engine's
        # own loop runs on for it)
        return self.n_done < self.num_served or bool(self.release) or self.sched.unprocessed

    @property
    def next_start(self) -> float:
        """The earliest its next step can start: now, or (nothing to run) when its next request arrives."""
        if self.sched.has_work() or self.release or self.sched.unprocessed:
            return self.now
        return max(self.now, self.pending[0][0]) if self.pending else math.inf

    def report(self, t: float | None = None) -> ReplicaState:
        """What it reports at `t`. The replica has run every step that starts before `t`; when the last one is
        still in flight at `t` (it ends after), its requests are still running and hold their blocks: the
        requests it finishes count as running, and KV use is that step's, after its schedule."""
        usable, free = self.kv.usable_blocks, self.kv.free_blocks
        running = len(self.running)
        if t is not None and self.now > t and len(self.log):
            running += self.n_done - getattr(self, "done_mark", self.n_done)
            if free is not None:
                free = self.log.last_free_after_schedule()
        use = 0.0 if usable is None else 1.0 - free / usable
        return ReplicaState(self.num_waiting() + len(self.pending), running, use)

    def prefix_share(self, s: RequestState) -> float:
        return self.kv.prefix_hit_tokens(s) / s.request.prompt_len


class Cluster:
    """The replicas, the routers (one per pool the router picks from), the links (P/D), and the clock."""

    def __init__(self, replicas: list[Replica], routers: dict[str, Router], requests: list[Request],
                 router_delay: float, links: list[Link] | None, max_concurrency: int | None = None,
                 front: tuple[float, float] = (0.0, 0.0)) -> None:
        self.replicas, self.routers, self.delay, self.links = replicas, routers, router_delay, links
        self.front = front  # the path outside the engine core: (seconds a request, a prompt token) to the router
        # under a cap the arrivals are the client's sends: each reaches the router its front end's time after it
        # took its slot (the cap counts sends, in the client's order)
        self.at_client = max_concurrency is not None and front != (0.0, 0.0)
        self.pools = {role: [r.index for r in replicas if r.role == role] for role in ROLES}
        self.disaggregated = links is not None
        self.states = [RequestState(r, i) for i, r in enumerate(requests)]
        self.decode_states: dict[int, RequestState] = {}  # P/D: the decode side's state, by workload index
        self.placed: list[tuple[int, int]] = [(-1, -1)] * len(requests)  # (replica, decode replica) per request
        index = {r.request_id: i for i, r in enumerate(requests)}
        self.followers: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            if r.after is not None:
                self.followers.setdefault(index[r.after], []).append(i)
        first = [i for i, r in enumerate(requests) if r.after is None]
        self.arrivals = [(requests[i].arrival_time, i) for i in first]  # already in (time, index) order
        self.arrivals.sort()
        self.next = 0
        self.pending: list[tuple[float, int]] = []  # followers released: (arrival, index), a heap
        self.routes: list[Route] = []
        self.transfers: list[Transfer] = []
        self.rejected: list[int] = []
        self.reports: list[list[tuple[float, ReplicaState]]] = [[] for _ in replicas]
        # the benchmark client's cap on requests in flight over the whole cluster (`vllm bench serve
        # --max-concurrency`): an arrival past it waits at the client, first come first served, and is sent when a
        # request finishes on any replica
        self.max_concurrency, self.in_flight = max_concurrency, 0
        self.backlog: deque[int] = deque()
        self.sent: set[int] = set()  # released from the backlog: their slot is taken
        # slots freed by finishes that came from a step run past the next routing (a request due before the finish
        # must find the slot taken): applied at their time, (finish time, replica), a heap
        self.frees: list[tuple[float, int]] = []
        # who can reach whom between routing events: closed loop: everyone everyone; P/D: prefill -> decode
        closed = bool(self.followers) or max_concurrency is not None
        self.sources = [[q.index for q in replicas if q is not r and (closed or (self.disaggregated
                         and r.role == "decode" and q.role == "prefill"))] for r in replicas]
        self.lockstep = any(self.sources)
        self.clocks: list[tuple[float, int]] = []  # open loop: (next start, replica) of the busy replicas, a heap
        self.starts = [math.inf] * len(replicas)  # each replica's live entry in `clocks`
        for r in replicas:
            r.sched.on_finish = self.prefilled if r.role == "prefill" else self.finished

    # -- the clock ----------------------------------------------------------------------------------------------
    def run(self) -> None:
        if (not self.lockstep and not self.followers and self.max_concurrency is None
                and not any(r.needs_state for r in self.routers.values())):
            return self.run_static()
        while True:
            b = self.advance_all(self.next_routing())
            if b == math.inf:
                return
            self.route_due(b)

    def run_static(self) -> None:
        """Open loop behind a router that reads no state (round-robin, random): where each request goes does not
        depend on the replicas, so each is routed at its arrival up front and every replica then runs alone to
        the end, its fast path's stretches cut only at its own arrivals (what it would do if stopped at every
        arrival to the cluster, without the stops)."""
        for t, i in self.arrivals:
            self.route(self.states[i], t)
        self.next = len(self.arrivals)
        for r in self.replicas:
            self.advance(r, math.inf)

    def next_routing(self) -> float:
        t = self.arrivals[self.next][0] if self.next < len(self.arrivals) else math.inf
        if self.frees:
            t = min(t, self.frees[0][0])
        return min(t, self.pending[0][0]) if self.pending else t

    def advance_all(self, b: float) -> float:
        """Every replica's steps that start before `b`, the next routing (brought forward when a finish releases
        a turn before it); returns it."""
        replicas = self.replicas
        if not self.lockstep:
            self.advance_due(b)
            return min(b, self.next_routing())  # (a finish may have released a request before `b`: one replica)
        while True:
            b = min(b, self.next_routing())
            busy = [(r.next_start, r.index) for r in replicas if r.busy]
            start, i = min(busy, default=(math.inf, -1))
            if start >= b:
                return b
            peers = [replicas[q].next_start for q in self.sources[i] if replicas[q].busy]
            self.advance(replicas[i], min(b, math.nextafter(min(peers), math.inf)) if peers else b)

    def advance_due(self, b: float) -> None:
        """Open loop, no P/D: only the replicas whose next step starts before `b` (a heap of their next starts;
        an entry is stale when the replica's start has moved since, `self.starts`). A replica left alone is as
        it would be after `run(until=b)`: nothing of it starts before `b`."""
        heap, starts, replicas = self.clocks, self.starts, self.replicas
        due = []
        while heap and heap[0][0] < b:
            start, i = heappop(heap)
            if starts[i] == start:
                due.append(i)
        for i in due:  # once each: one stopped early (a finish released a turn before `b`) waits for its routing
            r = replicas[i]
            self.advance(r, b)
            starts[i] = nxt = r.next_start if r.busy else math.inf
            if nxt < math.inf:
                heappush(heap, (nxt, i))

    def queue_start(self, r: Replica) -> None:
        """`r` was handed a request: its next start may have come forward."""
        nxt = r.next_start
        if nxt < self.starts[r.index]:
            self.starts[r.index] = nxt
            heappush(self.clocks, (nxt, r.index))

    def advance(self, r: Replica, until: float) -> None:
        """Run `r` up to `until`, giving back (P/D) the blocks of transfers that have landed as its clock passes
        them."""
        while r.busy:
            t = r.releases[0][0] if r.releases else math.inf
            u = min(until, t)
            r.horizon = u
            r.run(until=u)
            if t > until or r.now < t:
                break
            give_back(r, t)
        if r.releases:
            give_back(r, until)  # nothing of it runs before `until`: they are back by then

    # -- routing ------------------------------------------------------------------------------------------------
    def route_due(self, b: float) -> None:
        arrivals, requests = self.arrivals, self.states
        due = []
        while self.next < len(arrivals) and arrivals[self.next][0] <= b:
            due.append(arrivals[self.next])
            self.next += 1
        while self.pending and self.pending[0][0] <= b:
            due.append(heappop(self.pending))
        for r in self.replicas:
            if r.releases:
                give_back(r, b)
        if self.delay:
            for r in self.replicas:
                self.reports[r.index].append((b, r.report(b)))
        frees = []
        while self.frees and self.frees[0][0] <= b:
            frees.append(heappop(self.frees))
        for t, i in sorted(due):
            while frees and frees[0][0] <= t:  # (a slot freed at the same time is free for it)
                f, j = frees.pop(0)
                self.release_slot(f, self.replicas[j])
            if self.max_concurrency is not None and i not in self.sent:
                if self.in_flight >= self.max_concurrency:
                    self.backlog.append(i)
                    continue
                self.in_flight += 1
                if self.at_client:  # sent now, at the router its front end's time later
                    r = requests[i].request
                    reach = r.arrival_time + self.reach(r)
                    requests[i].request = replace(r, arrival_time=reach)
                    self.sent.add(i)
                    heappush(self.pending, (reach, i))
                    continue
            self.route(requests[i], b)
        for f, j in frees:
            self.release_slot(f, self.replicas[j])

    def seen(self, j: int, t: float) -> ReplicaState:
        """Replica j's state as the router sees it at `t`: now (the requests just sent to it included), or with a
        delay its report at the last routing `delay` or more ago."""
        if not self.delay:
            return self.replicas[j].report(t)
        history = self.reports[j]
        cutoff = t - self.delay
        while len(history) > 1 and history[1][0] <= cutoff:
            history.pop(0)
        return history[0][1] if history[0][0] <= cutoff else ReplicaState(0, 0, 0.0)

    def pick(self, role: str, s: RequestState, t: float) -> int:
        pool, router = self.pools[role], self.routers[role]
        states = [self.seen(j, t) for j in pool] if router.needs_state else []
        prefix = [self.replicas[j].prefix_share(s) for j in pool] if router.needs_prefix else None
        k, scores = router.pick(states or [None] * len(pool), prefix)  # (round-robin, random: only how many)
        self.routes.append(Route(s.request_id, t, pool[k], tuple(pool), scores, tuple(states),
                                 None if prefix is None else tuple(prefix)))
        return pool[k]

    def route(self, s: RequestState, t: float) -> None:
        r = s.request
        if not self.disaggregated:
            j = self.pick("both", s, t)
            r = fit_to_max_model_len(r, self.replicas[j].config.max_model_len)
            if r is None:
                return self.reject(s.index)
            s.request = r  # (its output cut at max_model_len, sent without max_tokens)
            self.placed[s.index] = (j, -1)
            self.replicas[j].inject(s)
            if not self.lockstep:
                self.queue_start(self.replicas[j])
            return
        p, d = self.pick("prefill", s, t), self.pick("decode", s, t)
        r = fit_to_max_model_len(r, min(self.replicas[x].config.max_model_len for x in (p, d)))
        if r is None:
            return self.reject(s.index)
        self.placed[s.index] = (p, d)
        if r.output_len > 1:
            self.decode_states[s.index] = RequestState(r, s.index)
        s.request = replace(r, output_len=1)  # the prefill side's part: the prompt and its first token
        self.replicas[p].inject(s)

    def reject(self, i: int) -> None:
        """Longer than the chosen replica's max_model_len: it fails on arrival, and so do its session's turns (its
        client slot, under a cap, goes to the next at once)."""
        self.rejected.append(i)
        if self.max_concurrency is not None:
            self.release_slot(self.states[i].request.arrival_time, None)
        for f in self.followers.pop(i, ()):
            self.reject(f)

    def release_slot(self, t: float, here: Replica | None) -> None:
        """A request left the client's count at `t`: the first waiting at the client is sent then (not before its
        own arrival), routed at that time (`here`, the replica it finished on, stops there)."""
        self.in_flight -= 1
        if not self.backlog:
            return
        f = self.backlog.popleft()
        r = self.states[f].request
        # a closed loop's user thinks before sending it (`workloads.ClosedLoop`), as the engine's own cap does
        reach = self.reach(r)  # (its arrival a send under `at_client`)
        t = max(r.arrival_time + (reach if self.at_client else 0.0), t + (r.think_time if r.after is None else 0.0)
                + reach)
        self.states[f].request = replace(r, arrival_time=t)
        self.sent.add(f)
        self.in_flight += 1
        heappush(self.pending, (t, f))
        if here is not None:
            here.until, here.horizon = min(here.until, t), min(here.horizon, t)
            if here.next_arrival is None or t < here.next_arrival:
                here.next_arrival = t

    def reach(self, r: Request) -> float:
        """Seconds from `r`'s send to the router through the front end (`servesim.engine.frontend`)."""
        return self.front[0] + self.front[1] * r.prompt_len

    # -- what replicas tell the cluster (their schedulers' on_finish) --------------------------------------------
    def finished(self, s: RequestState, side: int | None = None) -> None:
        """A request's last token: release the turns sent after it (closed loop). `side`: which of its replicas
        finished it (0: its replica or prefill replica, 1: its decode replica)."""
        here = self.replicas[self.placed[s.index][int(self.disaggregated) if side is None else side]]
        for f in self.followers.pop(s.index, ()):
            r = self.states[f].request  # (under `at_client` its send: the cap takes it then, the front end after)
            t = max(r.arrival_time, s.finish_time + r.think_time + (0.0 if self.at_client else self.reach(r)))
            self.states[f].request = replace(r, arrival_time=t)
            heappush(self.pending, (t, f))
            # its replica stops there: the turn is routed at `t`, which may be before the replica's next event
            here.until, here.horizon = min(here.until, t), min(here.horizon, t)
            if here.next_arrival is None or t < here.next_arrival:
                here.next_arrival = t
        if self.max_concurrency is not None:
            f = s.finish_time
            if self.next_routing() < f:  # requests due before it are not routed yet: the slot frees after them
                heappush(self.frees, (f, here.index))
                here.until, here.horizon = min(here.until, f), min(here.horizon, f)
            else:
                self.release_slot(f, here)

    def prefilled(self, s: RequestState) -> None:
        """P/D: the prompt's first token on the prefill side; its KV leaves for the decode replica, whose blocks
        the prefill replica keeps until it lands."""
        ds = self.decode_states.get(s.index)
        if ds is None:  # a one-token answer is done on the prefill side
            return self.finished(s, 0)
        p, d = self.placed[s.index]
        src, dst = self.replicas[p], self.replicas[d]
        nbytes = s.request.prompt_len * src.config.kv_bytes_per_token
        start, land = self.links[p].send(s.finish_time, nbytes)
        self.transfers.append(Transfer(s.request_id, p, d, nbytes, s.finish_time, start, land))
        if src.kv.free_blocks is not None:
            held = min(blocks_for(s.request.prompt_len, src.config.block_size), src.kv.free_blocks)
            src.kv.free_blocks -= held
            heappush(src.releases, (land, held))
        ds.request = replace(ds.request, arrival_time=land)
        ds.num_computed_tokens, ds.num_output_tokens = s.request.prompt_len, 1
        ds.sampled_since_admission = True  # its next step feeds the first token back: a decode
        dst.inject(ds)


def give_back(r: Replica, t: float) -> None:
    """P/D: the blocks of the transfers landed by `t` come back to the prefill replica."""
    while r.releases and r.releases[0][0] <= t:
        _, blocks = heappop(r.releases)
        r.kv.free_blocks += blocks


def make_replica(index: int, role: str, cfg: EngineConfig, policy: str, cost: CostModel, record: str,
                 fast: bool, check_invariants: bool, hashed: bool) -> Replica:
    r = Replica([], cfg, policy, cost, record, None, None, fast, check_invariants, hashed=hashed)
    r.horizon, r.index, r.role, r.releases = math.inf, index, role, []
    return r
