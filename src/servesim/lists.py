"""Comma-separated values as every option that takes a list reads them (`--request-rate 1,2,4`, `--set K=V1,V2`,
`--router a,b`, `weighted:NAME=W,...`): items stripped, an empty item refused in one line, never dropped."""

from __future__ import annotations

from servesim.errors import ConfigError


def split_items(text: str, option: str) -> list[str]:
    """`text`'s comma-separated items; an empty one (`1,,2`, a trailing comma) is refused naming `option`."""
    items = [t.strip() for t in str(text).split(",")]
    if any(not t for t in items):
        raise ConfigError(f"{option} {text!r}: an empty item; expected comma-separated values, e.g. 1,2,4")
    return items
