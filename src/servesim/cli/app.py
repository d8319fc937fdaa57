"""The typer application every command module registers on."""

from typing import Annotated

import typer

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
