"""`servesim capacity` on clusters (issue 17): a layout's capacity, and --target-rate by simulated replicas.

The toy cost (cost/simple.py): 1 ms per decoding request per step + 0.1 ms per prefill token. A request of 100
prompt tokens and 1 output token is one 10 ms prefill step: one replica serves at most 100 req/s. Round-robin
sends replica k of N the requests k, k + N, k + 2N, ... (workload order = arrival order).

While no request waits more than 5 ms, no two wait at once on a replica (the second would wait over 5 ms), so
each replica is one FCFS server of 10 ms requests and every TTFT <= 15 ms iff Lindley's worst wait over the
replica's arrivals is <= 5 ms (as in tests/test_capacity.py).
"""

import json
import math
import random

import numpy as np
import pytest
from helpers import cli

from servesim.cli.options import SimOptions
from servesim.plan import api

TOY = dict(prompt_len="100", output_len="1", cost="toy")
SLO = dict(goodput="ttft:15", attainment=100, workers=1)


def _worst_wait_ms(arrivals_s: np.ndarray, service_ms: float = 10.0) -> float:
    """Lindley's recursion for one server: W(k+1) = max(0, W(k) + service - gap(k))."""
    w, worst = 0.0, 0.0
    for g in np.diff(arrivals_s) * 1000:
        w = max(0.0, w + service_ms - g)
        worst = max(worst, w)
    return worst


def test_two_replicas_double_the_fixed_arrival_capacity():
    # arrivals every 1/r s, every other one to each replica: each sees 500 arrivals 2/r s apart. As one engine
    # at r/2 (tests/test_capacity.py): all meet ttft:15 iff 499 (10 - 2000/r) <= 5, r <= 2000 / (10 - 5/499).
    c = api.capacity("random", layouts=[2], num_requests=1000, burstiness=math.inf, **TOY, **SLO)
    found = c.configs[0]
    assert found["layout"] == "2" and found["num_gpus"] == 2 and found["router"] == "round-robin"
    assert 200 / 1.01 <= c.max_request_rate <= 2000 / (10 - 5 / 499)
    assert found["bracketed"] and found["failing_rate"] <= c.max_request_rate * 1.01
    assert found["binding"] == "compute" and found["bound_steps"] == {"compute": 100.0}  # both replicas' steps


def test_target_rate_fixed_arrivals_three_replicas(monkeypatch, capsys):
    # 250 req/s: each of N replicas gets arrivals N/250 s apart; nobody waits iff N/250 >= 10 ms, N >= 2.5.
    # With N = 2 the gaps are 8 ms: every request waits 2 ms more than the one before, and most miss 15 ms.
    c = api.capacity("random", num_requests=1000, burstiness=math.inf, target_rate=250, **TOY, **SLO)
    t = c.target
    assert (t["replicas"], t["num_gpus"], t["router"], t["simulated"]) == (3, 3, "round-robin", True)
    tried = c.configs[0]["target"]["tried"]
    assert [(p["num_replicas"], p["passed"]) for p in tried] == [(3, True), (2, False)]  # the estimate, then 2
    assert c.target_estimate["replicas"] == 3 == t["estimate_replicas"]  # ceil(250 / ~100)


def test_target_rate_poisson_round_robin_beats_the_even_split():
    # Poisson arrivals at 150 req/s, 200 requests: the fewest N whose every round-robin share has Lindley's
    # worst wait <= 5 ms. The even split sizes replicas by one engine's capacity under a whole Poisson stream
    # (at 100 % attainment a low rate), far more than the smoother every-N-th-arrival shares need.
    rate, n = 150.0, 200
    c = api.capacity("random", num_requests=n, target_rate=rate, **TOY, **SLO)
    arrivals = np.array([r.arrival_time for r in SimOptions(workload="random", request_rate=rate, num_requests=n,
                                                            **TOY).requests()])
    passes = [max(_worst_wait_ms(arrivals[k::m]) for k in range(m)) <= 5.0 for m in range(1, 40)]
    fewest = passes.index(True) + 1
    assert all(passes[fewest - 1:])  # attainment does not fall as replicas are added (the search's premise)
    assert c.target["replicas"] == fewest and c.target["num_gpus"] == fewest
    estimate = math.ceil(rate / c.configs[0]["max_request_rate"] - 1e-9)
    assert c.target["estimate_replicas"] == estimate == c.target_estimate["replicas"]
    assert fewest < estimate


def _random_split_passes(n: int, num: int, rate: float, seed: int = 0) -> bool:
    """The random router (docs/cluster.md: uniform from a generator seeded by --seed): request i goes to
    random.Random(seed).randrange(n), drawn in arrival order; every replica's worst wait <= 5 ms."""
    rng = random.Random(seed)
    to = np.array([rng.randrange(n) for _ in range(num)])
    arrivals = np.arange(num) / rate
    return all(_worst_wait_ms(arrivals[to == k]) <= 5.0 for k in range(n))


def test_target_rate_per_router_and_cli(monkeypatch, capsys, tmp_path):
    code, out, err = cli(monkeypatch, capsys, "capacity", "--workload", "random", "--num-prompts", "300",
                         "--prompt-len", "100", "--output-len", "1", "--burstiness", "inf", "--cost", "toy",
                         "--goodput", "ttft:15", "--attainment", "100", "--target-rate", "250", "--workers", "1",
                         "--router", "round-robin,random", "--json", str(tmp_path / "c.json"))
    assert code == 0, err
    assert "250 req/s at the SLO: 3 GPUs = 3 replicas x TP 1 of policy vllm behind round-robin" in out
    assert "even-split estimate: 3 GPUs" in out and "not simulated" in out
    data = json.loads((tmp_path / "c.json").read_text())
    assert [c["router"] for c in data["configs"]] == ["round-robin", "random"]
    rr, rnd = (c["target"] for c in data["configs"])
    assert rr["num_replicas"] == 3
    # random: two requests 4 ms apart on one replica already miss 15 ms, so it takes far more replicas. Each N
    # draws another assignment (pass/fail is not monotone in N): the search ends at a passing N whose N - 1 fails
    n = rnd["num_replicas"]
    assert _random_split_passes(n, 300, 250.0) and not _random_split_passes(n - 1, 300, 250.0)
    assert n > 3 * 10 and {t["num_replicas"] for t in rnd["tried"]} >= {3, 6, n - 1, n}


@pytest.mark.parametrize("args, message", [
    (["--num-replicas", "2"], "--target-rate searches the number of data-parallel replicas"),
    (["--prefill-replicas", "1", "--decode-replicas", "1"], "--target-rate searches"),
])
def test_target_with_a_layout_is_refused_one_line_exit_2(monkeypatch, capsys, args, message):
    code, _, err = cli(monkeypatch, capsys, "capacity", "--workload", "seed", "--goodput", "ttft:15",
                       "--target-rate", "10", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
