"""Routers: which replica a request goes to, from the state each replica reports.

A router sees what a real one could (llm-d's endpoint picker, vLLM's router, Dynamo's KV router): per replica the
requests waiting and running, the KV blocks in use, and (for prefix affinity) how much of a prompt its prefix
cache holds. Every decision comes back with one score per replica, so `explain` can say why.

- `round-robin`: replicas in turn.
- `random`: uniform, from a seeded generator.
- `least-loaded`: fewest waiting + running requests (ties: the lowest index).
- `least-kv`: the lowest KV use (blocks in use / usable blocks).
- `prefix-aware`: the longest cached prefix of the prompt, among replicas whose load is within `load_cap` of the
  least loaded (so affinity cannot pile a hot prefix onto one replica); then least-loaded.
- `vllm-dp`: vLLM 0.33's data-parallel load balancing (`vllm/v1/engine/core_client.py`,
  `DPLBAsyncMPClient.get_core_engine_for_request`): the lowest requests in flight (waiting + running), plus
  6 x waiting x (KV use - 0.5) above half use; the scan starts one rank further each request (ties: the first).
- `weighted:prefix=3,queue=2,kv=2`: llm-d's scorers, each in [0, 1] (1 best), summed with the weights;
  the highest total wins (ties: the lowest index). prefix = cached prefix share of the prompt, queue = 1 -
  load / the most loaded's load, kv = 1 - KV use.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from servesim.errors import ConfigError

ROUTERS = {
    "round-robin": "replicas in turn",
    "random": "uniformly at random (seeded by --seed)",
    "least-loaded": "fewest waiting + running requests",
    "least-kv": "lowest KV cache use",
    "prefix-aware": "longest cached prefix of the prompt, within a load cap of the least loaded",
    "vllm-dp": "vLLM's DP load balancing: fewest in flight, waiting penalised under KV pressure, rotating ties",
    "weighted:prefix=3,queue=2,kv=2": "llm-d style: a weighted sum of [0, 1] scorers (prefix, queue, kv)",
}
SCORERS = ("prefix", "queue", "kv")
LOAD_CAP = 8  # prefix-aware: a replica may be this many requests above the least loaded and still win on prefix


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """What one replica reports: requests waiting (incl. swapped) and running, KV use in [0, 1]."""

    waiting: int
    running: int
    kv_use: float

    @property
    def load(self) -> int:
        return self.waiting + self.running


class Router:
    """Picks a replica; `scores` says how each replica scored (higher is better unless `lower_wins`)."""

    name = ""
    needs_state = True  # reads what the replicas report (round-robin and random do not: the cluster then need not
    # stop every replica at each arrival to ask, `Cluster.run`)
    needs_prefix = False  # asks the replicas' prefix caches how much of the prompt they hold
    lower_wins = False

    def pick(self, states: list[ReplicaState], prefix: list[float] | None) -> tuple[int, tuple[float, ...]]:
        raise NotImplementedError


class RoundRobin(Router):
    name = "round-robin"
    needs_state = False

    def __init__(self) -> None:
        self.next = 0

    def pick(self, states, prefix):
        i = self.next % len(states)
        self.next = i + 1
        return i, tuple(1.0 if j == i else 0.0 for j in range(len(states)))


class Random(Router):
    name = "random"
    needs_state = False

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def pick(self, states, prefix):
        i = self.rng.randrange(len(states))
        return i, tuple(1.0 if j == i else 0.0 for j in range(len(states)))


class LeastLoaded(Router):
    name = "least-loaded"
    lower_wins = True

    def pick(self, states, prefix):
        scores = tuple(float(s.load) for s in states)
        return scores.index(min(scores)), scores


class LeastKV(Router):
    name = "least-kv"
    lower_wins = True

    def pick(self, states, prefix):
        scores = tuple(s.kv_use for s in states)
        return scores.index(min(scores)), scores


class PrefixAware(Router):
    name = "prefix-aware"
    needs_prefix = True

    def __init__(self, load_cap: int = LOAD_CAP) -> None:
        self.load_cap = load_cap

    def pick(self, states, prefix):
        least = min(s.load for s in states)
        scores = tuple(p if s.load <= least + self.load_cap else -1.0 for s, p in zip(states, prefix))
        best = max(scores)
        # among the best prefixes, the least loaded (then the lowest index)
        i = min((s.load, j) for j, (s, p) in enumerate(zip(states, scores)) if p == best)[1]
        return i, scores


class Weighted(Router):
    name = "weighted"

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = weights
        self.needs_prefix = weights.get("prefix", 0) > 0
        self.name = "weighted:" + ",".join(f"{k}={v:g}" for k, v in weights.items())

    def pick(self, states, prefix):
        top = max(s.load for s in states) or 1
        w = self.weights
        scores = tuple(w.get("prefix", 0) * (prefix[j] if prefix else 0.0) + w.get("queue", 0) * (1 - s.load / top)
                       + w.get("kv", 0) * (1 - s.kv_use) for j, s in enumerate(states))
        return scores.index(max(scores)), scores


class VllmDp(Router):
    """vLLM's DP load balancer; the scores are its (lower wins)."""

    name = "vllm-dp"
    lower_wins = True

    def __init__(self) -> None:
        self.start = 0

    def pick(self, states, prefix):
        scores = tuple(s.load + (6.0 * s.waiting * max(0.0, s.kv_use - 0.5) if s.waiting else 0.0) for s in states)
        n, best = len(states), self.start % len(states)
        for i in range(1, n):
            j = (self.start + i) % n
            if scores[j] < scores[best]:
                best = j
        self.start = (self.start + 1) % n
        return best, scores


def make_router(spec: str, seed: int = 0) -> Router:
    """A router by name (`servesim routers` lists them); `weighted:` takes NAME=WEIGHT pairs."""
    if spec == "round-robin":
        return RoundRobin()
    if spec == "random":
        return Random(seed)
    if spec == "least-loaded":
        return LeastLoaded()
    if spec == "least-kv":
        return LeastKV()
    if spec == "prefix-aware":
        return PrefixAware()
    if spec == "vllm-dp":
        return VllmDp()
    if spec == "weighted":  # llm-d's default weights
        return Weighted(parse_weights("prefix=3,queue=2,kv=2"))
    if spec.startswith("weighted:"):
        return Weighted(parse_weights(spec.partition(":")[2]))
    raise ConfigError(f"--router {spec!r}: unknown router; valid: {', '.join(ROUTERS)} (see servesim routers)")


def parse_weights(text: str) -> dict[str, float]:
    from servesim.lists import split_items

    if not text.strip():
        raise ConfigError("--router weighted:: expected NAME=WEIGHT pairs after the colon, e.g. "
                          "weighted:prefix=3,queue=2,kv=2 (or plain weighted, llm-d's default weights)")
    out: dict[str, float] = {}
    for item in split_items(text, f"--router weighted:{text}"):
        name, sep, value = item.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = -1.0
        if not sep or name not in SCORERS or not weight >= 0:
            raise ConfigError(f"--router weighted:{text}: {item!r}: expected NAME=WEIGHT with NAME one of "
                              f"{', '.join(SCORERS)} and WEIGHT a number >= 0")
        out[name] = weight
    if not out or not any(out.values()):
        raise ConfigError(f"--router weighted:{text}: expected at least one positive weight")
    return out
