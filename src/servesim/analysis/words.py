"""Numbers in sentences: fixed-point, never scientific notation."""

from __future__ import annotations


def number(x: float, sign: bool = False) -> str:
    """`12345`, `29.2`, `0.8`, `0.0012` (as the lesson writes them); a magnitude below 1e-6 reads 0."""
    a = abs(x)
    if a >= 1000:
        text = f"{x:.0f}"
    elif a >= 0.01:
        text = f"{x:.4g}"  # 4 significant digits, fixed-point in this range
    else:
        text = f"{x:.6f}".rstrip("0").rstrip(".")
        if text in ("0", "-0", ""):
            text = "0"
    if sign and not text.startswith("-"):
        text = "+" + text
    return text


def ms(seconds: float) -> str:
    return f"{number(seconds * 1000)} ms"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"
