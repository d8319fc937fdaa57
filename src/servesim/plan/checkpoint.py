"""A sweep's finished rows on disk as they arrive, so an interrupted sweep keeps them (`--resume`).

JSON lines: a header naming the sweep (a digest of its base options and measures), then one {"key", "row"} per
finished point, each flushed when written. Python's json writes floats by `repr`, so a row read back is the row
written, bit for bit. A checkpoint of another sweep (another workload, other SLOs) is refused, not mixed in.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from servesim.errors import ConfigError

HEADER = "servesim_sweep"


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


class Checkpoint:
    def __init__(self, path: str | Path, digest: str) -> None:
        self.path, self.digest = Path(path), digest
        self._file = None

    def load(self) -> dict[str, dict[str, Any]]:
        """The rows finished so far, by point key (empty when the file does not exist yet)."""
        if not self.path.exists():
            return {}
        rows: dict[str, dict[str, Any]] = {}
        with self.path.open() as f:
            for n, line in enumerate(f, 1):
                try:
                    item = json.loads(line)
                except json.JSONDecodeError:
                    if n > 1 and not line.endswith("\n"):  # the last line of an interrupted write: dropped
                        break
                    raise ConfigError(f"{self.path}:{n}: not a servesim sweep checkpoint (JSON lines)") from None
                if n == 1:
                    if not isinstance(item, dict) or HEADER not in item:
                        raise ConfigError(f"{self.path}: not a servesim sweep checkpoint (no {HEADER} header)")
                    if item[HEADER] != self.digest:
                        raise ConfigError(f"{self.path}: a checkpoint of another sweep (other workload, options "
                                          "or SLOs); give another --checkpoint path or delete it")
                    continue
                rows[item["key"]] = item["row"]
        return rows

    def open(self, resume: bool) -> None:
        """Append to the file when resuming; otherwise start it afresh."""
        fresh = not resume or not self.path.exists()
        self._file = self.path.open("w" if fresh else "a")
        if fresh:
            self._write({HEADER: self.digest})

    def add(self, key: str, row: dict[str, Any]) -> None:
        self._write({"key": key, "row": row})

    def _write(self, item: dict[str, Any]) -> None:
        assert self._file is not None
        self._file.write(json.dumps(item) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
