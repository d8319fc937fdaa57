"""`servesim capacity` (issue 17): the highest request rate meeting the SLOs, derived by hand on the toy cost.

The toy cost (cost/simple.py) is 1 ms per decoding request per step + 0.1 ms per prefill token. A request of
100 prompt tokens and 1 output token is one 10 ms prefill step that samples its only token: alone on the engine
its TTFT is 10 ms, and the engine serves at most 1000 / 10 = 100 req/s (the saturating rate).
"""

import json
import math

import numpy as np
import pytest
from helpers import cli

from servesim.cli.options import SimOptions
from servesim.plan import api
from servesim.plan.capacity import fewest_gpus

TOY = dict(num_requests=1000, prompt_len="100", output_len="1", cost="toy")


def test_fixed_arrivals_saturate_at_the_step_cost():
    # Arrivals every 1/r s. At r <= 100 each request finds the engine idle: TTFT 10 ms. Above, request k waits
    # (k - 1)(10 - 1000/r) ms (one waits at a time while that is < one gap), so all 1000 meet ttft:15 iff
    # 999 (10 - 1000/r) <= 5, i.e. r <= 1000 / (10 - 5/999) = 100.0501 req/s.
    c = api.capacity("random", goodput="ttft:15", attainment=100, workers=1, burstiness=math.inf, **TOY)
    found = c.configs[0]
    assert 100 / 1.01 <= c.max_request_rate <= 1000 / (10 - 5 / 999)
    assert found["bracketed"] and found["failing_rate"] <= c.max_request_rate * 1.01
    assert found["binding"] == "compute" and found["bound_steps"] == {"compute": 100.0}
    at = {p["request_rate"]: p for p in found["points"]}
    assert at[c.max_request_rate]["p99_ttft_ms"] == pytest.approx(10.0)
    assert [p["request_rate"] for p in found["points"]][:8] == [1, 2, 4, 8, 16, 32, 64, 128]  # the bracket


def _max_wait_ms(gaps_s: np.ndarray, service_ms: float) -> float:
    """Lindley's recursion for one server: W(k+1) = max(0, W(k) + service - gap(k))."""
    w, worst = 0.0, 0.0
    for g in gaps_s * 1000:
        w = max(0.0, w + service_ms - g)
        worst = max(worst, w)
    return worst


def test_poisson_capacity_is_where_lindleys_worst_wait_reaches_the_slo():
    # Poisson arrivals at the seed: the arrivals at rate r are those at rate 1 divided by r. While no request
    # waits more than 5 ms nobody arrives while another waits, so the engine is one FCFS server of 10 ms
    # requests, and every TTFT <= 15 ms iff Lindley's worst wait <= 5 ms.
    c = api.capacity("random", goodput="ttft:15", attainment=100, workers=1, **TOY)
    lo, hi = c.max_request_rate, c.configs[0]["failing_rate"]
    t1 = np.array([r.arrival_time for r in SimOptions(workload="random", request_rate=1.0, **TOY).requests()])
    t4 = np.array([r.arrival_time for r in SimOptions(workload="random", request_rate=4.0, **TOY).requests()])
    np.testing.assert_allclose(t4, t1 / 4)
    gaps = np.diff(t1)
    assert _max_wait_ms(gaps / lo, 10.0) <= 5.0 < _max_wait_ms(gaps / hi, 10.0)
    assert hi <= lo * 1.01
    assert lo < 100  # queueing: far below the saturating rate


def test_target_rate_counts_replicas_of_the_capacity():
    # 250 req/s over replicas of 100 req/s each: ceil(2.5) = 3 replicas of 1 GPU
    out = fewest_gpus([{"max_request_rate": 100.0, "num_gpus": 1}], 250)
    assert out == {"index": 0, "replicas": 3, "num_gpus": 3, "max_request_rate": 100.0, "target_rate": 250}
    # TP 1 at 40 req/s needs 5 GPUs for 200 req/s; TP 2 at 100 req/s needs 2 replicas = 4 GPUs: TP 2 wins
    two = [{"max_request_rate": 40.0, "num_gpus": 1}, {"max_request_rate": 100.0, "num_gpus": 2}]
    assert fewest_gpus(two, 200)["index"] == 1 and fewest_gpus(two, 200)["num_gpus"] == 4
    assert fewest_gpus([{"max_request_rate": 0.0, "num_gpus": 1}], 1) is None


def test_seats_bind_when_max_num_seqs_is_small():
    # 40 decode steps per request behind 2 seats: waiting requests wait for a seat in nearly every step
    c = api.capacity("random", goodput="ttft:1000", attainment=100, workers=1, num_requests=200,
                     prompt_len="100", output_len="41", burstiness=math.inf, cost="toy", max_num_seqs=2)
    assert c.configs[0]["binding"] == "seats (max_num_seqs)"


def test_cli_json_and_target(monkeypatch, capsys, tmp_path):
    path = tmp_path / "c.json"
    code, out, err = cli(monkeypatch, capsys, "capacity", "--workload", "random", "--num-prompts", "1000",
                         "--prompt-len", "100", "--output-len", "1", "--burstiness", "inf", "--cost", "toy",
                         "--goodput", "ttft:15", "--attainment", "100", "--target-rate", "250", "--workers", "1",
                         "--json", str(path))
    assert code == 0, err
    assert "250 req/s at the SLO: 3 GPUs = 3 replicas x TP 1" in out
    data = json.loads(path.read_text())
    assert data["max_request_rate"] == data["configs"][0]["max_request_rate"] >= 100 / 1.01
    assert data["target"]["num_gpus"] == 3 and data["configs"][0]["points"][0]["request_rate"] == 1.0


@pytest.mark.parametrize("args, message", [
    ([], "capacity needs SLOs"),
    (["--goodput", "ttft:15", "--request-rate", "4"], "capacity searches the request rate"),
    (["--goodput", "ttft:15", "--attainment", "0"], "--attainment 0.0"),
    (["--goodput", "ttft:15", "--rate-tolerance", "1.5"], "--rate-tolerance 1.5"),
    (["--goodput", "ttft:15", "--target-rate", "-1"], "--target-rate -1.0"),
    (["--goodput", "ttft:15", "--executor", "dask"], "--executor dask"),
])
def test_user_errors_are_one_line_exit_2(monkeypatch, capsys, args, message):
    code, _, err = cli(monkeypatch, capsys, "capacity", "--workload", "seed", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
