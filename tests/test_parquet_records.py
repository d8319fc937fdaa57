"""Streaming step records to Parquet gives back exactly the records a run holds in memory."""

import polars as pl

from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.export.parquet import ParquetRecords
from servesim.workloads import load_workload


def test_streamed_records_equal_the_in_memory_ones(tmp_path):
    reqs = load_workload("seed")
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, num_gpu_blocks=138)  # KV pressure: preemption
    held = simulate(reqs, cfg, "vllm", "toy")
    with ParquetRecords(tmp_path, rows_per_group=7) as sink:  # several row groups
        streamed = simulate(reqs, cfg, "vllm", "toy", sink=sink)
    assert streamed.steps == ()  # not held
    steps = pl.read_parquet(tmp_path / "steps.parquet")
    entries = pl.read_parquet(tmp_path / "scheduled.parquet")
    waiting = pl.read_parquet(tmp_path / "waiting.parquet")
    assert steps["step"].to_list() == [s.step for s in held.steps]
    assert steps["duration"].to_list() == [s.duration for s in held.steps]
    assert steps["preempted"].to_list() == [list(s.preempted) for s in held.steps]
    assert steps["free_blocks_after_step"].to_list() == [s.free_blocks_after_step for s in held.steps]
    assert entries.select("step", "id", "num_scheduled_tokens", "kind").rows() == [
        (s.step, e.id, e.num_scheduled_tokens, e.kind.value) for s in held.steps for e in s.scheduled]
    assert waiting.select("step", "id", "reason").rows() == [
        (s.step, w.id, w.reason.value) for s in held.steps for w in s.waiting]
    assert sum(len(s.preempted) for s in held.steps) == 1  # the scenario did preempt (L, see the README)


def test_run_streams_records_with_record_steps(tmp_path):
    from typer.testing import CliRunner

    from servesim.cli.app import app

    res = CliRunner().invoke(app, ["run", "--workload", "seed", "--max-num-batched-tokens", "256", "--max-num-seqs",
                                   "8", "--record", "steps", "--records", str(tmp_path / "recs")])
    assert res.exit_code == 0, res.output
    steps = pl.read_parquet(tmp_path / "recs" / "steps.parquet")
    assert steps.height == 40  # the seed's 40 steps under vllm with budget 256 (tests/test_seed.py)
    assert not (tmp_path / "recs" / "waiting.parquet").exists()  # reasons are kept at --record full only


def test_an_interrupted_run_leaves_no_truncated_file_and_keeps_the_earlier_ones(tmp_path):
    reqs = load_workload("seed")
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8)
    with ParquetRecords(tmp_path) as sink:
        simulate(reqs, cfg, "vllm", "toy", sink=sink)
    before = (tmp_path / "steps.parquet").read_bytes()
    names = sorted(p.name for p in tmp_path.iterdir())

    class Stop(Exception):
        pass

    calls = []

    def sink_then_stop(r):
        calls.append(r.step)
        sink(r)
        if len(calls) == 3:
            raise Stop

    try:
        with ParquetRecords(tmp_path, rows_per_group=1) as sink:  # row groups on disk before the stop
            simulate(reqs, cfg, "vllm", "toy", sink=sink_then_stop)
    except Stop:
        pass
    assert calls == [0, 1, 2]
    assert (tmp_path / "steps.parquet").read_bytes() == before  # the earlier run's file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # and no partial file


def test_a_reused_folder_keeps_no_stale_file(tmp_path):
    reqs = load_workload("seed")
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, num_gpu_blocks=138)  # L waits for blocks
    with ParquetRecords(tmp_path) as sink:
        simulate(reqs, cfg, "vllm", "toy", sink=sink)  # record="full": waiting.parquet too
    assert (tmp_path / "waiting.parquet").exists()
    with ParquetRecords(tmp_path) as sink:
        simulate(reqs, cfg, "vllm", "toy", record="steps", sink=sink)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scheduled.parquet", "steps.parquet"]
