"""One writer for every output (`servesim.output`): where the user points is where the bytes go. Everything is made
in a temporary folder (never the machine's own device files: the tests run as root in CI)."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest
from helpers import SHARED, cli

from servesim.errors import ConfigError
from servesim.output import check_output_file, open_output, write_output

SCENARIO = SHARED / "conformance" / "scenarios" / "01_seed_budget256.json"

# every command that writes a file, with the option that takes it (the path is appended)
WRITERS = {
    "run --json": ["run", "--workload", "seed", "--json"],
    "trace --json": ["trace", "--workload", "seed", "--json"],
    "report -o": ["report", "--workload", "seed", "-o"],
    "export perfetto -o": ["export", "perfetto", "--workload", "seed", "-o"],
    "capacity --json": ["capacity", "--workload", "seed", "--goodput", "ttft:500", "--json"],
    "workload generate": ["workload", "generate", "--num-requests", "5"],
    "workload stats --plot": ["workload", "stats", "seed", "--plot"],
    "conform --out": ["conform", str(SCENARIO), "--out"],
    "sweep -o": ["sweep", "--workload", "seed", "--cost", "toy", "-o"],
}


def _suffix(name: str) -> str:
    return {"report -o": ".html", "workload generate": ".csv", "workload stats --plot": ".png",
            "sweep -o": ".csv"}.get(name, ".json")


@pytest.mark.parametrize("name", WRITERS)
def test_a_symlink_is_written_through_and_stays_a_link(monkeypatch, capsys, tmp_path, name):
    if name == "conform --out" and not SHARED.exists():
        pytest.skip("needs ../shared")
    (tmp_path / "real").mkdir()
    target, link = tmp_path / "real" / f"target{_suffix(name)}", tmp_path / f"link{_suffix(name)}"
    link.symlink_to(target)
    code, _, err = cli(monkeypatch, capsys, *WRITERS[name], str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.stat().st_size > 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()  # as open() makes a file, not mkstemp's 0600
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_save_result_through_a_link(monkeypatch, capsys, tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "r.json"
    (tmp_path / "r.json").symlink_to(target)
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "seed", "--save-result", "--result-dir",
                       str(tmp_path), "--result-filename", "r.json")
    assert code == 0, err
    assert (tmp_path / "r.json").is_symlink() and json.loads(target.read_text())["completed"] == 5


def test_dash_is_stdout_and_the_messages_move_to_stderr(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "run", "--workload", "seed", "--json", "-")
    assert code == 0
    data = json.loads(out)  # stdout holds the result file and nothing else
    assert data["completed"] == 5 and "Serving Benchmark Result" in err


def test_workload_generate_to_stdout(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "workload", "generate", "-", "--num-requests", "3", "--prompt-len",
                         "7", "--output-len", "2")
    assert code == 0
    assert out.splitlines() == ["arrival_time,prompt_len,output_len"] + ["0.0,7,2"] * 3
    assert "wrote 3 requests" in err


def test_a_fifo_is_written_into(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    check_output_file(fifo, "--json")
    assert write_output(fifo, b"hello\n") == 6
    reader.join(5)
    assert got == [b"hello\n"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_character_device_is_written_into_not_replaced(tmp_path):
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a null device of our own, in the temporary folder
    except (PermissionError, OSError):
        pytest.skip("cannot make a device node here")
    write_output(dev, b"x" * 100)
    assert stat.S_ISCHR(dev.stat().st_mode)


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is a folder; expected a file path"):
        check_output_file(tmp_path, "--json")


def test_a_file_in_the_path_is_named(monkeypatch, capsys, tmp_path):
    (tmp_path / "f").write_text("keep me")
    code, out, err = cli(monkeypatch, capsys, "workload", "generate", str(tmp_path / "f" / "g.csv"))
    assert code == 2 and err.count("\n") == 1
    assert err == f"servesim: error: output {tmp_path / 'f' / 'g.csv'}: {tmp_path / 'f'} is not a folder (a file " \
                  "stands in the path)\n"
    assert (tmp_path / "f").read_text() == "keep me"


def test_a_read_only_folder(monkeypatch, capsys, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, _, err = cli(monkeypatch, capsys, "run", "--workload", "seed", "--json", str(ro / "x.json"))
    finally:
        ro.chmod(0o755)
    if os.geteuid() == 0:  # root writes anywhere, as open() would let it
        assert code == 0 and json.loads((ro / "x.json").read_text())["completed"] == 5
    else:
        assert code == 2 and err == f"servesim: error: --json {ro / 'x.json'}: folder {ro} is not writable\n"


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("old")
    path.chmod(0o640)
    with pytest.raises(RuntimeError), open_output(path) as f:
        f.write("half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old" and list(tmp_path.iterdir()) == [path]
    write_output(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640  # its permissions kept


def test_a_dangling_link_creates_its_target(tmp_path):
    target, link = tmp_path / "t.json", tmp_path / "l.json"
    link.symlink_to(target)
    check_output_file(link, "--json")
    write_output(link, "{}")
    assert link.is_symlink() and target.read_text() == "{}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
