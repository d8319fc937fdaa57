"""`servesim sweep` (issue 17): the product of the axes, a row per point equal to `servesim run`'s result."""

import json

import polars as pl
import pytest
from helpers import cli
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.errors import ConfigError
from servesim.plan import api
from servesim.plan.pareto import pareto_mask
from servesim.plan.points import axes_from, product
from servesim.plan.prices import cost_per_million_tokens, parse_gpu_cost

# 40 requests of the Azure conversation sample at two rates, two seat limits: 4 points, the roofline on an H100
SMALL = ["--workload", "azure-conv-sample", "--num-prompts", "40"]
AXES = ["--request-rate", "2,8", "--set", "max_num_seqs=4,64"]


def test_rows_equal_individual_runs(monkeypatch, capsys, tmp_path):
    code, _, err = cli(monkeypatch, capsys, "sweep", *SMALL, *AXES, "--goodput", "ttft:300 tpot:20",
                       "--workers", "1", "--json", str(tmp_path / "s.json"))
    assert code == 0, err
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    assert [(r["max_num_seqs"], r["request_rate"]) for r in rows] == [(4, 2.0), (4, 8.0), (64, 2.0), (64, 8.0)]
    for r in rows:
        one = tmp_path / "one.json"
        code, _, err = cli(monkeypatch, capsys, "run", *SMALL, "--request-rate", str(r["request_rate"]),
                           "--max-num-seqs", str(r["max_num_seqs"]), "--goodput", "ttft:300 tpot:20",
                           "--percentiles", "50,90,99", "--percentile-metrics", "ttft,tpot,itl,e2el",
                           "--json", str(one))
        assert code == 0, err
        ran = json.loads(one.read_text())
        for key in ("completed", "duration", "request_goodput", "output_throughput", "p99_ttft_ms",
                    "median_tpot_ms", "p90_itl_ms", "mean_e2el_ms", "max_concurrent_requests"):
            assert r[key] == ran[key], key
        assert r["overloaded"] == ran["overloaded"]
        # SLO attainment: good requests (goodput x duration) over all 40
        assert r["slo_attainment"] == pytest.approx(100 * ran["request_goodput"] * ran["duration"] / 40)
        # $3.25 per H100-hour (the default table) over the achieved output tokens per second
        assert r["cost_per_million_output_tokens"] == pytest.approx(3.25 / 3600 / ran["output_throughput"] * 1e6)


def test_product_order_rate_innermost():
    points = product(axes_from("vllm,static", knobs=["max_num_seqs=8,16"], request_rates="1,2,4"))
    assert len(points) == 12
    assert [p.label() for p in points[:4]] == ["vllm, max_num_seqs=8, 1 req/s", "vllm, max_num_seqs=8, 2 req/s",
                                               "vllm, max_num_seqs=8, 4 req/s", "vllm, max_num_seqs=16, 1 req/s"]
    assert points[6].policy == "static"


def test_cost_per_million_tokens_by_hand():
    # 2 GPUs at $3.60/h = $0.002/s; 1000 tok/s: $0.000002 per token, $2 per million
    assert cost_per_million_tokens(3.6, 2, 1000.0) == pytest.approx(2.0)
    assert cost_per_million_tokens(None, 1, 1000.0) is None and cost_per_million_tokens(3.6, 1, 0.0) is None
    table = parse_gpu_cost(["h100=4.0", "a100=1.8"])  # aliases resolve to the GPUs' names
    assert table["h100-80gb"] == 4.0 and table["a100-80gb"] == 1.8 and table["l40s"] == 1.0


def _row(ttft, tpot, tput, overloaded=False):
    return {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot, "output_throughput_per_gpu": tput, "overloaded": overloaded,
            "completed": 1}


def test_pareto_front_by_hand():
    rows = [_row(100, 10, 500), _row(200, 10, 500),  # the second is dominated by the first (worse TTFT)
            _row(300, 8, 400), _row(50, 50, 900, overloaded=True)]  # a trade-off; overloaded does not compete
    assert pareto_mask(rows) == [True, False, True, False]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5)), min_size=1, max_size=12))
def test_pareto_front_is_undominated_and_dominates_the_rest(points):
    rows = [_row(*p) for p in points]
    front = pareto_mask(rows)

    def dominates(a, b):
        x, y = (-a[0], -a[1], a[2]), (-b[0], -b[1], b[2])
        return all(i >= j for i, j in zip(x, y)) and x != y

    for i, p in enumerate(points):
        beaten = any(dominates(q, p) for q in points)
        assert front[i] == (not beaten)


def test_outputs_parquet_csv_and_api_agree(monkeypatch, capsys, tmp_path):
    pq, csv = tmp_path / "s.parquet", tmp_path / "s.csv"
    for path in (pq, csv):
        code, out, err = cli(monkeypatch, capsys, "sweep", *SMALL, *AXES, "--workers", "1", "-o", str(path))
        assert code == 0, err
    assert "4 points" in out and "*" in out
    df = api.sweep("azure-conv-sample", num_requests=40, request_rates=[2, 8], knobs={"max_num_seqs": [4, 64]},
                   workers=1)
    assert pl.read_parquet(pq).equals(df)
    assert pl.read_csv(csv)["p99_ttft_ms"].to_list() == pytest.approx(df["p99_ttft_ms"].to_list())
    assert not (tmp_path / "s.csv.partial.jsonl").exists()  # the checkpoint goes once the output is written


def test_interrupted_sweep_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    from servesim.plan import sweep as sweep_mod

    ckpt = str(tmp_path / "rows.jsonl")
    kw = dict(num_requests=40, request_rates=[2, 4, 8], workers=1, checkpoint=ckpt)
    calls = []
    real = sweep_mod.evaluate

    def stop_after_two(task):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(task.point)
        return real(task)

    monkeypatch.setattr(sweep_mod, "evaluate", stop_after_two)
    with pytest.raises(KeyboardInterrupt):
        api.sweep("azure-conv-sample", **kw)
    assert len(open(ckpt).read().splitlines()) == 3  # the header and two rows
    calls.clear()
    monkeypatch.setattr(sweep_mod, "evaluate", lambda t: (calls.append(t.point), real(t))[1])
    resumed = api.sweep("azure-conv-sample", resume=True, **kw)
    assert [p.request_rate for p in calls] == [8.0]  # only the missing point ran
    fresh = api.sweep("azure-conv-sample", num_requests=40, request_rates=[2, 4, 8], workers=1)
    assert resumed.equals(fresh)
    with pytest.raises(ConfigError, match="a checkpoint of another sweep"):
        api.sweep("azure-conv-sample", num_requests=41, request_rates=[2, 4, 8], workers=1, checkpoint=ckpt,
                  resume=True)


@pytest.mark.parametrize("args, message", [
    (["--set", "nope=1,2"], "unknown knob 'nope'"),
    (["--set", "max_num_seqs=4", "--set", "max_num_seqs=8"], "given twice"),
    (["--request-rate", "1,x"], "--request-rate 'x'"),
    (["--request-rate", "1", "--rate-scale", "2"], "sweep one"),
    (["--tp", "1.5"], "expected an integer"),
    (["--gpu-cost", "h100=cheap"], "--gpu-cost h100=cheap"),
    (["--gpu-cost", "tpu=1"], "--gpu-cost tpu: unknown GPU"),
    (["--output", "rows.txt"], ".parquet, .csv or .json"),
    (["--executor", "dask"], "--executor dask"),
    (["--ray-address", "auto"], "add --executor ray"),
    (["--resume"], "--resume reads the finished rows"),
    (["--set", "max_num_batched_tokens=64", "--policies", "static"], "static, max_num_batched_tokens=64: "),
    (["--set", "max_running_requests=4,8"], "unknown knob 'max_running_requests' (SGLang's: "
                                            "sglang.max_running_requests)"),
    (["--set", "sglang.max_running_requests=4"], "vllm, sglang.max_running_requests=4: the sglang section"),
])
def test_user_errors_are_one_line_exit_2(monkeypatch, capsys, args, message):
    code, _, err = cli(monkeypatch, capsys, "sweep", "--workload", "seed", "--workers", "1", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_sglang_knobs_sweep_as_their_runs(monkeypatch, capsys, tmp_path):
    """`--set sglang.NAME=...` sets SGLang's server arguments: each row is `run --policy sglang` with the flag."""
    code, _, err = cli(monkeypatch, capsys, "sweep", *SMALL, "--policies", "sglang", "--request-rate", "8",
                       "--set", "sglang.max_running_requests=2,64", "--workers", "1",
                       "--json", str(tmp_path / "s.json"))
    assert code == 0, err
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    assert [r["sglang.max_running_requests"] for r in rows] == [2, 64]
    for r in rows:
        one = tmp_path / "one.json"
        code, _, err = cli(monkeypatch, capsys, "run", *SMALL, "--policy", "sglang", "--request-rate", "8",
                           "--max-running-requests", str(r["sglang.max_running_requests"]), "--json", str(one))
        assert code == 0, err
        ran = json.loads(one.read_text())
        for key in ("completed", "duration", "p99_ttft_ms", "mean_tpot_ms", "max_concurrent_requests"):
            assert r[key] == ran[key], key
    assert rows[0]["p99_ttft_ms"] > rows[1]["p99_ttft_ms"]  # two seats queue the arrivals
