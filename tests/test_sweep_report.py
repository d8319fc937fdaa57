"""The sweep's page: the Pareto front drawn (issue 17, with issue 15's report)."""

import re

from helpers import cli

from servesim.report.pareto import pareto_figure


def row(ttft, tpot, thr, pareto, overloaded=False, **axes):
    return {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot, "output_throughput_per_gpu": thr, "pareto": pareto,
            "overloaded": overloaded, **axes}


def test_front_points_are_joined_in_throughput_order_and_the_rest_apart():
    rows = [row(200.0, 12.0, 900.0, True, max_num_seqs=64), row(100.0, 9.0, 400.0, True, max_num_seqs=16),
            row(300.0, 13.0, 800.0, False, max_num_seqs=32), row(9000.0, 20.0, 950.0, False, True, max_num_seqs=256)]
    fig = pareto_figure(rows, ["max_num_seqs"])
    ttft = {t.name: t for t in fig.data if t.xaxis == "x"}
    assert list(ttft["Pareto front"].x) == [400.0, 900.0] and list(ttft["Pareto front"].y) == [100.0, 200.0]
    assert list(ttft["other points"].x) == [800.0] and list(ttft["OVERLOADED"].y) == [9000.0]
    assert ttft["Pareto front"].text == ("max_num_seqs=16", "max_num_seqs=64")
    tpot = {t.name: t for t in fig.data if t.xaxis == "x2"}
    assert list(tpot["Pareto front"].y) == [9.0, 12.0]


def test_cli_sweep_writes_one_offline_page(tmp_path, monkeypatch, capsys):
    page = tmp_path / "sweep.html"
    code, out, _ = cli(monkeypatch, capsys, "sweep", "--workload", "seed", "--set", "max_num_seqs=2,8",
                       "--workers", "1", "--report", str(page))
    assert code == 0 and f"wrote {page}" in out
    text = page.read_text()
    assert "2 points" in text and not re.search(r"""<script[^>]+src=["']https?:""", text)
    code, _, err = cli(monkeypatch, capsys, "sweep", "--workload", "seed", "--set", "max_num_seqs=2,8",
                       "--report", str(tmp_path / "sweep.png"))
    assert code == 2 and "--report" in err and "expected an .html file" in err
