"""$/GPU-hour: what a sweep's cost per million output tokens is computed from.

The default table is a set of labelled assumptions, not quotes: prices change monthly and differ by provider,
commitment and region, so a planning run should pass its own (`--gpu-cost h100=4.0,a100=1.8`).

- a100-80gb 2.00 and h100-80gb 3.25: the middles of the "typical on-demand" ranges listed for early 2026 by
  pricegpu.pages.dev/blog/h100-vs-a100-cloud-price (A100 80GB SXM $1.49-2.49/h, H100 SXM 80GB $2.49-3.99/h).
- h200 4.00, l40s 1.00, mi300x 3.00: assumptions (no source), in the same market's proportions: H200 above H100,
  L40S well below A100, MI300X near H100.

Cost per million output tokens = $/GPU-hour x GPUs / 3600 / output tokens per second x 10^6, at the throughput
the point achieved (a point that is not loaded to capacity pays for idle GPUs, as a real deployment does).
"""

from __future__ import annotations

import math

from servesim.errors import ConfigError

DEFAULT_GPU_COST: dict[str, float] = {
    "a100-80gb": 2.00, "h100-80gb": 3.25,  # sourced: see the module's docstring
    "h200": 4.00, "l40s": 1.00, "mi300x": 3.00,  # assumptions
}


def parse_gpu_cost(specs: list[str] | str | dict[str, float] | None) -> dict[str, float]:
    """`h100=4.0,a100=1.8` (or repeated) -> the default table with those prices replaced or added. A name is a
    GPU's name or alias (`servesim gpus`), resolved to the GPU's name."""
    table = dict(DEFAULT_GPU_COST)
    if specs is None:
        return table
    if isinstance(specs, dict):
        items = [(k, v) for k, v in specs.items()]
    else:
        text = [specs] if isinstance(specs, str) else specs
        items = []
        for item in (s for spec in text for s in spec.replace(" ", ",").split(",") if s.strip()):
            name, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--gpu-cost {item!r}: expected GPU=DOLLARS_PER_HOUR, e.g. h100=4.0")
            items.append((name.strip(), value.strip()))
    for name, value in items:
        try:
            price = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"--gpu-cost {name}={value}: expected a number of dollars per GPU-hour") from None
        if not (math.isfinite(price) and price >= 0):
            raise ConfigError(f"--gpu-cost {name}={value}: expected a finite price >= 0 dollars per GPU-hour")
        table[gpu_name(name)] = price
    return table


def gpu_name(name: str) -> str:
    """A GPU's canonical name (`h100` -> `h100-80gb`); an unknown name is an error listing the known ones."""
    from servesim.cost.specs import load_gpu

    try:
        return load_gpu(name).name
    except ConfigError as exc:
        raise ConfigError(f"--gpu-cost {name}: {exc}") from None


def cost_per_million_tokens(usd_per_gpu_hour: float | None, num_gpus: int, tokens_per_s: float) -> float | None:
    """Dollars per 10^6 output tokens at `tokens_per_s`; None without a price or without output."""
    if usd_per_gpu_hour is None or tokens_per_s <= 0:
        return None
    return usd_per_gpu_hour * num_gpus / 3600.0 / tokens_per_s * 1e6
