"""The public traces in ../shared/traces load with the facts ../shared/traces/SOURCES.md states."""

from __future__ import annotations

import gzip
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from servesim.workloads import load_trace, workload_stats

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


def trace(name: str) -> Path:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present (the public traces live in ../shared/traces)")
    return path


# SOURCES.md: rows; ContextTokens mean / median / max; GeneratedTokens mean / median / max
AZURE = {
    "AzureLLMInferenceTrace_code.csv": (8819, (2048, 1469, 7437), (28, 13, 1899)),
    "AzureLLMInferenceTrace_conv.csv": (19366, (1155, 1020, 14050), (211, 129, 1000)),
}


@pytest.mark.parametrize("name", sorted(AZURE))
def test_azure_trace_facts(name):
    rows, prompt, output = AZURE[name]
    t = load_trace(trace(name))
    s = workload_stats(t)
    assert s["count"] == rows and t.notes == ()
    assert (round(s["mean_prompt_len"]), s["p50_prompt_len"], s["max_prompt_len"]) == prompt
    assert (round(s["mean_output_len"]), s["p50_output_len"], s["max_output_len"]) == output
    # duration: last TIMESTAMP minus first, read with the standard library (SOURCES.md: rows span ~1 h)
    lines = trace(name).read_text().splitlines()
    stamp = lambda line: datetime.fromisoformat(line.split(",")[0][:26])  # noqa: E731  (microseconds)
    expected = (stamp(lines[-1]) - stamp(lines[1])).total_seconds()
    assert s["duration_s"] == pytest.approx(expected, abs=1e-6)
    assert 50 * 60 < s["duration_s"] < 60 * 60


def test_mooncake_trace_facts():
    # SOURCES.md: 12,031 lines; timestamps 0 .. 3,536,999 ms; input mean 12,035 (max 126,195), output mean 343
    # (max 2,000); len(hash_ids) == ceil(input_length / 512)
    t = load_trace(trace("mooncake_conversation_trace.jsonl"))
    s = workload_stats(t)
    assert s["count"] == 12031
    assert s["duration_s"] == 3536.999  # timestamps 0 .. 3,536,999 ms
    assert (round(s["mean_prompt_len"]), s["max_prompt_len"]) == (12035, 126195)
    assert (round(s["mean_output_len"]), s["max_output_len"]) == (343, 2000)
    lengths = np.diff(t.hash_offsets)
    assert np.array_equal(lengths, -(-t.prompt_len // 512))  # len(hash_ids) == ceil(input_length / 512)
    assert t.hash_block_size == 512


def test_gzipped_trace_loads_the_same(tmp_path):
    src = trace("AzureLLMInferenceTrace_code.csv")
    gz = tmp_path / "code.csv.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    a, b = load_trace(src), load_trace(gz)
    assert np.array_equal(a.arrival_time, b.arrival_time) and np.array_equal(a.prompt_len, b.prompt_len)


def test_first_rows_match_vidur_splitwise_rendering():
    # SOURCES.md: vidur's splitwise_code.csv begins 0.0,4808,10 / 0.052,3180,8, the Azure code trace re-expressed
    t = load_trace(trace("AzureLLMInferenceTrace_code.csv"))
    assert t.prompt_len[:2].tolist() == [4808, 3180] and t.output_len[:2].tolist() == [10, 8]
    assert math.isclose(t.arrival_time[1], 0.052, abs_tol=1e-9)
