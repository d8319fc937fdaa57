"""Synthetic workloads: arrivals as `vllm bench serve` makes them, lengths from a distribution, and closed loops.

Randomness always comes from a `numpy.random.Generator` the caller passes in, so a seed fixes the workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servesim.engine.request import Request
from servesim.errors import WorkloadError
from servesim.workloads.table import MAX_ARRIVAL_S, MAX_TOKENS, RequestTable


def check_burstiness(burstiness: float) -> None:
    if not burstiness > 0:
        raise WorkloadError(f"--burstiness: got {burstiness}; expected a gamma shape > 0 (1 = Poisson, inf = fixed)")


def arrival_times(n: int, request_rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Send times in seconds from the start of the benchmark, exactly as `vllm bench serve` computes them.

    Each request waits a gamma-distributed gap, shape = burstiness, scale = 1 / (request_rate * burstiness), so
    the mean gap is 1 / request_rate whatever the burstiness: burstiness 1 is a Poisson process, < 1 burstier,
    > 1 smoother, inf a fixed interval of 1 / request_rate. request_rate inf sends everything at time 0. Like vLLM,
    the cumulative times are then rescaled so the last request goes out at exactly n / request_rate (vLLM: "close
    the gap" of 1-2% a raw gamma sum has). The first request, too, waits one gap.
    """
    if n < 0:
        raise WorkloadError(f"--num-requests: got {n}; expected a count >= 0")
    if not request_rate > 0:
        raise WorkloadError(f"--request-rate: got {request_rate}; expected a rate > 0 requests/s (or inf)")
    check_burstiness(burstiness)
    if n == 0 or math.isinf(request_rate):
        return np.zeros(n)
    if n / request_rate > MAX_ARRIVAL_S:
        raise WorkloadError(
            f"--request-rate: got {request_rate:g}; {n:,} requests at that rate take {n / request_rate:.3g} s, "
            f"expected at most {MAX_ARRIVAL_S:,} s (10 years, servesim's limit)"
        )
    scale = 1.0 / (request_rate * burstiness) if request_rate * burstiness > 0 else math.inf
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / request_rate)
    elif math.isfinite(scale):
        gaps = rng.gamma(shape=burstiness, scale=scale, size=n)
    else:
        raise WorkloadError(
            f"--burstiness: got {burstiness:g} with --request-rate {request_rate:g}; expected a burstiness whose "
            "gaps' scale 1 / (rate * burstiness) is a finite number of seconds"
        )
    t = np.cumsum(gaps)
    if not np.isfinite(t[-1]):  # a gamma shape so small that one gap is beyond any float
        raise WorkloadError(
            f"--burstiness: got {burstiness:g}; the gaps it draws overflow; expected a larger burstiness"
        )
    if t[-1] > 0:
        t *= (n / request_rate) / t[-1]
    return t


RAMP_UP_STRATEGIES = ("linear", "exponential")


@dataclass(frozen=True, slots=True)
class RampUp:
    """`vllm bench serve --ramp-up-strategy S --ramp-up-start-rps A --ramp-up-end-rps B` (pinned: vLLM 0.33.0,
    `vllm/benchmarks/serve.py`): request i of n is sent at rate A + (B - A) * p (linear) or A * (B / A) ** p
    (exponential), p = i / max(n - 1, 1). The checks are vLLM's, and a start of 0 is refused as well: vLLM's first
    request would get rate 0 and stop on its assertion."""

    strategy: str
    start_rps: float
    end_rps: float

    def __post_init__(self) -> None:
        if self.strategy not in RAMP_UP_STRATEGIES:
            raise WorkloadError(f"--ramp-up-strategy: got {self.strategy!r}; expected linear or exponential")
        if not 0 < self.start_rps <= self.end_rps < math.inf:
            raise WorkloadError(
                f"--ramp-up-start-rps {self.start_rps:g} --ramp-up-end-rps {self.end_rps:g}: expected "
                "0 < start <= end requests/s (vllm bench serve: the start must not exceed the end, and a start "
                "of 0 gives its first request no rate)"
            )

    def rates(self, n: int) -> np.ndarray:
        """Each request's rate, in send order."""
        progress = np.arange(n) / max(n - 1, 1)
        if self.strategy == "linear":
            return self.start_rps + (self.end_rps - self.start_rps) * progress
        return self.start_rps * (self.end_rps / self.start_rps) ** progress


def ramp_up_arrival_times(n: int, ramp: RampUp, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Send times as `vllm bench serve --ramp-up-strategy` computes them: request i waits a gamma gap of mean
    1 / its rate (shape = burstiness; inf: exactly 1 / its rate) after request i - 1, the first one gap after the
    start. Unlike a fixed rate, the times are not rescaled (vLLM rescales only without ramp-up)."""
    check_burstiness(burstiness)
    rates = ramp.rates(n)
    if math.isinf(burstiness):
        gaps = 1.0 / rates
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rates * burstiness), size=n)
    t = np.cumsum(gaps)
    if n and not t[-1] <= MAX_ARRIVAL_S:
        raise WorkloadError(
            f"--ramp-up-start-rps: {n:,} requests ramping from {ramp.start_rps:g} requests/s take {t[-1]:.3g} s, "
            f"expected at most {MAX_ARRIVAL_S:,} s (10 years, servesim's limit)"
        )
    return t


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution, parsed from `--prompt-len` / `--output-len`.

    `kind`: fixed (a), uniform (integers a..b inclusive), normal (mean a, std b), lognormal (mean a of the
    distribution, sigma b of the log), empirical (values drawn with replacement). Samples are rounded to whole
    tokens and clipped to [low, high].
    """

    kind: str
    a: float = 0.0
    b: float = 0.0
    low: int = 1
    high: int | None = None
    values: np.ndarray | None = None  # empirical: the observed lengths
    source: str = ""  # empirical: the workload the values came from (equal sources are sampled jointly)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            x = np.full(n, self.a)
        elif self.kind == "uniform":
            x = rng.integers(int(self.a), int(self.b), size=n, endpoint=True).astype(np.float64)
        elif self.kind == "normal":
            x = rng.normal(self.a, self.b, size=n)
        elif self.kind == "lognormal":  # mean a = exp(mu + sigma^2 / 2)
            x = rng.lognormal(math.log(self.a) - self.b**2 / 2, self.b, size=n)
        else:
            assert self.values is not None
            x = self.values[rng.integers(0, len(self.values), size=n)].astype(np.float64)
        # NOTE: clipped to MAX_TOKENS too, so a wide normal's tail cannot overflow int64
        high = MAX_TOKENS if self.high is None else min(self.high, MAX_TOKENS)
        return np.clip(np.rint(x), self.low, high).astype(np.int64)


LENGTH_SYNTAX = (
    "N | uniform:LO:HI | normal:MEAN:STD[:LO:HI] | lognormal:MEAN:SIGMA[:LO:HI] | trace:WORKLOAD (a built-in or file)"
)


def parse_length(spec: str | int, option: str = "--prompt-len") -> LengthDist:
    """`512`, `uniform:64:512`, `normal:1000:200`, `lognormal:1000:0.8:1:8192`, `trace:azure-conv-sample`."""
    text = str(spec).strip()
    kind, _, rest = text.partition(":")
    if kind == "trace":
        return LengthDist("empirical", source=rest)  # values are filled in by the caller, who can load workloads
    try:
        nums = [float(x) for x in rest.split(":")] if rest else []
        if not rest and kind.replace(".", "", 1).isdigit():
            kind, nums = "fixed", [float(kind)]
    except ValueError:
        nums = []
    arity = {"fixed": (1,), "uniform": (2,), "normal": (2, 4), "lognormal": (2, 4)}.get(kind, ())
    if len(nums) not in arity or not all(math.isfinite(v) for v in nums):
        raise WorkloadError(f"{option}: got {text!r}; expected {LENGTH_SYNTAX}")
    if any(abs(v) > MAX_TOKENS for v in nums):
        raise WorkloadError(f"{option}: got {text!r}; expected token counts up to {MAX_TOKENS:,}")
    low, high = (int(nums[2]), int(nums[3])) if len(nums) == 4 else (1, None)
    dist = LengthDist(kind, nums[0], nums[1] if len(nums) > 1 else 0.0, max(low, 1), high)
    checks = {
        "fixed": dist.a >= 1 and dist.a == int(dist.a),
        "uniform": 1 <= dist.a <= dist.b,
        "normal": dist.b >= 0,
        "lognormal": dist.a > 0 and dist.b >= 0,
    }
    if not checks[kind] or (high is not None and high < dist.low):
        raise WorkloadError(f"{option}: got {text!r}; expected {LENGTH_SYNTAX} with lengths >= 1 and LO <= HI")
    return dist


def synthetic_lengths(
    prompt: LengthDist, output: LengthDist, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths; two empirical distributions from the same trace draw whole rows together,
    keeping the trace's correlation between prompt and output length."""
    if prompt.kind == output.kind == "empirical" and prompt.source == output.source:
        assert prompt.values is not None and output.values is not None
        rows = rng.integers(0, len(prompt.values), size=n)
        return prompt.values[rows].astype(np.int64), output.values[rows].astype(np.int64)
    return prompt.sample(n, rng), output.sample(n, rng)


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """N users, each sending a request, waiting for it to finish, thinking, then sending the next.

    Arrivals depend on completions, so this cannot be a list of arrival times: the engine drives it. At time 0
    users send requests 0..N-1 (`initial_requests`); whenever a request finishes at time f, the user who sent it
    sends the next unsent request at f + think_time (`next_request`). `requests` gives the lengths in sending
    order; its arrival times are not used. Think time is fixed, so the schedule is deterministic.
    """

    num_users: int
    think_time: float  # seconds between a response finishing and the same user's next request
    requests: RequestTable

    def __post_init__(self) -> None:
        if self.num_users < 1:
            raise WorkloadError(f"--users: got {self.num_users}; expected at least 1 concurrent user")
        if not (self.think_time >= 0 and math.isfinite(self.think_time)):
            raise WorkloadError(f"--think-time: got {self.think_time}; expected seconds >= 0")

    def __len__(self) -> int:
        return len(self.requests)

    def initial_requests(self) -> list[Request]:
        return [self._request(i, 0.0) for i in range(min(self.num_users, len(self)))]

    def next_request(self, num_sent: int, finish_time: float) -> Request | None:
        """The request sent after one finishes at `finish_time`, when `num_sent` have gone out so far."""
        return self._request(num_sent, finish_time + self.think_time) if num_sent < len(self) else None

    def to_requests(self) -> list[Request]:
        """The requests for the engine, in sending order: all arrive at 0 and, from the (N+1)-th on, carry the
        think time. Simulate them with `config(...)`'s cap of N in flight: the engine sends the next unsent one
        `think_time` after any finishes, which is this loop (`servesim.engine.loop`, `max_concurrency`)."""
        from dataclasses import replace

        return [replace(self._request(i, 0.0), think_time=self.think_time if i >= self.num_users else 0.0)
                for i in range(len(self))]

    def config(self, config=None):
        """`config` (an `EngineConfig`, default one) with the loop's N users as the cap on requests in flight."""
        from dataclasses import replace

        from servesim.engines.config import EngineConfig

        return replace(config or EngineConfig(), max_concurrency=self.num_users)

    def _request(self, i: int, t: float) -> Request:
        r = self.requests
        prio = int(r.priority[i]) if r.priority is not None else 0
        return Request(r.id_of(i), t, int(r.prompt_len[i]), int(r.output_len[i]), prio)
