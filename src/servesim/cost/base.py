"""What every cost model implements: the duration of one step from the step's exact composition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step as a cost model sees it, one position per scheduled request (in schedule order).

    A prefill chunk of `num_new_tokens[i]` tokens attends to `num_context_tokens[i]` tokens already in the KV cache
    and causally within itself; a decode (`is_decode[i]`, one new token) reads its whole KV.
    `num_sampled` requests reach the end of their known tokens and sample one token (the LM head runs for them).
    """

    num_new_tokens: tuple[int, ...]
    num_context_tokens: tuple[int, ...]
    is_decode: tuple[bool, ...]
    num_sampled: int

    @property
    def num_decodes(self) -> int:
        return sum(self.is_decode)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(n for n, d in zip(self.num_new_tokens, self.is_decode) if not d)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @classmethod
    def of(cls, decodes: list[int] | tuple[int, ...] = (), prefills=(), num_sampled: int | None = None) -> StepShape:
        """Build a shape from decode contexts and (tokens, context) prefill chunks; handy in tests and the CLI."""
        new = tuple([1] * len(decodes) + [t for t, _ in prefills])
        ctx = tuple(list(decodes) + [c for _, c in prefills])
        dec = tuple([True] * len(decodes) + [False] * len(prefills))
        return cls(new, ctx, dec, len(decodes) + len(prefills) if num_sampled is None else num_sampled)


@dataclass(frozen=True, slots=True)
class OpCost:
    """One line of a breakdown: an operator summed over all layers of the step."""

    name: str  # vLLM module names where they exist: qkv_proj, o_proj, gate_up_proj, down_proj, lm_head
    seconds: float
    bound: str  # "compute" | "memory" | "communication" | "overhead"
    flops: float = 0.0
    bytes: float = 0.0


@runtime_checkable
class CostModel(Protocol):
    """Gives the duration, in seconds, of a step of the given shape."""

    name: str

    def step_time(self, shape: StepShape) -> float: ...
