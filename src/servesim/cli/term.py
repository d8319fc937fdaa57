"""Rich consoles, made when a command first prints: importing rich takes ~0.03 s, and `servesim run` prints plain
text without it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


class LazyConsole:
    """A rich `Console(**settings)`, created on the first `print`."""

    def __init__(self, **settings: Any) -> None:
        self._settings = settings
        self._console: Console | None = None

    def print(self, *objects: Any, **options: Any) -> None:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._settings)
        self._console.print(*objects, **options)
