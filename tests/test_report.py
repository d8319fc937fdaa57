"""`servesim report`: the figures' data, the page (self-contained, bounded), the PNGs and the notebook's plots.

Seed numbers (../shared/spec/lesson.txt, derived in tests/test_seed.py): toy cost 1 ms per decode, 0.1 ms per
prefill token; vllm at budget 256 cuts L's 2000-token prompt into 7 x 252 (29.2 ms steps) + 236 (27.6 ms) beside
4 decodes; continuous prefills it whole in one 204 ms step; static makes it wait (batch_closed) and then runs it
alone in a 200 ms step.
"""

import functools
import json
import re

import numpy as np
import pytest
from helpers import cli
from hypothesis import given
from hypothesis import strategies as st

from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.report.html import headline, report_html
from servesim.report.view import cdf, run_view, step_panel
from servesim.workloads import load_workload

MS = 1e-3


def seed(policy, **cfg):
    if policy == "vllm":
        cfg.setdefault("max_num_batched_tokens", 256)
    return simulate(load_workload("seed"), EngineConfig(max_num_seqs=8, **cfg), policy, "toy")


@pytest.fixture(scope="module")
def views():
    return [run_view(p, seed(p)) for p in ("static", "continuous", "vllm")]


@pytest.fixture(scope="module")
def page(views):
    return report_html(views, "servesim report: seed", "test")


def test_step_panel_shows_eight_short_steps_against_one_stall(views):
    static, continuous, vllm = (v.panel for v in views)
    assert not vllm.binned and vllm.start.size == 40
    assert vllm.width[3:11] == pytest.approx([29.2 * MS] * 7 + [27.6 * MS])
    assert vllm.prefill[3:11].tolist() == [252] * 7 + [236]
    assert vllm.decode[3:11].tolist() == [4] * 8
    assert vllm.budget[0] == 256
    assert continuous.width[3] == pytest.approx(204 * MS) and continuous.prefill[3] == 2000
    assert static.width[40] == pytest.approx(200 * MS) and static.prefill[40] == 2000


def test_headlines_state_the_stall_and_its_absence(views):
    assert [headline(v) for v in views] == [
        "static: longest step 200 ms (step 40: 2000 prefill tokens beside 0 decodes); worst gap between two tokens "
        "4 ms (d0, step 1)",
        "continuous: longest step 204 ms (step 3: 2000 prefill tokens beside 4 decodes); worst gap between two "
        "tokens 204 ms (d0, step 3)",
        "vllm: longest step 29.2 ms (step 3: 252 prefill tokens beside 4 decodes); worst gap between two tokens "
        "29.2 ms (d0, step 3)",
    ]


def test_gantt_bars_carry_chunks_steps_and_waiting_reasons(views):
    static, _, vllm = views
    chunks = [b for b in vllm.bars if b.request_id == "L" and b.kind == "prefill"]
    assert len(chunks) == 8
    assert chunks[0].hover.startswith("L · prefill 252 tokens · step 3<br>20.8 ms to 50 ms (29.2 ms)")
    queued = next(b for b in static.bars if b.request_id == "L" and b.kind == "queued")
    assert "waited: batch_closed in 37 steps" in queued.hover
    assert vllm.rows == ["d0", "d1", "d2", "d3", "L"] and vllm.exact and vllm.notes == []


def test_latency_cdfs_hold_vllm_bench_serve_values(views):
    _, continuous, vllm = views
    x, y = continuous.cdfs["itl"]
    assert y[0] == 0 and y[-1] == 1 and x[-1] == pytest.approx(204)  # the stall is the largest ITL
    assert vllm.cdfs["itl"][0][-1] == pytest.approx(29.2)
    ttft = vllm.cdfs["ttft"][0]
    assert ttft[-1] == pytest.approx(232.8)  # L's TTFT (tests/test_seed.py)


def test_weighted_cdf_repeats_each_value():
    x, y = cdf(np.array([2.0, 1.0, np.nan]), np.array([1, 3, 5]))
    assert x.tolist() == [1.0, 1.0, 2.0] and y.tolist() == [0.0, 0.75, 1.0]


@functools.cache
def azure_sample():
    return simulate(load_workload("azure-conv-sample"), None, "vllm", "toy", record="summary")


@given(st.integers(2, 60))
def test_time_bins_keep_every_steps_tokens(points):
    r = azure_sample()
    p = step_panel(r, max_points=points)
    counts = p.last_step - p.first_step + 1
    assert p.binned and p.start.size <= points and counts.sum() == len(r.step_log)
    assert np.dot(p.decode, counts) == pytest.approx(r.step_log.total("num_decodes"))
    assert np.dot(p.prefill, counts) == pytest.approx(r.step_log.total("prefill_tokens"))


def test_partial_records_give_a_coarse_gantt_and_say_so():
    r = simulate(load_workload("seed"), EngineConfig(max_num_seqs=8, max_num_batched_tokens=256), "vllm", "toy",
                 max_records=5)
    v = run_view("vllm", r)
    assert not v.exact and len(v.scrub) == 5
    L = [(b.kind, round(b.start / MS, 3), round(b.end / MS, 3)) for b in v.bars if b.request_id == "L"]
    assert L == [("queued", 20, 20.8), ("prefill", 20.8, 252.8), ("decode", 252.8, 272.8)]
    assert any("first 5 steps" in n for n in v.notes)


def test_page_is_self_contained_and_bounded(page):
    assert not re.search(r"<script[^>]*\ssrc\s*=", page, re.I)  # every script inline
    assert not re.search(r"<link[^>]*href\s*=\s*[\"']?(https?:)?//", page, re.I)
    assert not re.search(r"<(img|iframe)[^>]*src\s*=\s*[\"']?(https?:)?//", page, re.I)
    size = len(page.encode())
    assert 4 * 2**20 < size < 7 * 2**20  # plotly.js (~4.6 MiB) once, the seed's data a few kB
    assert page.count("Plotly.newPlot(") == 5  # 3 timelines, latency, workload
    assert page.count("class='scrub'") == 3


def test_page_scrubber_data_has_each_steps_batch_and_waiters(page):
    runs = json.loads(re.search(r"const SERVESIM_RUNS = (\{.*?\});", page).group(1))
    static, _, vllm = (runs[str(i)] for i in range(3))
    assert vllm["k"] == 1000  # seconds -> ms, the axis' unit
    s3 = vllm["steps"][3]
    assert s3["ran"] == [["L", 252, "prefill"], ["d0", 1, "decode"], ["d1", 1, "decode"], ["d2", 1, "decode"],
                         ["d3", 1, "decode"]]
    assert (s3["start_ms"], s3["ms"], s3["tokens"], s3["budget"]) == (20.8, 29.2, 256, 256)
    assert static["steps"][3]["wait"] == [["L", "batch_closed", static["steps"][3]["wait"][0][2]]]


def test_cli_report_side_by_side_with_pngs(tmp_path, monkeypatch, capsys):
    out, pngs = tmp_path / "report.html", tmp_path / "png"
    code, stdout, _ = cli(monkeypatch, capsys, "report", "--workload", "seed", "--policies", "static,continuous,vllm",
                          "-o", str(out), "--png", str(pngs))
    assert code == 0 and f"wrote {out}" in stdout
    text = out.read_text()
    assert "continuous: longest step 204 ms" in text and "vllm: longest step 29.2 ms" in text
    written = sorted(p.name for p in pngs.iterdir())
    assert written == ["latency.png", "timeline-0-static.png", "timeline-1-continuous.png", "timeline-2-vllm.png"]
    assert all((pngs / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in written)


def test_cli_report_sweeps_one_knob(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.html"
    code, _, _ = cli(monkeypatch, capsys, "report", "--workload", "seed", "--set",
                     "max_num_batched_tokens=256,512", "-o", str(out))
    assert code == 0
    text = out.read_text()
    assert "<h2>max_num_batched_tokens=256</h2>" in text and "<h2>max_num_batched_tokens=512</h2>" in text


@pytest.mark.parametrize("args,message", [
    (["--policies", "vllm", "--set", "max_num_seqs=1,2"],
     "give one of --policies A,B,... or --set KNOB=V1,V2,..., not both"),
    (["--policies", "vllm,nope"], "unknown policy 'nope'; valid:"),
    (["--policies", "vllm,vllm"], "--policies 'vllm,vllm': a policy is named twice"),
    (["--policies", "vllm,static", "--policy", "static"], "--policy static and --policies vllm,static: --policy "
                                                           "names the one run's policy"),
    (["-o", "/nonexistent-dir/r.html"], "--output /nonexistent-dir/r.html: folder /nonexistent-dir does not exist"),
])
def test_cli_report_refuses_bad_options_in_one_line(monkeypatch, capsys, args, message):
    code, _, err = cli(monkeypatch, capsys, "report", "--workload", "seed", *args)
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(f"servesim: error: {message}")


def test_cli_report_png_must_be_a_folder(tmp_path, monkeypatch, capsys):
    f = tmp_path / "file"
    f.write_text("")
    code, _, err = cli(monkeypatch, capsys, "report", "--workload", "seed", "-o", str(tmp_path / "r.html"),
                       "--png", str(f))
    assert code == 2 and err.strip() == f"servesim: error: --png {f}: is a file; expected a folder"


def test_notebook_plots_and_summary():
    from servesim.run import Run

    run = Run.simulate("seed", max_num_batched_tokens=256)
    fig = run.plot_timeline()
    names = {t.name for t in fig.data}
    assert {"prefill", "decode", "queued", "decode tokens", "prefill tokens", "token budget", "running",
            "waiting"} <= names
    prefill = next(t for t in fig.data if t.name == "prefill tokens")
    assert list(prefill.y[3:11]) == [252] * 7 + [236]
    lat = run.plot_latency()
    assert [t.name for t in lat.data] == ["vllm"] * 4
    assert "mean_ttft_ms" in run._repr_html_()


def test_cli_report_without_plotly_is_one_line(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "plotly", None)  # as if the plot extra were not installed
    code, _, err = cli(monkeypatch, capsys, "report", "--workload", "seed", "-o", str(tmp_path / "r.html"))
    assert code == 2
    assert err.strip() == "servesim: error: the report's figures need plotly: pip install 'servesim[plot]'"
    assert not (tmp_path / "r.html").exists()


def test_kv_panel_shows_cached_free_blocks_under_prefix_caching():
    # tests/test_block_pool.py's A then B with one prompt: cached free blocks 0, 0, 1, 1 after each step's schedule
    from servesim import Request
    from servesim.report.figures import timeline_figure

    reqs = [Request("A", 0.0, 64, 2, hash_ids=(1, 2, 3, 4)), Request("B", 5.0, 64, 2, hash_ids=(1, 2, 3, 4))]
    r = simulate(reqs, EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, num_gpu_blocks=21), "vllm", "unit")
    assert step_panel(r).kv_cached.tolist() == [0, 0, 1, 1]
    names = [t.name for t in timeline_figure(run_view("vllm", r)).data]
    assert "KV blocks free, cached (prefix)" in names
    assert step_panel(seed("vllm")).kv_cached is None  # no prefix cache: no such line


def test_cli_report_on_a_cluster_has_a_section_per_replica(tmp_path, monkeypatch, capsys):
    out = tmp_path / "c.html"
    code, stdout, err = cli(monkeypatch, capsys, "report", "--workload", "seed", "--num-replicas", "2", "-o", str(out))
    assert code == 0, err
    text = out.read_text()
    assert "replica-0" in text and "replica-1" in text
    assert "a cluster of 2 replicas behind the round-robin router: one section per replica" in err + stdout
    code, _, err = cli(monkeypatch, capsys, "report", "--workload", "seed", "--num-replicas", "2",
                       "--policies", "vllm,static", "-o", str(out))
    assert code == 2 and "a cluster's report lays its replicas side by side" in err
