"""A rich progress bar that appears only when a simulation runs longer than about two seconds (rich is imported
then, not before: most runs are over sooner)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

SHOW_AFTER_S = 2.0


class SimProgress:
    """Pass as `simulate(progress=...)`; use as a context manager. Wall time decides only whether to show the bar:
    it never enters a result."""

    def __init__(self, console: Console | None = None) -> None:
        self._t0 = time.monotonic()
        self._bar: Progress | None = None
        self._task = None
        self._console = console  # None: standard error

    def __call__(self, now: float, done: int, total: int, waiting: int) -> None:
        if self._bar is None:
            if time.monotonic() - self._t0 < SHOW_AFTER_S:
                return
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            console = Console(stderr=True) if self._console is None else self._console
            self._bar = Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("requests · simulated {task.fields[sim]} · queue {task.fields[queue]}"),
                                 TimeElapsedColumn(), console=console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("sim", total=total, sim="", queue=0)
        self._bar.update(self._task, completed=done, sim=f"{now:,.1f} s", queue=waiting)

    def __enter__(self) -> SimProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
