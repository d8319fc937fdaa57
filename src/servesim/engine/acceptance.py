"""How many drafts a verification step accepts: what the target model's rejection sampler decides, which servesim
does not run, so it is given (engine-neutral: any engine's speculative decoding reads it).

Either per request, a list of accepted counts (`Request.accept`: the i-th verification step accepts
`accept[i % len]`, clamped to the drafts it verified), or for every request a seeded draw from per-position rates
(`Acceptance`): draft i is accepted with probability `rates[i]` given that drafts 0..i-1 were (the last rate repeats
for later positions), and the first rejection ends the step. One rate is the classic i.i.d. model of Leviathan et
al. (ICML 2023, "Fast Inference from Transformers via Speculative Decoding", section 3.1: acceptance rate alpha, a
step of K drafts yields (1 - alpha^(K+1)) / (1 - alpha) tokens on average). servesim sets no default: the rates
depend on the model pair and the text, so they are the user's to give.

The draw of request i's j-th verification step is a pure function of (seed, i, j, position): the same whatever
the batch, the order of scheduling or a preemption, so a run is reproducible and the fast path's aggregate steps
draw what step by step draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servesim.errors import ConfigError

_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finalizer: a 64-bit integer to a well-spread one."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Per-position acceptance probabilities (conditional on the drafts before being accepted), and the seed."""

    rates: tuple[float, ...]
    seed: int = 0

    def __post_init__(self) -> None:
        rates = self.rates
        if not isinstance(rates, tuple) or not rates:
            raise ConfigError(f"acceptance_rate: expected one rate or a list per draft position, got {rates!r}")
        for r in rates:
            if isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 <= r <= 1.0:
                raise ConfigError(f"acceptance_rate: each rate must be a probability in [0, 1], got {r!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"acceptance seed must be an integer >= 0, got {self.seed!r}")

    def draw(self, index: int, step: int, num_drafts: int) -> int:
        """Drafts accepted at request `index`'s `step`-th verification of `num_drafts` drafts."""
        rates, last = self.rates, len(self.rates) - 1
        key = _mix(_mix(_mix(self.seed) ^ index) ^ step)
        for pos in range(num_drafts):
            u = _mix(key ^ pos) / 2.0**64
            if u >= rates[min(pos, last)]:
                return pos
        return num_drafts

    def mean_accepted(self, num_drafts: int) -> float:
        """The expected drafts accepted per step of `num_drafts` (each position's chance that all up to it pass)."""
        total, p = 0.0, 1.0
        for pos in range(num_drafts):
            p *= self.rates[min(pos, len(self.rates) - 1)]
            total += p
        return total


def parse_rates(text: str | float | Sequence[float]) -> tuple[float, ...]:
    """`--acceptance-rate 0.8` or `0.9,0.8,0.7` (one per draft position); the API's number or list too."""
    out = []
    parts = text.split(",") if isinstance(text, str) else [text] if isinstance(text, int | float) else list(text)
    for part in parts:
        try:
            r = float(part)
        except ValueError:
            raise ConfigError(f"--acceptance-rate {text}: expected a probability, or one per draft position "
                              "separated by commas (0.9,0.8,0.7)") from None
        if not math.isfinite(r) or not 0.0 <= r <= 1.0:
            raise ConfigError(f"--acceptance-rate {text}: each rate must be a probability in [0, 1]")
        out.append(r)
    return tuple(out)


def listed(accept: tuple[int, ...], step: int, num_drafts: int) -> int:
    """A request's own list of accepted counts, used cyclically, clamped to the drafts verified."""
    return min(accept[step % len(accept)], num_drafts)
