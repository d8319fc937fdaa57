"""Recompute vs swap (README): the same KV shortfall, once where swap wins and once where recompute wins."""

import pytest

from servesim.config import EngineConfig
from servesim.engine import simulate
from servesim.request import Request

REQUESTS = [Request(f"r{i}", 0.0, 1500, 300) for i in range(3)]


def run(mode, pcie):
    # 299 usable blocks of 16 tokens: all three 1500-token prompts (94 blocks each) are admitted, then decode
    # growth runs the pool dry and the newest request, r2, is preempted once.
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8, block_size=16, num_gpu_blocks=300,
                       preemption_mode=mode, pcie_bandwidth=pcie)
    return simulate(REQUESTS, cfg, "vllm", "toy")


def test_recompute_throws_away_the_victims_cache_and_processes_it_again():
    r = run("recompute", 32e9)
    (p,) = r.preemptions
    assert p.id == "r2" and p.mode == "recompute"
    assert p.blocks_freed == -(-p.tokens_discarded // 16)
    assert r.recomputed_tokens == p.tokens_discarded
    assert r.tokens_processed == 3 * (1500 + 299) + p.tokens_discarded


def test_swap_moves_the_victims_blocks_both_ways_and_recomputes_nothing():
    r = run("swap", 32e9)
    (p,) = r.preemptions
    assert p.bytes_moved == p.blocks_freed * 16 * 131072
    assert p.swap_time == pytest.approx(p.bytes_moved / 32e9)
    assert r.recomputed_tokens == 0
    assert r.tokens_processed == 3 * (1500 + 299)


def test_fast_pcie_favours_swap_and_slow_pcie_favours_recompute():
    assert run("swap", 32e9).makespan < run("recompute", 32e9).makespan
    assert run("recompute", 0.5e9).makespan < run("swap", 0.5e9).makespan
    # recompute does not touch PCIe: its makespan is the same at both bandwidths
    assert run("recompute", 32e9).makespan == run("recompute", 0.5e9).makespan
