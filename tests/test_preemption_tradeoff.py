"""Recompute vs swap (README): the same KV shortfall, once where swap wins and once where recompute wins."""

import pytest

from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig

REQUESTS = [Request(f"r{i}", 0.0, 1500, 300) for i in range(3)]


def run(mode, pcie):
    # 299 usable blocks of 16 tokens: all three 1500-token prompts (94 blocks each) are admitted; r0's prefill ends
    # in step 0, r1's in step 1, r2's in step 2, so in step k r0, r1, r2 hold 1500 + k, 1499 + k, 1498 + k tokens.
    # 299 = 3 x 99 + 2: in step 87 they need ceil(1587/16) + ceil(1586/16) + ceil(1585/16) = 100 + 100 + 100 = 300
    # blocks, and the newest, r2, is preempted with its 1584 computed tokens in 99 blocks.
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8, block_size=16, num_gpu_blocks=300,
                       preemption_mode=mode, pcie_bandwidth=pcie)
    return simulate(REQUESTS, cfg, "vllm", "toy")


def test_recompute_throws_away_the_victims_cache_and_processes_it_again():
    r = run("recompute", 32e9)
    (p,) = r.preemptions
    assert (p.step, p.id, p.mode, p.tokens_discarded, p.blocks_freed) == (87, "r2", "recompute", 1584, 99)
    assert r.recomputed_tokens == 1584
    # each prompt once and every output but the last once, plus r2's discarded 1584
    assert r.tokens_processed == 3 * (1500 + 299) + 1584


def test_swap_moves_the_victims_blocks_both_ways_and_recomputes_nothing():
    r = run("swap", 32e9)
    (p,) = r.preemptions
    # r2's 99 blocks of 16 tokens x 131072 bytes (EngineConfig's default kv_bytes_per_token, Llama-3-8B's)
    assert (p.step, p.id, p.tokens_discarded, p.blocks_freed) == (87, "r2", 0, 99)
    assert p.bytes_moved == 99 * 16 * 131072 == 207_618_048
    assert p.swap_time == pytest.approx(207_618_048 / 32e9)  # 6.5 ms each way
    assert r.recomputed_tokens == 0
    assert r.tokens_processed == 3 * (1500 + 299)


def test_fast_pcie_favours_swap_and_slow_pcie_favours_recompute():
    # swap costs 2 x 207,618,048 B over PCIe: 13 ms at 32 GB/s, 830 ms at 0.5 GB/s; recompute re-processes r2's
    # 1584 tokens plus its latest, at 0.1 ms each (toy): about 158.5 ms whatever the bus
    assert run("swap", 32e9).makespan < run("recompute", 32e9).makespan
    assert run("recompute", 0.5e9).makespan < run("swap", 0.5e9).makespan
    # recompute does not touch PCIe: its makespan is the same at both bandwidths
    assert run("recompute", 32e9).makespan == run("recompute", 0.5e9).makespan
