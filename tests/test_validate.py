"""`servesim validate` on the shipped sample of the user format (src/servesim/data/validate/sample.csv): toy-cost
rows whose predictions are derivable by hand, and rows out of reach, each named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import cli

import servesim
from servesim.errors import WorkloadError
from servesim.validate.rows import read_points
from servesim.validate.score import score

SAMPLE = Path(servesim.__file__).parent / "data" / "validate" / "sample.csv"


def test_the_sample_scores_by_hand():
    # toy cost: a 100-token prompt alone is a 10 ms step (0.1 ms a token) giving the first token; 2 decode steps
    # of 1 ms: TTFT 10 ms, TPOT 1 ms, E2EL 12 ms, whatever the client (concurrency 1: each request alone)
    report = score(read_points(SAMPLE))
    assert report.rows == 4 and len(report.predicted) == 2
    (bench, _, e1), (aiperf, _, e2) = report.predicted
    assert bench.fields["client"] == "vllm-bench" and aiperf.fields["client"] == "aiperf"
    # measured 12.5, 1.25, 15: every error (10 - 12.5) / 12.5 = -20 %; AIPerf's measured 8, 1, 10: +25, 0, +20 %
    assert e1 == pytest.approx({"ttft_ms": -20.0, "tpot_ms": -20.0, "e2el_ms": -20.0})
    assert e2 == pytest.approx({"ttft_ms": 25.0, "tpot_ms": 0.0, "e2el_ms": 20.0})
    assert report.mape("ttft_ms") == pytest.approx(22.5) and report.signed("ttft_ms") == pytest.approx(2.5)
    reasons = dict(report.out_of_reach)
    assert reasons[4] == "client 'guidellm': validate takes vllm-bench and aiperf rows"
    assert reasons[5].startswith("unknown model 'mystery-70b'")


def test_validate_command_and_its_json(monkeypatch, capsys, tmp_path):
    code, out, err = cli(monkeypatch, capsys, "validate", str(SAMPLE), "--json", str(tmp_path / "v.json"))
    assert code == 0, err
    assert "4 rows: 2 predicted, 2 out of reach" in out and "line 4: out of reach: client 'guidellm'" in out
    doc = json.loads((tmp_path / "v.json").read_text())
    assert (doc["rows"], doc["predicted"]) == (4, 2) and doc["ttft_mape"] == pytest.approx(22.5)
    assert doc["groups"]["client"]["aiperf"]["ttft_mape"] == pytest.approx(25.0)
    assert [r["line"] for r in doc["out_of_reach"]] == [4, 5] and doc["method"].startswith("no fitting")


@pytest.mark.parametrize("text, words", [
    ("model,gpu,engine,client,isl,osl,num_requests\n", "no measured metric"),
    ("model,gpu,engine,client,isl,osl,num_requests,ttft_ms\nm,g,vllm,vllm-bench,100,3,2,5\n",
     "2: give one of concurrency and request_rate"),
    ("model,gpu,engine,client,concurrency,isl,osl,num_requests,ttft_ms\nm,g,vllm,vllm-bench,1,ten,3,2,5\n",
     "sample.csv:2: isl: got 'ten'; expected an integer > 0"),
    ("model,gpu,engine,client,concurrency,isl,osl,num_requests,ttft_ms,colour\nm,g,vllm,vllm-bench,1,1,3,2,5,red\n",
     "unknown column 'colour'"),
])
def test_a_malformed_row_is_named(tmp_path, text, words):
    path = tmp_path / "sample.csv"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=words):
        read_points(path)
