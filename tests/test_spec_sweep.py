"""Speculative decoding in `sweep` and `report` (issue 29): each speculating point run again without it, the
speedup per point and the load past which it stops paying."""

import json

import pytest
from helpers import cli

from servesim.plan import api
from servesim.plan.sweep import speculation_lines
from servesim.report.pareto import speculation_figure

NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'


def test_a_speculating_point_is_run_again_without_it():
    # toy cost: a decode step costs 1 ms whatever drafts it verifies. One request, output 101, every draft of 3
    # accepted: 100 tokens in 25 verify steps, TPOT 25 / 100 = 0.25 ms, against 100 plain steps, TPOT 1.0 ms:
    # speedup 4.0
    df = api.sweep("random", request_rates=[1.0], num_requests=1, prompt_len="64", output_len="101", cost="toy",
                   speculative_config=NGRAM, acceptance_rate=1.0, workers=1)
    row = df.row(0, named=True)
    assert row["mean_tpot_ms"] == pytest.approx(0.25)
    assert row["mean_tpot_ms_without_speculation"] == pytest.approx(1.0)
    assert row["speculation_speedup"] == pytest.approx(4.0)
    assert row["spec_decode_acceptance_length"] == pytest.approx(4.0)
    # a point that does not speculate has no such columns
    plain = api.sweep("random", request_rates=[1.0], num_requests=1, prompt_len="64", output_len="101", cost="toy",
                      workers=1)
    assert "speculation_speedup" not in plain.columns


def rows(*speedups, **axes):
    return [{"request_rate": rate, "speculation_speedup": s, **axes} for rate, s in speedups]


def test_the_lines_name_the_load_past_which_speculation_stops_paying():
    paying = rows((1.0, 2.2), (8.0, 1.4), max_num_seqs=64)
    losing = rows((1.0, 1.8), (8.0, 0.9), (32.0, 0.7), max_num_seqs=512)
    assert speculation_lines(paying + losing, ["max_num_seqs", "request_rate"]) == [
        "max_num_seqs=64: speculation's speedup (mean TPOT without it / with it) 2.20x at request_rate 1, 1.40x "
        "at request_rate 8; it paid at every load swept.",
        "max_num_seqs=512: speculation's speedup (mean TPOT without it / with it) 1.80x at request_rate 1, 0.70x "
        "at request_rate 32; from request_rate 8 on it cost more than it saved."]
    fig = speculation_figure(paying + losing, ["max_num_seqs", "request_rate"])
    assert [list(t.y) for t in fig.data] == [[2.2, 1.4], [1.8, 0.9, 0.7]]
    assert speculation_figure(rows((1.0, None)), ["request_rate"]) is None


def test_the_cli_sweep_shows_the_speedup_and_the_report_draws_it(monkeypatch, capsys, tmp_path):
    page = tmp_path / "s.html"
    code, out, err = cli(monkeypatch, capsys, "sweep", "--workload", "random", "--num-prompts", "1",
                         "--random-input-len", "64", "--random-output-len", "101", "--cost", "toy",
                         "--speculative-config", NGRAM, "--acceptance-rate", "1.0", "--request-rate", "1,2",
                         "--workers", "1", "--report", str(page), "--json", str(tmp_path / "s.json"))
    assert code == 0, err
    assert "spec x" in out and "4.00x at request_rate 1, 4.00x at request_rate 2; it paid at every load" in out
    assert [r["speculation_speedup"] for r in json.loads((tmp_path / "s.json").read_text())["rows"]] == [4.0, 4.0]
    assert "<h2>Speculative decoding</h2>" in page.read_text()


def test_the_run_report_explains_speculation_against_the_run_without_it(monkeypatch, capsys, tmp_path):
    page = tmp_path / "r.html"
    code, _, err = cli(monkeypatch, capsys, "report", "--workload", "random", "--num-prompts", "1",
                       "--random-input-len", "64", "--random-output-len", "101", "--cost", "toy",
                       "--speculative-config", NGRAM, "--acceptance-rate", "1.0", "-o", str(page))
    assert code == 0, err
    text = page.read_text()
    # 4 tokens a verify step of 1 ms against 1 a plain step of 1 ms: 101 tokens over 6.4 + 25 = 31.4 ms (3,217
    # tok/s) against 6.4 + 100 = 106.4 ms (949 tok/s)
    assert "output throughput 949 -&gt; 3,217 tok/s" in text
    assert "a verify step brought 4.00x the tokens per second of a plain one at batch size 1" in text
    assert "<h2>Speculative decoding</h2>" in text
