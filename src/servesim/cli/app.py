"""The typer application every command module registers on."""

import typer

app = typer.Typer(
    name="servesim",
    help="Trace, simulate and explain how an LLM serving engine schedules work, iteration by iteration.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
