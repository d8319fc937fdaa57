"""vLLM's per-step log lines as measured steps: `vllm serve --enable-logging-iteration-details` (vLLM >= 0.14.0),
read in its releases' source (0.14.0-0.25.0 `vllm/v1/engine/core.py`, 0.26.0+ `vllm/v1/metrics/loggers.py`):

    Iteration(<i>): <n> context requests, <n> context tokens, <n> generation requests, <n> generation tokens,
    iteration elapsed time: <x.xx> ms

(from 0.26.0 with an `Engine 000: ` prefix and the KV cache usage after it; any log prefix is allowed). Context
requests are new requests and chunked-prefill continuations, generation requests the decodes. vLLM's elapsed time
is its wait for the step's result (the model's forward and sampling), not the host's scheduling around it. Every
other line of the log is passed over; a log with no such line is refused, naming the flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.cost.specs import read_input_text
from servesim.errors import ConfigError

LINE = re.compile(r"Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, (\d+) generation requests, "
                  r"(\d+) generation tokens, iteration elapsed time: ([0-9.]+) ms")


@dataclass(frozen=True, slots=True)
class LoggedSteps:
    """Per logged step, in log order."""

    iteration: np.ndarray
    context_requests: np.ndarray
    context_tokens: np.ndarray
    generation_requests: np.ndarray
    elapsed: np.ndarray  # seconds

    def __len__(self) -> int:
        return len(self.iteration)


def read_engine_log(path: str | Path) -> LoggedSteps:
    path = Path(path)
    rows = [m.groups() for m in LINE.finditer(read_input_text(path, "a vllm serve log"))]
    if not rows:
        raise ConfigError(f"{path}: no 'Iteration(i): ... iteration elapsed time' line; expected a log of vllm serve "
                          "--enable-logging-iteration-details (vLLM >= 0.14.0)")
    cols = np.array([[int(v) for v in r[:5]] for r in rows])
    return LoggedSteps(cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], np.array([float(r[5]) for r in rows]) / 1e3)


def step_diff(logged: LoggedSteps, log) -> dict:
    """Logged steps against servesim's (`log`: a result's step log), in order: how many, how far the two schedules
    agree (context requests, context tokens, generation requests), and the step times of each kind (decode-only,
    with prefill) side by side, in ms."""
    ctx_req = log.num_scheduled - log.num_decodes
    n = min(len(logged), len(log))
    same = (logged.context_requests[:n] == ctx_req[:n]) & (logged.context_tokens[:n] == log.prefill_tokens[:n]) & \
        (logged.generation_requests[:n] == log.num_decodes[:n])
    agree = int(np.argmin(same)) if not same.all() else n
    out = {"logged_steps": len(logged), "servesim_steps": len(log), "steps_agreeing": agree}
    if agree < n:
        out["first_difference"] = {
            "step": agree, "logged": [int(logged.context_requests[agree]), int(logged.context_tokens[agree]),
                                      int(logged.generation_requests[agree])],
            "servesim": [int(ctx_req[agree]), int(log.prefill_tokens[agree]), int(log.num_decodes[agree])]}
    for kind, real, sim in (("decode_only", logged.context_requests == 0, ctx_req == 0),
                            ("with_prefill", logged.context_requests > 0, ctx_req > 0)):
        out[kind] = {"logged_steps": int(real.sum()), "servesim_steps": int(sim.sum()),
                     "logged_mean_ms": float(logged.elapsed[real].mean() * 1e3) if real.any() else None,
                     "servesim_mean_ms": float(log.duration[sim].mean() * 1e3) if sim.any() else None}
    return out
