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


# every writer, pointed at a hostile target: a result written where it points, or one line and exit 2; what stood
# there before is never lost or turned into something else
WRITERS = [["run", "--workload", "seed", "--json"], ["trace", "--workload", "seed", "--json"],
           ["export", "perfetto", "--workload", "seed", "-o"], ["workload", "generate", "--num-requests", "3"],
           ["capacity", "--workload", "seed", "--goodput", "ttft:500", "--json"]]
TARGETS = ["new", "existing", "link", "dangling-link", "link-to-folder", "folder", "file-as-folder",
           "missing-folder", "fifo", "stdout"]


def _target(folder: Path, kind: str) -> tuple[str, Path | None]:
    """The path to give, and the file that must end up holding the output (None: refused, or stdout)."""
    import os

    (folder / "sub").mkdir()
    (folder / "afile").write_text("keep me")
    made = {"new": folder / "out", "existing": folder / "afile", "link": folder / "sub" / "t",
            "dangling-link": folder / "sub" / "d"}
    if kind in ("link", "dangling-link"):
        (folder / "l").symlink_to(made[kind])
        if kind == "link":
            made[kind].write_text("old")
        return str(folder / "l"), made[kind]
    if kind == "link-to-folder":
        (folder / "l").symlink_to(folder / "sub")
        return str(folder / "l"), None
    if kind == "fifo":
        os.mkfifo(folder / "pipe")
        return str(folder / "pipe"), None
    path = {"folder": folder / "sub", "file-as-folder": folder / "afile" / "x", "missing-folder": folder / "no" / "x",
            "stdout": Path("-")}.get(kind, made.get(kind))
    return str(path), made.get(kind)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(WRITERS), kind=st.sampled_from(TARGETS))
def test_hostile_output_targets(monkeypatch, capsys, tmp_path, command, kind):
    import threading

    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path, lands = _target(folder, kind)
    got: list[bytes] = []
    if kind == "fifo":  # a reader, as a shell's `<(...)` would be
        threading.Thread(target=lambda: got.append(Path(path).read_bytes()), daemon=True).start()
    code, out, err = cli(monkeypatch, capsys, *command, path)
    assert "Traceback" not in err and code in (0, 2), (command, kind, err)
    if kind in ("folder", "link-to-folder", "file-as-folder", "missing-folder"):
        assert code == 2 and err.strip().splitlines()[-1].startswith("servesim: error: "), err
    else:
        assert code == 0, err
    if lands is not None:
        assert lands.stat().st_size > 0 and lands.read_text() not in ("old", "keep me")
    if kind in ("link", "dangling-link"):
        assert Path(path).is_symlink()
    if kind == "stdout":
        assert out.strip()
    if kind == "fifo":
        import time

        for _ in range(50):
            if got:
                break
            time.sleep(0.05)
        assert got and got[0]
    if kind != "existing":
        assert (folder / "afile").read_text() == "keep me"
