"""Cluster layouts as sweep points: how many replicas, in what roles, behind which router.

A layout is a short text, the same in a point, a row and a checkpoint:
- `4`: four data-parallel replicas of the engine behind the router (`servesim run --num-replicas 4`);
- `1P3D`: prefill/decode disaggregation, one prefill and three decode replicas (`--prefill-replicas 1
  --decode-replicas 3`), vLLM's xPyD notation for disaggregated prefill (1P1D, 2P2D, ...).
Each replica has the point's TP, so a layout of R replicas is R x TP GPUs (P/D: (P + D) x TP).

A point with a layout or a router is simulated by `servesim.cluster.simulate_cluster` through the same
`SimOptions.simulate_cluster` that `servesim run` uses, so a row equals `servesim run --num-replicas N --json`.
The cluster-wide measures: vLLM's metrics over every request (`ClusterResult.benchmark`); OVERLOADED when any
replica's queue grows without bound (each replica's own run through `analysis.overload`: one unstable replica
makes the cluster's tail latencies grow with the run's length); what bound each step, over every replica's steps.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from servesim.errors import ConfigError

_PD = re.compile(r"^(\d+)p(\d+)d$", re.IGNORECASE)


def parse_layout(text: str) -> tuple[int | None, int | None, int | None]:
    """`4` -> (4, None, None); `1P3D` -> (None, 1, 3): (num_replicas, prefill_replicas, decode_replicas)."""
    t = str(text).strip()
    m = _PD.match(t)
    if m:
        p, d = int(m.group(1)), int(m.group(2))
        if p >= 1 and d >= 1:
            return None, p, d
    elif t.isdigit() and int(t) >= 1:
        return int(t), None, None
    raise ConfigError(f"layout {text!r}: expected a replica count >= 1 (e.g. 4) or prefill/decode replicas as "
                      "xPyD (e.g. 1P3D)")


def layout_name(text: str) -> str:
    """The canonical text of a layout: `2p2d` -> `2P2D`, `04` -> `4`."""
    n, p, d = parse_layout(text)
    return str(n) if n is not None else f"{p}P{d}D"


def num_replicas(layout: str | None) -> int:
    if layout is None:
        return 1
    n, p, d = parse_layout(layout)
    return n if n is not None else p + d


def layouts_from(replicas: Sequence[int] = (), prefill: Sequence[int] = (), decode: Sequence[int] = ()
                 ) -> tuple[str, ...]:
    """The layout axis from the command line's lists: each --num-replicas, then each --prefill-replicas x
    --decode-replicas pair (both lists or neither)."""
    if bool(prefill) != bool(decode):
        raise ConfigError("--prefill-replicas and --decode-replicas make P/D layouts: give both")
    out = [str(n) for n in replicas] + [f"{p}P{d}D" for p in prefill for d in decode]
    return tuple(dict.fromkeys(out))


def parse_routers(text: str | Iterable[str] | None, seed: int = 0) -> tuple[str, ...]:
    """`round-robin,weighted:prefix=3,queue=2` -> ("round-robin", "weighted:prefix=3,queue=2"): a comma splits
    routers except inside a `weighted:` router's NAME=WEIGHT pairs. Each is checked by `make_router`."""
    from servesim.cluster.routers import make_router

    if text is None:
        return ()
    from servesim.lists import split_items

    items = split_items(text, "--router") if isinstance(text, str) else [str(t).strip() for t in text]
    out: list[str] = []
    for item in items:
        if out and out[-1].startswith("weighted:") and "=" in item and ":" not in item:
            out[-1] += "," + item
        else:
            out.append(item)
    if not out:
        raise ConfigError(f"--router {text!r}: expected a comma-separated list of routers (servesim routers)")
    for name in out:
        make_router(name, seed)
    if len(set(out)) != len(out):
        raise ConfigError(f"--router {text!r}: a router is given twice")
    return tuple(out)


def cluster_fields(layout: str | None, router: str | None) -> dict[str, Any]:
    """The `SimOptions` fields a point's layout and router set (those not given are left to the base)."""
    out: dict[str, Any] = {}
    if layout is not None:
        n, p, d = parse_layout(layout)
        out |= {"num_replicas": n, "prefill_replicas": p, "decode_replicas": d}
    if router is not None:
        out["router"] = router
    return out


def is_cluster(result: Any) -> bool:
    return hasattr(result, "replicas") and hasattr(result, "cluster")


def steps_of(result: Any) -> list:
    """Every step record: one engine's, or every replica's of a cluster."""
    if is_cluster(result):
        return [s for r in result.replicas for s in r.steps]
    return list(result.steps)
