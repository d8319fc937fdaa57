"""`servesim sweep` over cluster layouts (issue 17): --num-replicas, P/D xPyD layouts and --router as axes.

The toy cost (cost/simple.py): 1 ms per decoding request per step + 0.1 ms per prefill token. A request of 100
prompt tokens and 1 output token is one 10 ms prefill step that samples its only token, so one replica serves
at most 100 req/s. With arrivals exactly every 1/300 s (--burstiness inf) round-robin sends replica k of N the
requests k, k + N, ...: arrivals N/300 s apart, each replica a server of 10 ms requests.
"""

import itertools
import json

import pytest
from helpers import cli
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.errors import ConfigError
from servesim.plan import api
from servesim.plan.layouts import layout_name, layouts_from, num_replicas, parse_layout, parse_routers
from servesim.plan.points import Point, axes_from, product

TOY = ["--workload", "random", "--num-prompts", "600", "--prompt-len", "100", "--output-len", "1",
       "--burstiness", "inf", "--cost", "toy", "--request-rate", "300"]
KEYS = ("completed", "duration", "request_throughput", "output_throughput", "max_output_tokens_per_s",
        "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_e2el_ms", "p90_e2el_ms", "request_goodput")


def _sweep(monkeypatch, capsys, tmp_path, *args):
    path = tmp_path / "s.json"
    code, out, err = cli(monkeypatch, capsys, "sweep", *TOY, *args, "--goodput", "ttft:15", "--workers", "1",
                         "--json", str(path))
    assert code == 0, err
    return json.loads(path.read_text())["rows"], out


def _run(monkeypatch, capsys, tmp_path, *args):
    path = tmp_path / "one.json"
    code, _, err = cli(monkeypatch, capsys, "run", *TOY, *args, "--goodput", "ttft:15", "--percentiles",
                       "50,90,99", "--percentile-metrics", "ttft,tpot,itl,e2el", "--json", str(path))
    assert code == 0, err
    return json.loads(path.read_text())


def test_replica_rows_equal_individual_cluster_runs_and_the_hand_numbers(monkeypatch, capsys, tmp_path):
    rows, out = _sweep(monkeypatch, capsys, tmp_path, "--num-replicas", "1,2,4")
    assert [(r["layout"], r["num_replicas"], r["num_gpus"], r["router"]) for r in rows] == [
        ("1", 1, 1, "round-robin"), ("2", 2, 2, "round-robin"), ("4", 4, 4, "round-robin")]
    for r in rows:
        ran = _run(monkeypatch, capsys, tmp_path, "--num-replicas", r["layout"])
        assert ran["num_replicas"] == r["num_replicas"] and ran["router"] == r["router"]
        for key in KEYS:
            assert r[key] == ran[key], key
    one, two, four = rows
    # 1 replica: 600 back-to-back 10 ms requests from t = 0: 6 s, 100 req/s
    assert one["duration"] == pytest.approx(6.0) and one["request_throughput"] == pytest.approx(100.0)
    # 2 replicas: 300 requests each, 3 s of work; replica 1 starts at its first arrival, 1/300 s
    assert two["duration"] == pytest.approx(3.0 + 1 / 300)
    assert two["request_throughput"] == pytest.approx(600 / (3.0 + 1 / 300))
    # 4 replicas: arrivals 4/300 s > 10 ms apart: nobody waits, TTFT 10 ms; done 10 ms after the last arrival
    assert four["duration"] == pytest.approx(599 / 300 + 0.010) and four["p99_ttft_ms"] == pytest.approx(10.0)
    assert four["slo_attainment"] == 100.0
    # throughput per GPU: the cluster's over replicas x TP (the toy cost: TP 1)
    assert [r["output_throughput_per_gpu"] for r in rows] == pytest.approx(
        [r["output_throughput"] / r["num_replicas"] for r in rows])
    # 1 and 2 replicas fall behind 300 req/s; only the stable layout competes on the Pareto front
    assert [r["overloaded"] for r in rows] == [True, True, False]
    assert [r["pareto"] for r in rows] == [False, False, True]
    assert "replicas" in out


def test_pd_layout_row_equals_the_pd_run(monkeypatch, capsys, tmp_path):
    rows, _ = _sweep(monkeypatch, capsys, tmp_path, "--num-replicas", "2", "--prefill-replicas", "1",
                     "--decode-replicas", "1")
    assert [(r["layout"], r["num_gpus"]) for r in rows] == [("2", 2), ("1P1D", 2)]
    ran = _run(monkeypatch, capsys, tmp_path, "--prefill-replicas", "1", "--decode-replicas", "1")
    for key in KEYS:
        assert rows[1][key] == ran[key], key
    # one output token: each request ends on its prefill replica (its first token is its last), no KV moves, so
    # the one prefill replica does all the work: 100 req/s, as one replica, at twice the GPUs
    assert "kv_transfer_count" not in ran
    assert rows[1]["request_throughput"] == pytest.approx(100.0) and rows[1]["overloaded"]
    assert rows[1]["output_throughput_per_gpu"] == pytest.approx(50.0)


def test_router_axis(monkeypatch, capsys, tmp_path):
    rows, _ = _sweep(monkeypatch, capsys, tmp_path, "--num-replicas", "2",
                     "--router", "round-robin,weighted:queue=1,kv=1")
    assert [r["router"] for r in rows] == ["round-robin", "weighted:queue=1,kv=1"]
    ran = _run(monkeypatch, capsys, tmp_path, "--num-replicas", "2", "--router", "weighted:queue=1,kv=1")
    for key in KEYS:
        assert rows[1][key] == ran[key], key


def test_layout_texts():
    assert parse_layout("4") == (4, None, None) and parse_layout("2p2d") == (None, 2, 2)
    assert layout_name("1p3d") == "1P3D" and num_replicas("1P3D") == 4 and num_replicas(None) == 1
    assert layouts_from((1, 2), (1, 2), (3,)) == ("1", "2", "1P3D", "2P3D")
    assert parse_routers("least-loaded,weighted:prefix=3,queue=2,random") == (
        "least-loaded", "weighted:prefix=3,queue=2", "random")
    # GPUs: replicas x TP; P/D counts both pools
    assert Point(tp=2, layout="1P3D").num_gpus == 8 and Point(tp=4, layout="2").num_gpus == 8
    points = product(axes_from(request_rates="1,2", layouts=[1, "2P2D"], routers="round-robin,random"))
    assert [(p.layout, p.router, p.request_rate) for p in points[:3]] == [
        ("1", "round-robin", 1.0), ("1", "round-robin", 2.0), ("1", "random", 1.0)]
    assert len({p.key() for p in points}) == 8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(1, 64).map(str),
                          st.tuples(st.integers(1, 9), st.integers(1, 9)).map(lambda t: f"{t[0]}p{t[1]}d")),
                min_size=1, max_size=4, unique_by=lambda s: s.lower()),
       st.lists(st.integers(1, 8), min_size=1, max_size=3, unique=True))
def test_layout_product_property(layouts, tps):
    points = product(axes_from(layouts=layouts, tps=tps))
    assert len(points) == len(layouts) * len(tps)  # the product, each layout once per TP
    for p, (tp, lay) in zip(points, itertools.product(tps, layouts)):
        assert p.layout == layout_name(lay) and parse_layout(p.layout) == parse_layout(lay)
        n, pre, dec = parse_layout(lay)
        assert p.num_gpus == tp * (n if n is not None else pre + dec)


@pytest.mark.parametrize("args, message", [
    (["--prefill-replicas", "1"], "give both"),
    (["--num-replicas", "0"], "--num-replicas '0': expected a value > 0"),
    (["--num-replicas", "2,2"], "a value is given twice"),
    (["--router", "fastest"], "--router 'fastest': unknown router"),
    (["--router", "random,random"], "a router is given twice"),
])
def test_layout_user_errors_are_one_line_exit_2(monkeypatch, capsys, args, message):
    code, _, err = cli(monkeypatch, capsys, "sweep", *TOY, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_api_takes_layouts_and_refuses_the_single_fields():
    df = api.sweep("random", request_rates=[300], layouts=[4], num_requests=60, prompt_len="100", output_len="1",
                   burstiness=float("inf"), cost="toy", workers=1)
    assert df["layout"].to_list() == ["4"] and df["num_gpus"].to_list() == [4]
    with pytest.raises(ConfigError, match="layouts="):
        api.sweep("random", num_replicas=2)
    with pytest.raises(ConfigError, match="routers="):
        api.sweep("random", router="random")


TINY = dict(num_requests=40, prompt_len="100", output_len="1", cost="toy", request_rates=[150, 300],
            layouts=[1, 2, "1P1D"], routers=["round-robin", "least-loaded"], goodput="ttft:15")


def test_process_pool_gives_the_serial_cluster_table():
    serial = api.sweep("random", workers=1, **TINY)
    assert len(serial) == 12 and api.sweep("random", workers=2, **TINY).equals(serial)


def test_ray_gives_the_local_cluster_table(local_ray):
    on_ray = api.sweep("random", executor="ray", **TINY)
    assert on_ray.equals(api.sweep("random", workers=1, **TINY))
