"""One writer for every file a command writes, and the checks made before a run starts.

Where the user points is where the bytes go:
- `-` is standard output;
- a symbolic link is followed: its target is written (atomically, beside the target) and the link stays a link;
- a target that is not a regular file (a character device, a FIFO, `/dev/stdout`) is written into directly;
- a regular file (or a new one) is written to a hidden temporary file beside it and renamed over it when complete,
  so a failed or interrupted write never leaves half a file, and an existing file keeps its permissions (a new one
  gets the usual 0666 less the umask, as `open()` gives);
- a folder is refused in one line.

`check_output_file` runs before the simulation: a path that cannot be written is a one-line error up front, not a
traceback after minutes of work, and nothing already written is lost.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from servesim.errors import ConfigError

STDOUT = "-"
_stdout: IO | None = None  # the real standard output while an output claims it (`claim_stdout`)


def is_stdout(path: str | Path) -> bool:
    return str(path) == STDOUT


def claim_stdout() -> None:
    """An output goes to standard output: until `release_stdout`, the command's own messages go to stderr, so that
    the two never mix (the CLI's entry point releases it when the command ends)."""
    global _stdout
    if _stdout is None:
        _stdout, sys.stdout = sys.stdout, sys.stderr


def release_stdout() -> None:
    global _stdout
    if _stdout is not None:
        sys.stdout, _stdout = _stdout, None


def _special(path: Path) -> bool:
    """An existing target that is neither a regular file nor a folder (after links): written into directly."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _where(path: Path) -> Path:
    """The regular file a write lands in: the link's final target when `path` is a symbolic link."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _folder_problem(folder: Path) -> str | None:
    if folder.is_dir():
        return None if os.access(folder, os.W_OK | os.X_OK) else f"folder {folder} is not writable"
    if folder.exists() or any(p.is_file() for p in folder.parents):
        return f"{folder} is not a folder (a file stands in the path)"
    return f"folder {folder} does not exist"


def check_output_file(path: str | Path, option: str) -> Path:
    """`path` can be written as a file: stdout (`-`), a writable device or FIFO, or a file (through its link) whose
    folder exists and is writable; never a folder."""
    path = Path(path)
    if is_stdout(path):
        claim_stdout()
        return path
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a folder; expected a file path")
    if _special(path):
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{option} {path}: is not writable")
        return path
    real = _where(path)
    problem = _folder_problem(real.parent if str(real.parent) else Path("."))
    if problem:
        raise ConfigError(f"{option} {path}: {problem}")
    if real.exists() and not os.access(real, os.W_OK):
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
    problem = _folder_problem(path.parent if str(path.parent) else Path("."))
    if problem:
        raise ConfigError(f"{option} {path}: {problem}")
    return path


@contextmanager
def open_output(path: str | Path, option: str = "output", binary: bool = False) -> Iterator[IO]:
    """A file object that writes to where `path` points (see the module's docstring); the write takes effect when
    the block ends without an error. An OS error is one line naming the option and the path."""
    path = Path(path)
    try:
        if is_stdout(path):
            out = _stdout or sys.stdout
            stream = out.buffer if binary else out
            yield stream
            stream.flush()
        elif _special(path):
            with open(path, "wb" if binary else "w") as f:
                yield f
        else:
            with _atomic(path, binary) as f:
                yield f
    except IsADirectoryError:
        raise ConfigError(f"{option} {path}: is a folder; expected a file path") from None
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None


@contextmanager
def _atomic(path: Path, binary: bool) -> Iterator[IO]:
    real = _where(path)
    folder = real.parent if str(real.parent) else Path(".")
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{real.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            yield f
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_output(path: str | Path, data: bytes | str, option: str = "output") -> int:
    """Write `data` where `path` points (see the module's docstring); the bytes written."""
    binary = isinstance(data, bytes)
    with open_output(path, option, binary=binary) as f:
        f.write(data)
    return len(data) if binary else len(data.encode("utf-8"))
