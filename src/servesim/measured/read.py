"""Which reader a measured run's file needs: a vllm bench serve result (`.json`), or AIPerf's per-request export
(`profile_export.jsonl`, or the artifacts folder holding it)."""

from __future__ import annotations

from pathlib import Path

from servesim.errors import ConfigError
from servesim.measured.run import MeasuredRun


def read_run(path: str | Path) -> MeasuredRun:
    """A vLLM result file (`.json`), or AIPerf's per-request export (`profile_export.jsonl`, or the artifacts
    folder holding it)."""
    from servesim.measured import aiperf_export, vllm_result

    path = Path(path)
    if path.is_dir():
        inner = path / aiperf_export.RECORDS_FILE
        if not inner.is_file():
            raise ConfigError(f"{path}: a folder without {aiperf_export.RECORDS_FILE}; expected a vllm bench serve "
                              "result .json, AIPerf's profile_export.jsonl or its artifacts folder")
        return aiperf_export.read(inner)
    if path.suffix == ".jsonl":
        return aiperf_export.read(path)
    return vllm_result.read(path)
