"""The lesson's toy cost and the unit (step-clock) cost."""

from __future__ import annotations

from dataclasses import dataclass
from math import copysign

from servesim.cost.base import StepShape
from servesim.cost.specs import is_finite, show
from servesim.errors import ConfigError

# Checked once at build (step_time adds no check): a step of this many decodes and prefill tokens stays finite.
PROBE_TOKENS = 1 << 31


@dataclass(frozen=True, slots=True)
class ToyCost:
    """The lesson's cost: 1 ms per decoding request plus 0.1 ms per prefill token, plus an optional overhead."""

    decode_ms: float = 1.0
    prefill_token_ms: float = 0.1
    overhead_ms: float = 0.0
    name: str = "toy"

    def __post_init__(self) -> None:
        """Every step time is then finite and >= 0: each parameter is, and so is a step far beyond any real one."""
        fields = ("decode_ms", "prefill_token_ms", "overhead_ms")
        for field in fields:
            value = getattr(self, field)
            if not (is_finite(value) and value >= 0):
                raise ConfigError(f"{field}: expected a finite number of milliseconds >= 0, got {show(value)}")
        if not is_finite(self.overhead_ms + PROBE_TOKENS * (self.decode_ms + self.prefill_token_ms)):
            worst = max(fields, key=lambda f: getattr(self, f))
            raise ConfigError(f"{worst}: expected a number of milliseconds whose step times stay finite, "
                              f"got {show(getattr(self, worst))}")

    def step_time(self, shape: StepShape) -> float:
        return self.step_time_with_decodes(0, 0, shape)

    def step_time_with_decodes(self, num_decodes: int, decode_context_sum: int, shape: StepShape) -> float:
        """`num_decodes` more decodes ahead of `shape` (their contexts do not matter), added in the same order."""
        ms = _decode_sum(self.overhead_ms, self.decode_ms, num_decodes) if num_decodes else self.overhead_ms
        for n, decode in zip(shape.num_new_tokens, shape.is_decode):
            ms += self.decode_ms if decode else n * self.prefill_token_ms
        return ms / 1000.0

    def decode_stretch(self, n: int, context_sum: int, k: int) -> list[float]:
        """k steps of n one-token decodes cost the same: context does not enter the toy cost."""
        return [self.step_time_with_decodes(n, context_sum, _NO_ROWS)] * k  # = step_time of the n decodes


# overhead + decode x n, added one decode at a time as a step-by-step sum would (float addition is not
# multiplication): the running sums, kept per (overhead, decode, their signs), for batches up to _MAX_KEPT
_DECODE_SUMS: dict[tuple, list[float]] = {}
_MAX_KEPT = 1 << 16
_NO_ROWS = StepShape((), (), (), 0)


def _decode_sum(overhead: float, decode: float, n: int) -> float:
    """overhead + n decodes, summed in that order (signed zeros kept apart: -0.0 + -0.0 is not 0.0 + -0.0)."""
    key = (overhead, decode) if overhead and decode else (overhead, decode, copysign(1.0, overhead),
                                                         copysign(1.0, decode))
    sums = _DECODE_SUMS.get(key)
    if sums is None:
        sums = _DECODE_SUMS[key] = [overhead]
    if n < len(sums):
        return sums[n]
    ms, keep = sums[-1], n < _MAX_KEPT
    for _ in range(n + 1 - len(sums)):
        ms += decode
        if keep:
            sums.append(ms)
    return ms


@dataclass(frozen=True, slots=True)
class UnitCost:
    """Every step lasts exactly `step_duration` (default 1.0 s): a step clock, as in the conformance fixtures."""

    step_duration: float = 1.0
    name: str = "unit"

    def __post_init__(self) -> None:
        value = self.step_duration
        if not (is_finite(value) and value > 0):
            raise ConfigError(f"step_duration: expected a finite number of seconds > 0, got {show(value)}")

    def step_time(self, shape: StepShape) -> float:
        return self.step_duration

    def step_time_with_decodes(self, num_decodes: int, decode_context_sum: int, shape: StepShape) -> float:
        return self.step_duration

    def decode_stretch(self, n: int, context_sum: int, k: int) -> list[float]:
        return [self.step_duration] * k
