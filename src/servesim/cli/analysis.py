"""Analysis commands: run (vLLM's benchmark block), compare (side by side), explain (sentences from records)."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each
# start, and would eval each string (~0.01 s in all).

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from servesim.cli.app import app
from servesim.cli.options import (
    Async,
    BlockSize,
    Budget,
    Cost,
    DecodeMs,
    GpuBlocks,
    KvBytes,
    MaxModelLen,
    MaxSeqs,
    NoChunk,
    OverheadMs,
    Pcie,
    Policy,
    Preemption,
    PrefillMs,
    QueuePolicy,
    Record,
    SwapSpace,
    Threshold,
    Watermark,
    cost_model,
    engine_options,
)
from servesim.cli.progress import SimProgress
from servesim.cli.term import LazyConsole
from servesim.cli.workload import (
    BurstinessOpt,
    ColumnsOpt,
    FormatOpt,
    KeepFailedOpt,
    LogTypeOpt,
    NumRequestsOpt,
    OutputLenOpt,
    PromptLenOpt,
    RateScaleOpt,
    RequestRateOpt,
    SeedOpt,
    TimeUnitOpt,
    TraceModelOpt,
    WindowOpt,
    WorkloadOpt,
    loader_options,
    workload_from_options,
)
from servesim.cost import COST_MODELS, CostModel, get_cost_model
from servesim.engine import simulate
from servesim.errors import ConfigError
from servesim.export.parquet import ParquetRecords

console = LazyConsole(highlight=False, soft_wrap=True)  # compare, explain; run prints plain text

Model = Annotated[str | None, typer.Option("--model", help="Model for the roofline cost (e.g. llama-3-8b); "
                                                          "given, the cost model is the roofline.")]
Gpu = Annotated[str, typer.Option("--gpu", help="GPU for the roofline cost (e.g. h100-80gb).")]
Tp = Annotated[int, typer.Option("--tp", help="Tensor-parallel size for the roofline cost.")]
Percentiles = Annotated[str, typer.Option("--percentiles", help="Percentiles to report (vLLM's "
                                                               "--metric-percentiles), e.g. 50,90,99.")]


def build_cost(cost: str, model: str | None, gpu: str, tp: int, decode_ms: float, prefill_token_ms: float,
               overhead_ms: float, workload: str | None = None) -> CostModel:
    if model is None:
        return cost_model(cost, decode_ms, prefill_token_ms, overhead_ms, workload)
    if "roofline" not in COST_MODELS:
        raise ConfigError(f"--model {model} needs the roofline cost model, which this build does not have "
                          f"(registered: {', '.join(sorted(COST_MODELS))}); use --cost instead")
    return get_cost_model("roofline", model=model, gpu=gpu, tp=tp)


@app.command("run")
def run_cmd(
    policy: Policy = "vllm",
    workload: WorkloadOpt = "seed",
    format: FormatOpt = None,
    columns: ColumnsOpt = None,
    time_unit: TimeUnitOpt = None,
    request_rate: RequestRateOpt = None,
    burstiness: BurstinessOpt = 1.0,
    num_requests: NumRequestsOpt = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    window: WindowOpt = None,
    rate_scale: RateScaleOpt = None,
    seed: SeedOpt = 0,
    trace_model: TraceModelOpt = None,
    log_type: LogTypeOpt = None,
    keep_failed: KeepFailedOpt = False,
    max_num_batched_tokens: Budget = None,
    max_num_seqs: MaxSeqs = 256,
    long_prefill_token_threshold: Threshold = 0,
    no_chunked_prefill: NoChunk = False,
    num_gpu_blocks: GpuBlocks = None,
    watermark: Watermark = 0.0,
    preemption_mode: Preemption = "recompute",
    block_size: BlockSize = 16,
    scheduling_policy: QueuePolicy = "fcfs",
    swap_space: SwapSpace = None,
    kv_bytes_per_token: KvBytes = 131072,
    pcie_bandwidth: Pcie = 32e9,
    async_scheduling: Async = False,
    max_model_len: MaxModelLen = None,
    cost: Cost = "auto",
    decode_ms: DecodeMs = 1.0,
    prefill_token_ms: PrefillMs = 0.1,
    overhead_ms: OverheadMs = 0.0,
    model: Model = None,
    gpu: Gpu = "h100-80gb",
    tp: Tp = 1,
    percentiles: Percentiles = "50,90,99",
    percentile_metrics: Annotated[str, typer.Option(
        "--percentile-metrics", help="Metrics to report: any of ttft,tpot,itl,e2el.")] = "ttft,tpot,itl,e2el",
    goodput: Annotated[list[str] | None, typer.Option(
        "--goodput", help="SLOs in ms, vLLM's syntax: --goodput 'ttft:300 tpot:50' (or repeat the option).")] = None,
    warmup: Annotated[float, typer.Option(
        "--warmup-s", help="Exclude requests arriving in the first S seconds.")] = 0.0,
    cooldown: Annotated[float, typer.Option("--cooldown-s", help="Exclude requests arriving in the last S seconds "
                                                                 "of the arrivals.")] = 0.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write vLLM's result keys here.")] = None,
    server: Annotated[bool, typer.Option(help="Also print the server-side breakdown.")] = True,
    record: Record = "summary",
    records_dir: Annotated[Path | None, typer.Option(
        "--records", help="Stream the step records to DIR/steps.parquet, scheduled.parquet and waiting.parquet "
                          "(with --record steps or full) instead of holding them.")] = None,
) -> None:
    """Simulate and print `vllm bench serve`'s "Serving Benchmark Result" block (same labels and layout), the
    server-side breakdown only a simulator can give, and OVERLOADED with its evidence when the queue is unstable."""
    from servesim.analysis.benchmark import (
        benchmark_metrics,
        format_result,
        parse_goodput,
        parse_metric_names,
        parse_percentiles,
        to_json,
    )
    from servesim.analysis.breakdown import format_server, server_metrics
    from servesim.analysis.overload import detect_overload

    ps, names = parse_percentiles(percentiles), parse_metric_names(percentile_metrics)
    slos = parse_goodput(goodput or [])
    cfg = engine_options(locals())
    reqs = workload_from_options(workload, **loader_options(locals()))
    if records_dir is not None and record == "summary":
        raise ConfigError("--records writes step records: give --record steps or --record full with it")
    cm = build_cost(cost, model, gpu, tp, decode_ms, prefill_token_ms, overhead_ms, workload)
    with SimProgress() as progress, (ParquetRecords(records_dir) if records_dir else nullcontext()) as sink:
        result = simulate(reqs, cfg, policy, cm, record=record, progress=progress, sink=sink)
    if records_dir is not None:
        print(f"wrote step records to {records_dir}/")
    m = benchmark_metrics(result, ps, slos, warmup, cooldown)
    over = detect_overload(result, warmup, cooldown)
    if over.overloaded:
        print(over.sentence())
    print(format_result(m, names, request_rate=request_rate))
    if server:
        print(format_server(server_metrics(result, ps)))
    if json_path:
        rate = None if request_rate is None else "inf" if request_rate == float("inf") else request_rate
        data = to_json(m, names) | {"request_rate": rate, "burstiness": burstiness if rate is not None else None,
                                    "max_concurrency": None,  # servesim's client is open-loop: no cap
                                    "policy": result.policy, "cost_model": result.cost_model,
                                    "overloaded": over.overloaded, "num_steps": len(result.step_log)}
        json_path.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {json_path}")


@app.command()
def compare(
    workload: WorkloadOpt = "seed",
    format: FormatOpt = None,
    columns: ColumnsOpt = None,
    time_unit: TimeUnitOpt = None,
    request_rate: RequestRateOpt = None,
    burstiness: BurstinessOpt = 1.0,
    num_requests: NumRequestsOpt = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    window: WindowOpt = None,
    rate_scale: RateScaleOpt = None,
    seed: SeedOpt = 0,
    trace_model: TraceModelOpt = None,
    log_type: LogTypeOpt = None,
    keep_failed: KeepFailedOpt = False,
    policies: Annotated[str | None, typer.Option(
        "--policies", help="Policies side by side, e.g. static,continuous,vllm.")] = None,
    set_: Annotated[str | None, typer.Option(
        "--set", help="One knob, several values, e.g. max_num_batched_tokens=256,512,2048.")] = None,
    policy: Annotated[str, typer.Option("--policy", "-p", help="Policy for --set.")] = "vllm",
    max_num_batched_tokens: Budget = None,
    max_num_seqs: MaxSeqs = 256,
    long_prefill_token_threshold: Threshold = 0,
    num_gpu_blocks: GpuBlocks = None,
    watermark: Watermark = 0.0,
    preemption_mode: Preemption = "recompute",
    block_size: BlockSize = 16,
    scheduling_policy: QueuePolicy = "fcfs",
    swap_space: SwapSpace = None,
    kv_bytes_per_token: KvBytes = 131072,
    pcie_bandwidth: Pcie = 32e9,
    async_scheduling: Async = False,
    max_model_len: MaxModelLen = None,
    cost: Cost = "auto",
    decode_ms: DecodeMs = 1.0,
    prefill_token_ms: PrefillMs = 0.1,
    overhead_ms: OverheadMs = 0.0,
    model: Model = None,
    gpu: Gpu = "h100-80gb",
    tp: Tp = 1,
) -> None:
    """The same workload through several policies or several values of one knob: one table, a column each, and
    sentences attributing the differences. A token budget applies to chunking policies only (static and
    continuous never chunk; vLLM would reject a budget below max_model_len for them)."""
    from servesim.analysis.compare import compare_rows, compare_sentences, parse_set, run_policies, run_sweep

    if (policies is None) == (set_ is None):
        raise ConfigError("give exactly one of --policies A,B,... or --set KNOB=V1,V2,...")
    cfg = engine_options(locals())
    cm = build_cost(cost, model, gpu, tp, decode_ms, prefill_token_ms, overhead_ms, workload)
    reqs = workload_from_options(workload, **loader_options(locals()))
    notes: list[str] = []
    if policies is not None:
        names = [p.strip() for p in policies.split(",") if p.strip()]
        if len(names) < 2:
            raise ConfigError(f"--policies {policies!r}: name at least two policies")
        results, notes = run_policies(reqs, names, cfg, cm)
    else:
        results = run_sweep(reqs, policy, cfg, cm, *parse_set(set_))
    from rich.table import Table

    t = Table(title=f"{workload}: side by side ({cm.name} cost)", title_justify="left")
    t.add_column("")
    for name in results:
        t.add_column(name, justify="right")
    for label, values in compare_rows(results):
        t.add_row(label, *values)
    console.print(t)
    for line in notes + compare_sentences(results):
        console.print(line)


@app.command()
def explain(
    policy: Policy = "vllm",
    workload: WorkloadOpt = "seed",
    format: FormatOpt = None,
    columns: ColumnsOpt = None,
    time_unit: TimeUnitOpt = None,
    request_rate: RequestRateOpt = None,
    burstiness: BurstinessOpt = 1.0,
    num_requests: NumRequestsOpt = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    window: WindowOpt = None,
    rate_scale: RateScaleOpt = None,
    seed: SeedOpt = 0,
    trace_model: TraceModelOpt = None,
    log_type: LogTypeOpt = None,
    keep_failed: KeepFailedOpt = False,
    request: Annotated[str | None, typer.Option("--request", help="Explain one request by id.")] = None,
    max_num_batched_tokens: Budget = None,
    max_num_seqs: MaxSeqs = 256,
    long_prefill_token_threshold: Threshold = 0,
    no_chunked_prefill: NoChunk = False,
    num_gpu_blocks: GpuBlocks = None,
    watermark: Watermark = 0.0,
    preemption_mode: Preemption = "recompute",
    block_size: BlockSize = 16,
    scheduling_policy: QueuePolicy = "fcfs",
    swap_space: SwapSpace = None,
    kv_bytes_per_token: KvBytes = 131072,
    pcie_bandwidth: Pcie = 32e9,
    async_scheduling: Async = False,
    max_model_len: MaxModelLen = None,
    cost: Cost = "auto",
    decode_ms: DecodeMs = 1.0,
    prefill_token_ms: PrefillMs = 0.1,
    overhead_ms: OverheadMs = 0.0,
    model: Model = None,
    gpu: Gpu = "h100-80gb",
    tp: Tp = 1,
    counterfactual: Annotated[bool, typer.Option(
        help="When a prompt was chunked, also run the workload unchunked and say what chunking changed.")] = True,
) -> None:
    """Plain sentences built from the step records: what bound the schedule, where tail latency came from,
    preemptions and their cost; with --request ID, that request's wait, prefill chunks, preemptions and gaps."""
    from servesim.analysis.explain import explain_request
    from servesim.run import Run

    cfg = engine_options(locals())
    cm = build_cost(cost, model, gpu, tp, decode_ms, prefill_token_ms, overhead_ms, workload)
    reqs = workload_from_options(workload, **loader_options(locals()))
    result = simulate(reqs, cfg, policy, cm)
    if request is not None:
        if request not in {r.id for r in result.requests}:
            raise ConfigError(f"--request {request!r}: no such request in {workload!r} "
                              f"(ids: {', '.join(r.id for r in result.requests[:10])}"
                              f"{', ...' if len(result.requests) > 10 else ''})")
        lines = explain_request(result, request)
    else:
        lines = Run(result, reqs if counterfactual else None, cost=cm).explain().split("\n")
    for line in lines:
        console.print(line)
