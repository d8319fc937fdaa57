"""The typer application every command module registers on."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from typer.main import get_command_name

app = typer.Typer(
    name="servesim",
    help="Trace, simulate and explain how an LLM serving engine schedules work, iteration by iteration.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # click's plain help: wraps at any width and never cuts an option's name
)


def _version(value: bool) -> None:
    if value:
        from servesim.version import __version__

        print(f"servesim {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Trace, simulate and explain how an LLM serving engine schedules work, iteration by iteration."""


@contextmanager
def only_command(args: list[str]) -> Iterator[None]:
    """Typer turns every registered command into a click command at each start (the simulating commands have some
    150 options each: ~0.1 s in all), yet a process runs one. When the first argument names a command or a group,
    only that one is built for the call; the top-level help, --version and an unknown name still see them all."""
    name = args[0] if args else ""
    commands = [c for c in app.registered_commands if (c.name or get_command_name(c.callback.__name__)) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        yield
        return
    saved = app.registered_commands, app.registered_groups
    app.registered_commands, app.registered_groups = commands, groups
    try:
        yield
    finally:
        app.registered_commands, app.registered_groups = saved
