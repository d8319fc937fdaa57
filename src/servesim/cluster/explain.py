"""Why a request went where it went, from its recorded routing decision (`ClusterResult.routes`), and the
engine's own explanation of what happened to it there (`servesim.analysis.explain` on its replica's records).

A reader: it only reads `Route`s (candidates, what each reported, each one's score, the prefix shares) and the
replicas' step records; nothing here runs in the cluster's loop.
"""

from __future__ import annotations

from servesim.analysis.explain import _plural, explain_request, explain_run, ms
from servesim.cluster.replicas import Route
from servesim.cluster.result import ClusterResult
from servesim.cluster.routers import LOAD_CAP, parse_weights

SHOWN = 4  # the other candidates a sentence names (the best scored first); a 64-replica pool is summarised


def _others(c: ClusterResult, route: Route, value, order) -> str:
    """`replica-0: 512, replica-3: 0` for the other candidates, best first by `order`, at most SHOWN."""
    rest = sorted((k for k, j in enumerate(route.candidates) if j != route.replica), key=order)
    text = ", ".join(f"{c.names[route.candidates[k]]}: {value(k)}" for k in rest[:SHOWN])
    return text + (f", and {len(rest) - SHOWN} more" if len(rest) > SHOWN else "")


def _prefix_text(c: ClusterResult, route: Route, prompt_len: int) -> str:
    k = route.candidates.index(route.replica)
    shares, states = route.prefix, route.states
    tokens = [round(p * prompt_len) for p in shares]
    least = min(s.load for s in states)
    capped = [j for j, s in enumerate(states) if s.load > least + LOAD_CAP]
    others = _others(c, route, lambda j: f"{tokens[j]:,}", lambda j: (-tokens[j], j))
    head = (f"{tokens[k]:,} of its {prompt_len:,} prompt tokens cached there" if tokens[k] else
            f"no replica it could go to held any of its {prompt_len:,} prompt tokens: the least loaded "
            f"({states[k].load} waiting + running)")
    if capped:
        names = ", ".join(c.names[route.candidates[j]] for j in capped[:SHOWN])
        cap = (f"load cap {LOAD_CAP} reached by {names} (more than {LOAD_CAP} requests above the least loaded's "
               f"{least}: not considered)")
    else:
        cap = f"load cap {LOAD_CAP} not reached"
    return f"{head} ({others + '; ' if others else ''}{cap})"


def _weighted_text(c: ClusterResult, route: Route) -> str:
    weights = parse_weights(c.router.partition(":")[2] or "prefix=3,queue=2,kv=2")
    top = max(s.load for s in route.states) or 1
    k = route.candidates.index(route.replica)
    s = route.states[k]
    parts = {"prefix": route.prefix[k] if route.prefix else 0.0, "queue": 1 - s.load / top, "kv": 1 - s.kv_use}
    terms = " + ".join(f"{name} {w:g} x {parts[name]:.2f}" for name, w in weights.items())
    others = _others(c, route, lambda j: f"{route.scores[j]:.2f}", lambda j: (-route.scores[j], j))
    return f"score {route.scores[k]:.2f} there = {terms}" + (f" ({others})" if others else "")


def route_sentence(c: ClusterResult, route: Route, prompt_len: int) -> str:
    """One routing decision in words: the router, why the chosen replica won, what the others scored."""
    name, k = c.names[route.replica], route.candidates.index(route.replica)
    router = c.router
    if len(route.candidates) == 1:
        why = "the only replica of its pool"
    elif router == "round-robin":
        why = f"round-robin, its turn ({len(route.candidates)} replicas in turn)"
    elif router == "random":
        why = f"random, a seeded uniform draw among {len(route.candidates)} replicas"
    elif router == "least-loaded":
        load = route.states[k]
        why = (f"least-loaded, {load.waiting} waiting + {load.running} running there "
               f"({_others(c, route, lambda j: int(route.scores[j]), lambda j: (route.scores[j], j))})")
    elif router == "least-kv":
        why = (f"least-kv, {route.scores[k]:.1%} of its KV blocks in use "
               f"({_others(c, route, lambda j: f'{route.scores[j]:.1%}', lambda j: (route.scores[j], j))})")
    elif router == "prefix-aware":
        why = f"prefix-aware, {_prefix_text(c, route, prompt_len)}"
    else:
        why = f"{router}, {_weighted_text(c, route)}"
    return f"{route.request_id} went to {name} at {ms(route.time)}: {why}."


def explain_cluster_request(c: ClusterResult, request_id: str) -> list[str]:
    """Its routing (P/D: the prefill pick, then the decode pick, and the KV transfer), then what happened to it
    on each replica it ran on, from that replica's step records."""
    r = c.cluster.request(request_id)
    out = [route_sentence(c, route, r.prompt_len) for route in c.routes_of(request_id)]
    move = next((t for t in c.transfers if t.request_id == request_id), None)
    if move is not None:
        queued = f", after {ms(move.start - move.ready)} queued on the link" if move.start > move.ready else ""
        out.append(f"Its KV ({move.num_bytes:,} bytes) left {c.names[move.prefill]} at {ms(move.start)} (first "
                   f"token at {ms(move.ready)}{queued}) and landed on {c.names[move.decode]} at {ms(move.end)}: "
                   f"{ms(move.seconds)} from its first token, one of its gaps between tokens.")
    where = [j for j, res in enumerate(c.replicas) if request_id in res.timelines.ids]
    if move is None:
        return out + [line for j in where for line in explain_request(c.replicas[j], request_id)]
    out += [f"On {c.names[move.prefill]}: " + line for line in explain_request(c.replicas[move.prefill], request_id)]
    if move.decode in where:
        out += _decode_side(c, move.decode, request_id, r)
    return out


def _decode_side(c: ClusterResult, j: int, request_id: str, whole) -> list[str]:
    """P/D: its decode replica queued it when the KV landed; its TPOT and E2EL are the whole cluster's (the
    first token came from the prefill replica, the gap to the second is the transfer)."""
    d = c.replicas[j].request(request_id)
    wait = (d.first_scheduled_time or d.arrival_time) - d.arrival_time
    out = [f"On {c.names[j]}: queued when its KV landed ({ms(d.arrival_time)}) and admitted "
           f"{'at once' if wait <= 0 else f'{ms(wait)} later'} ({ms(d.first_scheduled_time or d.arrival_time)})."]
    lines = explain_request(c.replicas[j], request_id)
    local = ("Then ", "Its ", "Prefix cache", "Largest gaps")  # counted on its own clock: the whole's said below
    out += [f"On {c.names[j]}: " + x for x in lines[1:] if not x.startswith(local)]
    if whole.finish_time is not None and whole.output_len > 1:
        tpot = (whole.finish_time - whole.token_times[0]) / (whole.output_len - 1)
        out.append(f"Then {whole.output_len - 1:,} more tokens there, TPOT {ms(tpot)} (the transfer included); "
                   f"finished at {ms(whole.finish_time)} (E2EL {ms(whole.e2el)}).")
    return out


def explain_cluster(c: ClusterResult, cost=None) -> list[str]:
    """The routing overall (requests per replica), then the run explanation of the busiest replica."""
    counts = [len(res.timelines) for res in c.replicas]
    per = ", ".join(f"{name} {n:,}" for name, n in list(zip(c.names, counts))[:8])
    more = f", ... ({len(counts) - 8} more)" if len(counts) > 8 else ""
    n = _plural(len(c.cluster.requests), "request")
    out = [f"{n} on {len(c.replicas)} replicas, router {c.router}: {per}{more} "
           f"(fewest {min(counts):,}, most {max(counts):,})."]
    if c.transfers:
        s = c.transfer_summary()
        out.append(f"{s['kv_transfer_count']:,} KV transfers, mean {s['mean_kv_transfer_ms']:.2f} ms from the first "
                   f"token to the KV landed (p99 {s['p99_kv_transfer_ms']:.2f} ms); the links were busy "
                   f"{s['kv_transfer_link_utilization']:.1%} of the run.")
    busiest = max(range(len(c.replicas)), key=lambda j: (c.replicas[j].tokens_processed, -j))
    out.append(f"The busiest replica, {c.names[busiest]} ({c.replicas[busiest].tokens_processed:,} tokens "
               "processed):")
    return out + explain_run(c.replicas[busiest], None, cost)
