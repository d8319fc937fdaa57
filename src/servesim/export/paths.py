"""Output paths checked before a run starts: a path that cannot be written is a one-line error up front, not a
traceback after minutes of simulation, and nothing already written is lost."""

from __future__ import annotations

import os
from pathlib import Path

from servesim.errors import ConfigError


def check_output_file(path: str | Path, option: str) -> Path:
    """`path` can be created or replaced as a file: its folder exists and is writable, it is not a folder."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a folder; expected a file path")
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: folder {parent} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{option} {path}: file exists and is not writable")
    return path


def check_output_dir(path: str | Path, option: str) -> Path:
    """`path` is a writable folder, or can be made as one (its parent exists and is writable)."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise ConfigError(f"{option} {path}: is a file; expected a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"{option} {path}: folder is not writable")
        return path
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: folder {parent} is not writable")
    return path
