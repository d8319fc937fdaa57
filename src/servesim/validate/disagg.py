"""A disaggregated point predicted: its prefill and decode pools on one cluster (`servesim.cluster`), a closed loop
of `concurrency` users over the whole deployment (vllm bench serve's `--max-concurrency`, the cap spanning the
cluster), the KV moving over the point's link (`kv_link`: bytes/s and seconds per prefill worker).

The point's fields: the row's (model, GPU, engine, quantization, isl, osl, the load) and `prefill` / `decode`, each
a pool's `workers` and `gpus` (each worker's) beside the engine fields of one worker (tp, layout flags, knobs,
the engine's section). Requests go to the workers round robin (Dynamo's frontend's default router mode). As
`score._staggered`: the users' first requests go one C-th of a lone request's latency (on this deployment) apart,
or all at 0 (`start` together); the loop's first `warmup_requests` are not measured.

What the client sees (`client_means`): behind Dynamo's frontend every engine streams a request's tokens from its
decode worker, so its first token reaches the client once the KV has landed there and the decode worker has run
it once (vLLM's NIXL connector recomputes the last prompt token on the decode worker to sample it; SGLang and
TensorRT-LLM send the prefill's token with the KV, which the decode worker returns with its first step). servesim's
P/D cluster ends TTFT at the prefill worker (DistServe's count, `servesim.cluster.pd`) and makes tokens 2..osl on
the decode worker; the client's TTFT is its second token time (the decode worker's first step), its TPOT the mean
gap after that, and its E2EL TTFT + (osl - 1) x TPOT (the decode worker makes all osl tokens).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from servesim.validate.aic_disagg import SIDES

POOL_ONLY = ("workers", "gpus")


def predict_disagg(f: dict) -> dict[str, float]:
    from servesim.engine.request import Request
    from servesim.errors import ConfigError

    if f["client"] != "vllm-bench" or "concurrency" not in f:
        raise ConfigError("a P/D deployment is replayed under vllm-bench's closed loop only: give client "
                          "vllm-bench and concurrency")
    c, w, n = f["concurrency"], f.get("warmup_requests", 0), f["num_requests"]
    gap = 0.0
    if f.get("start", "together") == "staggered":
        alone = _run(f, [Request("alone", 0.0, f["isl"], f["osl"])], None)
        gap = float(alone.cluster.timelines.finish_time[0]) / c
    reqs = [Request(f"r{i}", min(i, c - 1) * gap, f["isl"], f["osl"]) for i in range(w + n)]
    return client_means(_run(f, reqs, c).cluster.timelines, w)


def client_means(timelines, skip: int) -> dict[str, float]:
    """Mean TTFT, TPOT and E2EL (ms) as the client sees them behind a P/D deployment (the module's docstring),
    over the requests after the first `skip`."""
    ttft, tpot = [], []
    for t in list(timelines)[skip:]:
        times = t.token_times
        if len(times) < 3:  # (no gap after the decode worker's first token to measure)
            from servesim.errors import ConfigError

            raise ConfigError(f"osl {t.output_len}: the client's TPOT behind a P/D deployment needs 3 tokens or more")
        ttft.append(times[1] - t.arrival_time)
        tpot.append((times[-1] - times[1]) / (len(times) - 2))
    ttft_ms, tpot_ms = 1e3 * float(np.mean(ttft)), 1e3 * float(np.mean(tpot))
    osl = int(timelines.output_len[-1])
    return {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "e2el_ms": ttft_ms + (osl - 1) * tpot_ms}


def _run(f: dict, reqs: list, cap: int | None):
    from servesim.cluster import Pool, simulate_cluster
    from servesim.validate.score import engine_setup

    shared = {k: v for k, v in f.items() if k not in (*SIDES, "kv_link")}
    pools = []
    for side in SIDES:
        cfg, cost = engine_setup(shared | {k: v for k, v in f[side].items() if k not in POOL_ONLY})
        pools.append(Pool(f[side]["workers"], replace(cfg, max_concurrency=cap), f["engine"], cost, role=side))
    link = f["kv_link"]
    return simulate_cluster(reqs, pools, router="round-robin", kv_transfer_bandwidth=link["bandwidth"],
                            kv_transfer_latency=link["latency"], record="summary")
