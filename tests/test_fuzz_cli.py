"""Hostile values for every simulating command's options: a result, or one line and exit status 2, never a
traceback, a hang or a partial output file (issue 12)."""

import signal
import tempfile
from pathlib import Path

import pytest
from helpers import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NUMERIC = ["--max-num-batched-tokens", "--max-num-seqs", "--max-model-len", "--num-gpu-blocks", "--block-size",
           "--watermark", "--gpu-memory-utilization", "--long-prefill-token-threshold", "--swap-space",
           "--kv-bytes-per-token", "--pcie-bandwidth", "--decode-ms", "--prefill-token-ms", "--overhead-ms",
           "--request-rate", "--burstiness", "--num-requests", "--seed", "--rate-scale", "--random-input-len",
           "--random-output-len", "--random-range-ratio", "--random-prefix-len"]
TEXT = ["--policy", "--scheduling-policy", "--preemption-mode", "--cost", "--dtype", "--window", "--prompt-len",
        "--output-len", "--dataset-name", "--format"]
VALUES = ["0", "-1", "1", "3", "0.5", "nan", "inf", "-inf", "1e400", "1e-300", str(2**63), "99999999999999", "abc",
          "", "true", "uniform:1:0", "trace:nope", "1:2", "normal:-5:1"]
COMMANDS = [["run"], ["trace", "--limit", "3"], ["explain", "--no-counterfactual"],
            ["compare", "--policies", "continuous,vllm"]]


def _alarm(signum, frame):
    raise TimeoutError("a command ran past 30 s")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(COMMANDS),
       options=st.lists(st.tuples(st.sampled_from(NUMERIC + TEXT), st.sampled_from(VALUES)), min_size=1, max_size=3))
def test_hostile_option_values(monkeypatch, capsys, tmp_path, command, options):
    args = [*command, "--workload", "random", "--num-requests", "4", "--prompt-len", "64", "--output-len", "4",
            "--cost", "toy"]
    for name, value in options:
        args += [name, value]
    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # one per example: tmp_path is shared by all of them
    out = folder / "out.json"
    if command[0] in ("run", "trace"):
        args += ["--json", str(out)]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(30)
    try:
        code, _, err = cli(monkeypatch, capsys, *args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert "Traceback" not in err
    assert code in (0, 2), (args, err)
    if code == 2:
        lines = [line for line in err.splitlines() if not line.startswith(("servesim: warning:", "servesim: note:"))]
        assert len(lines) == 1 and lines[0].startswith("servesim: error: "), (args, err)
        assert not out.exists()  # nothing written by a run that failed
        assert not list(folder.iterdir())  # and no temporary file left behind


@pytest.mark.parametrize("args", [
    ["run", "--workload", "random", "--num-requests", "999999999999", "--cost", "toy"],
    ["run", "--workload", "seed", "--num-gpu-blocks", "99999999999999"],
    ["run", "--workload", "seed", "--max-num-seqs", str(2**40)],
])
def test_absurd_sizes_are_refused(monkeypatch, capsys, args):
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and err.startswith("servesim: error: ") and err.count("\n") == 1, err
