"""Command-line entry point. User mistakes become one-line errors with exit status 2, never tracebacks."""

from __future__ import annotations

import sys

from servesim.cli.app import app
from servesim.errors import ServesimError

# Each module registers its commands on `app`.
from servesim.cli import analysis, costs, sim, workload  # noqa: E402,F401  isort: skip


def main() -> None:
    try:
        app()
    except ServesimError as exc:
        print(f"servesim: error: {exc}", file=sys.stderr)
        sys.exit(2)
