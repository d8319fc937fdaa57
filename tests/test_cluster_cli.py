"""The cluster options on the command line (issue 16)."""

import json

from typer.testing import CliRunner

from servesim.cli import app
from servesim.errors import ConfigError


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_routers_lists_every_router():
    out = invoke("routers")
    assert out.exit_code == 0
    assert [line.split()[0] for line in out.output.splitlines()] == [
        "round-robin", "random", "least-loaded", "least-kv", "prefix-aware", "vllm-dp",
        "weighted:prefix=3,queue=2,kv=2"]


def test_run_on_replicas_writes_replicas_and_pd_figures(tmp_path):
    # the seed workload (5 requests) on 2 replicas, round-robin: 3 + 2 requests
    out = invoke("run", "--workload", "seed", "--cost", "toy", "--num-replicas", "2",
                 "--json", str(tmp_path / "a.json"))
    assert out.exit_code == 0, out.output
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["completed"] == 5 and [r["requests"] for r in data["replicas"]] == [3, 2]
    out = invoke("run", "--workload", "seed", "--cost", "toy", "--prefill-replicas", "1", "--decode-replicas", "1",
                 "--json", str(tmp_path / "b.json"))
    assert out.exit_code == 0, out.output
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["kv_transfer_count"] == 5 and [r["role"] for r in data["replicas"]] == ["prefill", "decode"]


def test_cluster_options_refused_where_not_taken():
    for args in (("run", "--router", "fastest"),
                 ("run", "--prefill-replicas", "1"), ("run", "--kv-transfer-bandwidth", "1e9")):
        out = invoke(*args)  # (the CLI's main prints a ConfigError as one line and exits 2)
        assert isinstance(out.exception, ConfigError), args
