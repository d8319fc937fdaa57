"""Benchmark clients, each reproduced from its own source: how it sends requests, which of them it measures, and
how it defines and aggregates its metrics, so that a prediction is compared with a measurement like for like.

- `vllm_bench`: `vllm bench serve` (servesim's default load: `--request-rate`, `--burstiness`,
  `--max-concurrency`; its metrics are `servesim.analysis.benchmark`'s);
- `aiperf`: NVIDIA AIPerf (`--concurrency`, `--request-rate`, `--request-count`, `--warmup-request-count`,
  `--isl`/`--osl` with their stddevs, `--streaming`);
- `mlperf`: MLPerf Inference LoadGen's Server and Offline scenarios (`--scenario`, `--target-qps`,
  `--min-duration-ms`, `--min-query-count`), the samples taken from `--workload`, and its VALID/INVALID verdict;
- `inference_perf`: Kubernetes SIG inference-perf's load stages (`--config-file`, or `--stages` and
  `--load-type`), its random and shared_prefix data, its lifecycle metrics per stage;
- `sglang_bench`: `python -m sglang.bench_serving` (vllm bench serve's option names, its own arrivals, warm-up,
  random lengths and metrics);
- `guidellm`: GuideLLM's profiles (`--profile kind=synchronous|concurrent|throughput|constant|poisson|sweep`),
  `--constraint kind=max_requests`, `--data kind=synthetic_text`, its token-weighted metrics per benchmark.

`servesim run --client NAME` chooses one; each client's flags are refused under another. Each `run(load, config,
policy, cost, server=None)` sends to `server` (a cluster, `engine_server`) or to the one engine. See
docs/clients.md.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from servesim.errors import ConfigError

CLIENTS = {"vllm-bench": "servesim.clients.vllm_bench", "aiperf": "servesim.clients.aiperf",
           "mlperf": "servesim.clients.mlperf", "inference-perf": "servesim.clients.inference_perf",
           "sglang-bench": "servesim.clients.sglang_bench", "guidellm": "servesim.clients.guidellm"}
DEFAULT_CLIENT = "vllm-bench"


def engine_server(policy: str, cost: object, server=None):
    """What a client sends to: `server(requests, config) -> SimResult` where given (a cluster's, from the CLI),
    else the one engine, `simulate` under `policy` and `cost` with the per-step records summarised."""
    if server is not None:
        return server
    from servesim.engine import simulate

    return lambda requests, config: simulate(requests, config, policy, cost, record="summary")


def client_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(CLIENTS[name])
    except KeyError:
        raise ConfigError(f"--client {name!r}: expected one of {', '.join(CLIENTS)}") from None
