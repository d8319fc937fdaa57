"""A measured run: what a benchmark client recorded of a real deployment, per request, read from its own file.

`MeasuredRun` holds the successful requests in the order the client sent them: their lengths, the send times
where the file has them, the measured TTFT and end-to-end latency (seconds), and the client's own aggregates
(`means`, under `servesim.validate.rows.METRICS`' names, in the client's definitions). Readers:
`servesim.measured.vllm_result` (`vllm bench serve --save-result [--save-detailed]`) and
`servesim.measured.aiperf_export` (AIPerf's `profile_export.jsonl`, with `profile_export_aiperf.json` beside it);
`servesim.measured.read.read_run` picks one from the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# The deployment keys a run file may carry (vllm bench serve's `--metadata KEY=VALUE`), under validate's names
DEPLOYMENT_KEYS = ("model", "gpu", "tp", "engine", "engine_version", "quantization", "kv_cache_dtype", "cost",
                   "max_num_seqs", "max_num_batched_tokens", "frontend")


@dataclass(frozen=True, slots=True)
class MeasuredRun:
    path: Path
    client: str  # "vllm-bench" | "aiperf"
    model_id: str | None  # the model the client named (a Hugging Face id)
    deployment: dict  # DEPLOYMENT_KEYS found in the file, as text
    load: dict  # the client's load as it recorded it: request_rate, burstiness, max_concurrency, ramp-up, ...
    input_lens: np.ndarray  # tokens, per successful request, in send order
    output_lens: np.ndarray
    send: np.ndarray | None  # seconds on the client's clock (any origin); None: the file does not have them
    ttft: np.ndarray | None  # seconds; None: no per-request values (a summary file)
    e2el: np.ndarray | None
    means: dict = field(default_factory=dict)  # the client's aggregates: ttft_ms, tpot_ms, itl_ms, e2el_ms, ...
    failed: int = 0
    per_request: bool = True  # False: lengths are the file's means (a summary without per-request arrays)
    mean_itl: np.ndarray | None = None  # seconds: the mean of each request's measured gaps (vLLM's itls)

    def __len__(self) -> int:
        return len(self.input_lens)
