"""The path outside the engine core: from the client's send to the engine's waiting queue, and the streamed tokens
back, as one latency per request (`EngineConfig.frontend_latency`) and one per prompt token
(`EngineConfig.frontend_latency_per_token`, the tokenizer).

What it covers: the HTTP request and its parsing by the API server (vLLM's and SGLang's OpenAI-compatible servers,
uvicorn + FastAPI), tokenizing the prompt, the hop to the engine-core process (ZMQ), and on the way out the hop
back, detokenizing, the server-sent event of each chunk and the benchmark client's own event loop. All of it is
put on the way in: a request reaches the scheduler `delay(prompt_len)` after its send, and every metric counts
from the send. For TTFT and end-to-end latency only the sum matters; a closed loop's next send waits for the same
sum after a completion either way. Nothing here contends: the API server is not modelled as a queue (a busy
front end at high concurrency, vLLM's `--api-server-count`, is not modelled yet). On a cluster it sits before
the router (`servesim.cluster`). A constant per streamed chunk
(a few microseconds measured, below) shifts every token alike and is left out.

The presets (`FRONTENDS`), each from published measurements:
- the fixed part, 11.2 ms: vLLM V1's client-measured TTFT minus its own `vllm:time_to_first_token_seconds` (which
  starts when tokenization begins), 8.4, 12.0, 12.2, 11.0 and 10.5 ms over its completions, chat and responses
  endpoints, mean 10.82 (vLLM 0.28.1rc1.dev174, Qwen2.5-0.5B-Instruct, 512 in, 128 out, `--max-concurrency 8`; a
  laptop CPU: vllm-project/vllm pull request 54628), plus two ZMQ hops (0.1 to 0.2 ms each, taken as 0.15:
  SGLang's tokenizer manager to its scheduler, uw-syfi/vibesys pull request 421) and the tokenizer's call (~0.1
  ms: vllm-project/vllm pull request 45759): 10.82 + 0.3 + 0.1 = 11.22 ms;
- the per-token part, 1 us: a Hugging Face fast tokenizer on one core, "about 1k tokens/ms" on a DGX H100's CPU
  (vllm-project/vllm issue 19012; 0.8 to 2.2 us in pull request 44172 and other reports).
SGLang's front end is the same stack (an OpenAI-compatible FastAPI server, a tokenizer process, ZMQ) and the same
clients, with no measurement of its own found: it takes vLLM's figures. Calibrate them on your own run:
`servesim diff` prints the mean TTFT gap at your sends.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.errors import ConfigError


@dataclass(frozen=True, slots=True)
class FrontEnd:
    name: str
    latency: float  # seconds per request
    latency_per_token: float  # seconds per prompt token
    source: str


_SOURCE = ("vllm-project/vllm#54628 (client minus server TTFT, mean 10.82 ms), #45759 (tokenizer call), "
           "uw-syfi/vibesys#421 (hops); vllm-project/vllm#19012 (~1 us a token)")
FRONTENDS = {"none": FrontEnd("none", 0.0, 0.0, "no front end: the engine core alone"),
             "vllm": FrontEnd("vllm", 11.22e-3, 1e-6, _SOURCE),
             "sglang": FrontEnd("sglang", 11.22e-3, 1e-6, "vLLM's figures (the same stack): " + _SOURCE)}


def frontend(name: str) -> FrontEnd:
    try:
        return FRONTENDS[name]
    except KeyError:
        raise ConfigError(f"--frontend {name!r}: expected one of {', '.join(FRONTENDS)}") from None


def delay(config, prompt_len):
    """Seconds from a send to the engine's waiting queue under `config` (an `EngineConfig`); works on arrays."""
    return config.frontend_latency + config.frontend_latency_per_token * prompt_len


def fit_frontend(residual, prompt_len, floor: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """(latency, latency_per_token) that best explain each request's TTFT residual (measured minus servesim's,
    seconds) as latency + latency_per_token x prompt tokens: least squares over the requests, each coefficient
    at least its `floor` (0: a front end takes time; a refit's step: no lower than minus what is fitted so far),
    one at its floor when the two together would go below. Exact where the front end only shifts arrivals the
    engine does not notice (requests that do not queue behind each other); `servesim diff --fit-frontend` refits
    on the gaps left until the step vanishes."""
    import numpy as np

    r, n = np.asarray(residual, float), np.asarray(prompt_len, float)
    ok = np.isfinite(r)
    r, n = r[ok], n[ok]
    if not r.size:
        raise ConfigError("fitting the front end needs requests with a measured TTFT; none")
    (lat, per), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(n), n]), r, rcond=None)
    if lat >= floor[0] and per >= floor[1]:
        return float(lat), float(per)
    # one at its floor, the other fitted to what is left (not below its own floor): the better of the two
    held_per = max(float((r - floor[1] * n).mean()), floor[0]), floor[1]
    cands = [held_per]
    if (n * n).sum() > 0:
        cands.append((floor[0], max(float((n * (r - floor[0])).sum() / (n * n).sum()), floor[1])))
    return min(cands, key=lambda c: float(((r - c[0] - c[1] * n) ** 2).sum()))
