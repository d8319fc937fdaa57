"""Command-line entry point. User mistakes become one-line errors with exit status 2, never tracebacks."""

from __future__ import annotations

import sys

from servesim.cli.app import app
from servesim.errors import ServesimError

# Each module registers its commands on `app`.
from servesim.cli import analysis, costs, sim, workload  # noqa: E402,F401  isort: skip


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except ServesimError as exc:
        _fail(str(exc))
    except Exception as exc:
        # click's UsageError family (a bad flag, a bad value, a missing argument), duck-typed because typer
        # vendors click in recent releases: one line, exit status 2, as for any other user mistake
        if hasattr(exc, "format_message") and getattr(exc, "exit_code", None) == 2:
            message = exc.format_message()
            if not message.strip():  # no arguments at all: the help was printed
                sys.exit(2)
            _fail(message)
        raise
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str) -> None:
    print(f"servesim: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(2)
