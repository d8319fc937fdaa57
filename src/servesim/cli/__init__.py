"""Command-line entry point. User mistakes become one-line errors with exit status 2, never tracebacks."""

from __future__ import annotations

import gc
import os
import sys

# Before numpy is first imported (by the command modules below): the commands do no large linear algebra, and
# OpenBLAS starting a thread per core costs ~0.04 s of every start on two cores. An explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from servesim.cli.app import app, only_command  # noqa: E402
from servesim.errors import ServesimError  # noqa: E402
from servesim.output import release_stdout  # noqa: E402

# Each module registers its commands on `app`.
from servesim.cli import analysis, costs, diff, plan, sim, validate, visual, workload  # noqa: E402,F401  isort: skip


def main() -> None:
    try:
        with only_command(sys.argv[1:]):
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
    finally:
        release_stdout()
    sys.exit(code if isinstance(code, int) else 0)


def entry() -> None:
    """The program (`servesim`, `python -m servesim.cli`): `main()`, then out without tearing the interpreter down.
    Freeing every module and object one by one takes ~0.1 s after a large run; the operating system frees the
    process at once. In-process callers (the tests) call `main()`, which raises SystemExit as usual."""
    gc.freeze()  # what the imports made lives to the end: the collector need not walk it again (~0.01 s)
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    if not isinstance(code, int):
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001  e.g. a closed pipe: let the interpreter report it as it always does
        sys.exit(code)
    os._exit(code)


def _fail(message: str) -> None:
    print(f"servesim: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(2)
