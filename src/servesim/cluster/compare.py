"""Routers and layouts side by side: `servesim compare --set router=round-robin,prefix-aware` or
`--set num_replicas=1,2,4` (or any engine knob, or `--policies`, on a cluster). One column per cluster run, rows
from the whole cluster's `vllm bench serve` block and the per-replica breakdown, and one sentence per pair of
neighbouring columns on what moved. A reader of `ClusterResult`s only.
"""

from __future__ import annotations

from servesim.analysis.explain import ms
from servesim.cluster.result import ClusterResult
from servesim.errors import ConfigError

# the cluster's own knobs --set takes (`servesim.cli.options.SimOptions` fields), with the type of their values
KNOBS = {"router": str, "num_replicas": int, "router_delay_ms": float}


def parse_cluster_set(spec: str) -> tuple[str, list[object]]:
    """`router=round-robin,weighted:prefix=3,kv=1` -> ("router", ["round-robin", "weighted:prefix=3,kv=1"]) (a
    weighted router's NAME=WEIGHT pairs stay with it); `num_replicas=1,2,4` -> ("num_replicas", [1, 2, 4])."""
    knob, _, text = spec.partition("=")
    knob = knob.strip().replace("-", "_")
    items: list[str] = []
    for item in (t.strip() for t in text.split(",")):
        if knob == "router" and "=" in item and items and items[-1].startswith("weighted"):
            items[-1] += "," + item
        elif item:
            items.append(item)
    if not items:
        raise ConfigError(f"--set {spec!r}: expected {knob}=V1,V2,...")
    return knob, cluster_values(knob, [v if knob == "router" else _number(v) for v in items])


def _number(text: str) -> object:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def cluster_values(knob: str, values: list[object]) -> list[object]:
    """`--set router=a,b` / `num_replicas=1,2,4` / `router_delay_ms=0,50`: each value checked for its knob."""
    kind, out = KNOBS[knob], []
    for v in values:
        if kind is str:
            from servesim.cluster.routers import make_router

            make_router(str(v))  # an unknown router: its one-line error
            out.append(str(v))
        elif kind is int and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"--set {knob}={v!r}: expected an integer >= 1")
        elif kind is float and (isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < float("inf")):
            raise ConfigError(f"--set {knob}={v!r}: expected a number of ms >= 0")
        else:
            out.append(v)
    return out


def _hit_rate(c: ClusterResult) -> float | None:
    stats = [r.prefix_cache for r in c.replicas if r.prefix_cache is not None]
    if not stats:
        return None
    query = sum(s.query_tokens for s in stats)
    return sum(s.hit_tokens for s in stats) / query if query else 0.0


def cluster_rows(results: dict[str, ClusterResult]) -> list[tuple[str, list[str]]]:
    """Rows of the side-by-side table, one value per cluster run."""
    f2 = "{:.2f}".format
    bms = {k: c.benchmark() for k, c in results.items()}
    rows: list[tuple[str, list[str]]] = []

    def row(label, f):
        rows.append((label, [f(k, c) for k, c in results.items()]))

    row("Replicas", lambda k, c: str(len(c.replicas)))
    row("Router", lambda k, c: c.router)
    for metric, short in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        row(f"Mean {short} (ms)", lambda k, c, m=metric: f2(bms[k][m].mean))
        row(f"P99 {short} (ms)", lambda k, c, m=metric: f2(bms[k][m].percentile(99.0)))
    row("Request throughput (req/s)", lambda k, c: f2(bms[k].request_throughput))
    row("Output token throughput (tok/s)", lambda k, c: f2(bms[k].output_throughput))
    row("Makespan (ms)", lambda k, c: f2(c.cluster.makespan * 1000))
    row("Requests per replica (fewest-most)",
        lambda k, c: f"{min(len(r.timelines) for r in c.replicas)}-{max(len(r.timelines) for r in c.replicas)}")
    row("Max waiting on a replica", lambda k, c: str(max(x["max_waiting"] for x in c.replica_rows())))
    row("Preemptions", lambda k, c: str(sum(len(r.preemptions) for r in c.replicas)))
    if any(_hit_rate(c) is not None for c in results.values()):
        row("Prefix cache hit rate (%)", lambda k, c: "off" if _hit_rate(c) is None else f2(_hit_rate(c) * 100))
    if any(c.transfers for c in results.values()):
        row("Mean KV transfer (ms)",
            lambda k, c: f2(c.transfer_summary()["mean_kv_transfer_ms"]) if c.transfers else "-")
    return rows


def cluster_sentences(results: dict[str, ClusterResult]) -> list[str]:
    """One sentence per neighbouring pair: TTFT and E2EL, the spread of requests, the prefix-cache hit rate."""
    out = []
    items = [(k, c, c.benchmark()) for k, c in results.items()]
    for (na, a, ma), (nb, b, mb) in zip(items, items[1:]):
        parts = []
        for metric, name in (("ttft", "mean TTFT"), ("e2el", "mean E2EL")):
            x, y = ma[metric].mean / 1000, mb[metric].mean / 1000
            verb = "rose" if y > x + 1e-12 else "fell" if y < x - 1e-12 else "stayed"
            parts.append(f"{name} {verb} from {ms(x)} to {ms(y)}" if verb != "stayed" else f"{name} stayed {ms(x)}")
        spread = [(min(len(r.timelines) for r in c.replicas), max(len(r.timelines) for r in c.replicas))
                  for c in (a, b)]
        if spread[0] != spread[1]:
            parts.append(f"requests per replica {spread[0][0]}-{spread[0][1]} -> {spread[1][0]}-{spread[1][1]}")
        ha, hb = _hit_rate(a), _hit_rate(b)
        if ha is not None and hb is not None and abs(ha - hb) > 1e-12:
            parts.append(f"prefix cache hit rate {ha:.1%} -> {hb:.1%} (a request's prefix is cached only where "
                         "its earlier turns ran)")
        out.append(f"{nb} vs {na}: " + "; ".join(parts) + ".")
    return out
