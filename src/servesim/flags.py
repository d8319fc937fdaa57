"""The one helper every dataclass of CLI flags uses (`cli.options.SimOptions` mixes the engines' and the clients'
flag classes in): a typer option with its names and help."""

from typing import Any

import typer


def opt(*names: str, help: str) -> Any:
    return typer.Option(*names, help=help)
