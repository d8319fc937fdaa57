"""`--policy trtllm` through `compare`, `sweep`, `report` and a cluster: each runs, and says what `run` says."""

import json
import re

from helpers import cli

# the Azure conversation sample's first 12 requests on the roofline (Llama-3-8B on an H100): a host preset in play
ROOF = ("--workload", "azure-conv-sample", "--num-prompts", "12", "--model", "llama-3-8b", "--gpu", "h100-80gb")


def ok(monkeypatch, capsys, *args):
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    return out, err


def test_compare_policies_side_by_side(monkeypatch, capsys):
    # the seed under the lesson's sizes, carried over as TensorRT-LLM's (max_num_tokens 256, chunked): its
    # FIRST_COME_FIRST_SERVED cut of 252 rounds down to the 32-token block, 224, and a chunk step takes 4 decodes
    # + 22.4 ms = 26.4 ms against vLLM's 4 + 25.2 = 29.2 ms
    out, _ = ok(monkeypatch, capsys, "compare", "--workload", "seed", "--policies", "vllm,trtllm")
    text = " ".join(out.split())
    assert "trtllm: max_num_batched_tokens 256 as max_num_tokens 256" in text
    assert "chunks of up to 224 tokens instead of 252 cut the worst gap between tokens from 29.2 ms to 26.4 ms" in text


def _mean_ttft(out):
    return re.search(r"Mean TTFT \(ms\)\s*│\s*([\d.]+)\s*│\s*([\d.]+)", out).groups()


def test_compare_set_runs_the_policys_host_preset(monkeypatch, capsys, tmp_path):
    # --set under --policy trtllm: each column is `run --policy trtllm` with that value, its host preset as the
    # engine's flags set it (here the host in series, --disable_overlap_scheduler; the columns were priced with
    # the default preset, overlapped, before)
    off = ("--policy", "trtllm", "--disable_overlap_scheduler")
    out, _ = ok(monkeypatch, capsys, "compare", *ROOF, *off, "--set", "trtllm.max_batch_size=2,8")
    for value, column in zip(("2", "8"), _mean_ttft(out)):
        path = tmp_path / f"run{value}.json"
        ok(monkeypatch, capsys, "run", *ROOF, *off, "--max_batch_size", value, "--json", str(path))
        assert f"{json.loads(path.read_text())['mean_ttft_ms']:.2f}" == column


def test_sweep_rows_are_the_runs(monkeypatch, capsys, tmp_path):
    out = tmp_path / "s.json"
    ok(monkeypatch, capsys, "sweep", *ROOF, "--policies", "trtllm", "--request-rate", "8", "--set",
       "trtllm.max_batch_size=2,64", "--workers", "1", "--json", str(out))
    rows = json.loads(out.read_text())["rows"]
    assert [r["trtllm.max_batch_size"] for r in rows] == [2, 64]
    for r in rows:
        one = tmp_path / "one.json"
        ok(monkeypatch, capsys, "run", *ROOF, "--policy", "trtllm", "--request-rate", "8", "--max_batch_size",
           str(r["trtllm.max_batch_size"]), "--json", str(one))
        ran = json.loads(one.read_text())
        for key in ("completed", "duration", "p99_ttft_ms", "mean_tpot_ms", "max_concurrent_requests"):
            assert r[key] == ran[key], key
    assert rows[0]["p99_ttft_ms"] > rows[1]["p99_ttft_ms"]  # two active requests queue the arrivals


def test_report_lays_trtllm_beside_the_other_engines(monkeypatch, capsys, tmp_path):
    # --policies with engines of their own knobs: each gets the lesson's sizes under its own names (as compare
    # does; the report refused them before)
    page = tmp_path / "r.html"
    out, err = ok(monkeypatch, capsys, "report", "--workload", "seed", "--policies", "vllm,sglang,trtllm",
                  "-o", str(page))
    assert "trtllm: max_num_batched_tokens 256 as max_num_tokens 256" in " ".join(err.split())
    html = page.read_text()
    assert all(f'"{name}"' in html for name in ("vllm", "sglang", "trtllm"))


def test_a_cluster_of_two_runs_the_overlap_schedulers_last_steps(monkeypatch, capsys):
    # round-robin deals the seed's d0 d1 d2 d3 L (in arrival order) to replicas 0 1 0 1 0. Each request computes
    # its prompt, one token per output but the last... and, the overlap scheduler, one discarded token after it:
    # d (32 + 40 outputs) 32 + 39 + 1 = 72 tokens, L (2000 + 5) 2000 + 4 + 1 = 2005; replica 0: 72 + 72 + 2005 =
    # 2,149, replica 1: 144. The last extra steps run although every request has finished
    out, _ = ok(monkeypatch, capsys, "run", "--workload", "seed", "--policy", "trtllm", "--num-replicas", "2")
    assert re.search(r"replica-0\s+3 requests\s+2,149 tokens", out)
    assert re.search(r"replica-1\s+2 requests\s+144 tokens", out)
