"""Built-in workloads: shipped with the package, loadable without polars, samples faithful to their traces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from servesim.workloads import BUILTIN_WORKLOADS, builtin_table, load_trace, load_workload

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
SAMPLES = {  # built-in: (trace file, window in seconds, rows) as in data/workloads/ATTRIBUTION.md
    "azure-conv-sample": ("AzureLLMInferenceTrace_conv.csv", 120, 456),
    "azure-code-sample": ("AzureLLMInferenceTrace_code.csv", 240, 594),
    "mooncake-sample": ("mooncake_conversation_trace.jsonl", 120, 339),
}


@pytest.mark.parametrize("name", sorted(BUILTIN_WORKLOADS))
def test_every_builtin_loads_sorted(name):
    reqs = load_workload(name)
    assert reqs and all(a.arrival_time <= b.arrival_time for a, b in zip(reqs, reqs[1:], strict=False))


def test_builtins_load_without_polars():
    code = (
        "import sys; sys.modules['polars'] = None; sys.modules['pyarrow'] = None\n"
        "from servesim.workloads import load_workload, BUILTIN_WORKLOADS\n"
        "print(sum(len(load_workload(n)) for n in BUILTIN_WORKLOADS))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) == 5 + 3 + 200 + 456 + 594 + 339  # seed, lesson-slots, mixed, the three samples


def test_trace_files_without_polars_name_the_extra(tmp_path):
    path = tmp_path / "v.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n")
    code = (
        "import sys; sys.modules['polars'] = None\n"
        "from servesim.workloads import load_workload\n"
        f"load_workload({str(path)!r})"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install 'servesim[data]'" in res.stderr


def test_mixed_has_its_three_classes():
    t = builtin_table("mixed")
    kinds = {rid.split("-")[0] for rid in t.request_ids}
    assert kinds == {"chat", "document", "generation"} and len(t) == 200
    docs = np.array([rid.startswith("document") for rid in t.request_ids])
    assert t.prompt_len[docs].min() >= 4000  # uniform:4000:8000
    assert t.arrival_time[-1] == pytest.approx(50.0)  # 200 requests at 4 req/s


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_samples_are_the_first_minutes_of_their_trace(name):
    file, window, rows = SAMPLES[name]
    if not (TRACES / file).exists():
        pytest.skip(f"{TRACES / file} not present (the public traces live in ../shared/traces)")
    full = load_trace(TRACES / file)
    sample = builtin_table(name)
    first = full.take(np.flatnonzero(full.arrival_time < window))
    assert len(sample) == len(first) == rows
    assert sample.prompt_len.tolist() == first.prompt_len.tolist()
    assert sample.output_len.tolist() == first.output_len.tolist()
    assert np.allclose(sample.arrival_time, first.arrival_time, rtol=0, atol=1e-9)
    if name == "mooncake-sample":
        assert sample.hash_block_size == 512
        assert sample.hash_ids.tolist() == first.hash_ids.tolist()
