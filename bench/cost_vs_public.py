"""The cost model against public measurements: every reproducible row of ../shared/peer-data/public-perf/anchors.csv.

    python -m bench.cost_vs_public [--anchors ../shared/peer-data/public-perf/anchors.csv] [--rows]

Uncalibrated: datasheet numbers, the GPU files' default efficiencies and the engine preset that matches the row's
engine (`servesim.cost.host`). Prints markdown for docs/benchmarks.md: per group the rows, MAPE and worst error of
the roofline with its engine profile, and of the bare roofline (GPU kernels and a flat 1 ms per step) beside it;
`--rows` prints every row too. How each scenario becomes steps:

- static batch (TensorRT-LLM's peak throughput tables): one prefill step of the whole batch, then osl - 1 decode
  steps of the batch; output tokens per second per GPU = batch x osl / time / GPUs.
- batch-1 first-token latency: one prefill step of isl tokens on an idle engine (`Roofline.idle_step_time`: no
  previous step for the host work to overlap, so host + device).
- vLLM's `benchmark_latency` (pull request 2192): vLLM 0.2's scheduler admits prompts up to
  max_num_batched_tokens = max(max_model_len, 2048) = 4096 tokens a step, so 64 x 256 tokens are 4 prefill steps
  of 16 prompts, then 255 decode steps of all 64 (CUDA graphs, as the row says; Ray; NCCL or the custom kernel).
- all-reduce microbenchmarks (SGLang pull request 2904): the engine's own all-reduce kernel for the message size,
  read as bytes (the pull request does not say bytes or elements).
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from servesim.cost import Roofline, StepShape
from servesim.cost.host import EngineProfile, get_engine
from servesim.cost.specs import load_gpu

DEFAULT_ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "peer-data" / "public-perf" / "anchors.csv"
MODELS = {"LLaMA 7B": "llama-2-7b", "LLaMA 70B": "llama-2-70b", "Llama-2-70B": "llama-2-70b"}
GPUS = {"A100-80GB SXM": "a100-80gb", "A100-80GB": "a100-80gb", "H100 (SXM assumed)": "h100-80gb",
        "H100-80GB SXM": "h100-80gb"}
VLLM_02_BUDGET = 4096  # vLLM 0.2: max_num_batched_tokens = max(max_model_len (4096 for Llama-2), 2048)


@dataclass(slots=True)
class Result:
    group: str
    label: str
    unit: str
    measured: float
    predicted: float
    bare: float | None  # the bare roofline's prediction (no engine profile); None where it has no meaning

    @property
    def error(self) -> float:
        return abs(self.predicted - self.measured) / self.measured * 100


def static_batch_seconds(cost: Roofline, batch: int, isl: int, osl: int, budget: int | None = None) -> float:
    """One static batch: its prompts in steps of at most `budget` tokens (None: one step), then osl - 1 decodes."""
    per_step = batch if budget is None else max(1, budget // isl)
    t = 0.0
    for start in range(0, batch, per_step):
        n = min(per_step, batch - start)
        t += cost.step_time(StepShape.of(prefills=[(isl, 0)] * n))
    return t + sum(cost.decode_stretch(batch, batch * isl, osl - 1))


def reproduce(row: dict) -> Result | None:
    """The row's prediction, or None for a row servesim does not reproduce (its model or GPU is not built in)."""
    source, scenario, metric = row["source_id"], row["scenario"], row["metric"]
    gpu = GPUS.get(row["gpu"])
    fp8 = row["precision"].startswith("FP8")  # marked partial for want of FP8, which is now modelled
    if gpu is None or not (row["servesim_reproducible"].startswith("yes") or fp8):
        return None
    tp, value = int(row["tp"]), float(row["value"])
    if source == "sglang-pr-2904":
        return _all_reduce(row, gpu, tp, value)
    model = MODELS.get(row["model"])
    if model is None:
        return None
    batch, isl, osl = int(row["batch_size"]), int(row["isl"]), int(row["osl"])
    label = f"{row['model']} {row['gpu']} TP{tp} b{batch} {isl}/{osl}"
    if source == "vllm-pr-2192":
        custom = "custom" in scenario
        engine = get_engine("vllm-0.2", enforce_eager=False, disable_custom_all_reduce=not custom)
        cost, bare = Roofline(model, gpu, tp, engine=engine), Roofline(model, gpu, tp)
        return Result("vLLM 0.2.6 benchmark_latency (PR 2192)", f"{label} {'custom' if custom else 'NCCL'} AR", "s",
                      value, static_batch_seconds(cost, batch, isl, osl, VLLM_02_BUDGET),
                      static_batch_seconds(bare, batch, isl, osl, VLLM_02_BUDGET))
    # FP8 rows: weights and activations in FP8 (--quantization fp8); "FP8 (weights+KV)" also an FP8 KV cache.
    precision = {"quantization": "fp8", "kv_cache_dtype": "fp8" if "KV" in row["precision"] else "auto"} if fp8 \
        else {}
    cost = Roofline(model, gpu, tp, engine=get_engine("trtllm"), **precision)
    bare = Roofline(model, gpu, tp, **precision)
    where = f"{'H100 FP8' if fp8 else 'A100 FP16'}{' (rows marked partial)' if fp8 else ''}"
    if metric == "output throughput":
        def per_gpu(c: Roofline) -> float:
            return batch * osl / static_batch_seconds(c, batch, isl, osl) / tp
        return Result(f"TensorRT-LLM 0.6.1 static-batch throughput, {where}", label, "tok/s/GPU", value,
                      per_gpu(cost), per_gpu(bare))
    if metric == "1st token latency":
        shape = StepShape.of(prefills=[(isl, 0)])
        return Result(f"TensorRT-LLM 0.5 batch-1 first-token latency, {where}", label, "ms", value,
                      cost.idle_step_time(shape) * 1e3, bare.step_time(shape) * 1e3)
    return None


def _all_reduce(row: dict, gpu: str, tp: int, value: float) -> Result:
    from servesim.cost.roofline import allreduce_time

    size = float(row["metric"].rsplit(" ", 1)[1])
    engine: EngineProfile = get_engine("trtllm" if row["engine"].startswith("SGLang") else "vllm-0.33")
    lat, eff, _ = engine.custom_all_reduce
    link = load_gpu(gpu).interconnect_bandwidth / 2
    kernel = "TRT-LLM/SGLang kernel" if engine.name == "trtllm" else "vLLM kernel"
    return Result(f"custom all-reduce, H100 (SGLang PR 2904; {kernel})", f"TP{tp} {int(size)} B", "us", value,
                  allreduce_time(size, tp, link, ((lat, eff),)) * 1e6, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--anchors", type=Path, default=DEFAULT_ANCHORS)
    ap.add_argument("--rows", action="store_true", help="print every row, not only the groups")
    args = ap.parse_args()
    with args.anchors.open(newline="") as f:
        rows = list(csv.DictReader(f))
    results = [r for r in map(reproduce, rows) if r is not None]
    skipped = len(rows) - len(results)
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        groups[r.group].append(r)
    print("| group | rows | MAPE | worst | bare roofline MAPE |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, rs in groups.items():
        mape = sum(r.error for r in rs) / len(rs)
        bare = [abs(r.bare - r.measured) / r.measured * 100 for r in rs if r.bare is not None]
        bare_text = f"{sum(bare) / len(bare):.1f} %" if bare else "-"
        print(f"| {name} | {len(rs)} | {mape:.1f} % | {max(r.error for r in rs):.0f} % | {bare_text} |")
    print(f"\n({len(results)} rows reproduced, {skipped} not: GPUs or models without a built-in file)")
    if args.rows:
        print("\n| row | measured | predicted | bare roofline | error |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for r in results:
            bare = "-" if r.bare is None else f"{r.bare:.4g}"
            print(f"| {r.label} | {r.measured:g} {r.unit} | {r.predicted:.4g} | {bare} | {r.error:.1f} % |")


if __name__ == "__main__":
    main()
