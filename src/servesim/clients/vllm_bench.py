"""`vllm bench serve` (pinned: vLLM 0.33.0, `vllm/benchmarks/serve.py`): servesim's default client.

How it sends: the workload's requests at gamma-distributed gaps of mean 1 / `--request-rate` (shape
`--burstiness`; 1 = Poisson; inf = all at once), rescaled so the last goes out at n / rate
(`servesim.workloads.synthetic.arrival_times`), or on `--ramp-up-strategy`'s ramp from `--ramp-up-start-rps` to
`--ramp-up-end-rps` (`ramp_up_arrival_times`, not rescaled); with `--max-concurrency C` at most C in flight, the others
waiting at the client, first come first served (`EngineConfig.max_concurrency`, honoured by the engine loop).
What it measures: every request of the run (use `--warmup-s` / `--cooldown-s` to trim). How it aggregates: vLLM's
"Serving Benchmark Result" block (`servesim.analysis.benchmark`): TPOT = (e2el - ttft) / (output tokens - 1) per
request, averaged over requests; ITL token-weighted over every gap; the same JSON keys as `--save-result`.
"""

NAME = "vllm-bench"
FLAGS = None  # its flags are servesim's own load options (`--request-rate`, `--burstiness`, `--ramp-up-*`,
# `--max-concurrency`)


def means(result, keep=None) -> dict[str, float]:
    """vllm bench serve's means under validate's metric names (ms; output tokens/s), over the requests `keep`
    marks (None: all): TTFT, TPOT, token-weighted ITL, E2EL, output throughput."""
    from servesim.analysis.benchmark import benchmark_metrics

    m = benchmark_metrics(result, keep=keep)
    s = m.summaries
    return {"ttft_ms": s["ttft"].mean, "tpot_ms": s["tpot"].mean, "itl_ms": s["itl"].mean, "e2el_ms": s["e2el"].mean,
            "output_throughput": m.output_throughput}
