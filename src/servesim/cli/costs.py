"""`servesim cost`, `models`, `gpus`, `calibrate`: registered here."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each
# start, and would eval each string (~0.01 s in all).

import json
import shutil
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servesim.cli.app import app
from servesim.cost import StepShape
from servesim.cost.specs import builtin_gpus, builtin_models, load_model
from servesim.errors import ConfigError

# The engine-profile flags `cost` and `calibrate` share (vLLM's names; the preset's value when not given)
EnforceEagerOpt = Annotated[bool | None, typer.Option("--enforce-eager/--no-enforce-eager",
                                                      help="No CUDA graphs [default: the preset's].")]
ExecutorBackendOpt = Annotated[str | None, typer.Option(help="mp | ray [default: the preset's].")]
CustomAllReduceOpt = Annotated[bool | None, typer.Option("--disable-custom-all-reduce/--enable-custom-all-reduce",
                                                         help="NCCL only [default: the preset's].")]
AsyncSchedulingOpt = Annotated[bool | None, typer.Option("--async-scheduling/--no-async-scheduling",
                                                         help="Host work overlaps the GPU's [default: the preset's].")]

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _console() -> "Console":
    from rich.console import Console  # imported here: only these commands print rich tables

    return Console(width=shutil.get_terminal_size().columns)  # the terminal's width (COLUMNS), 80 in a pipe


def _table(title: str) -> "Table":
    from rich.table import Table

    return Table(title=title)


@app.command()
def cost(
    model: Annotated[str | None, typer.Option(help="Built-in model name (see `servesim models`) or PATH/config.json "
                                              "[default: llama-3-8b, or the --cost profile's model].")] = None,
    gpu: Annotated[str | None, typer.Option(help="Built-in GPU name or alias (see `servesim gpus`) or PATH.toml "
                                            "[default: h100-80gb; a --cost profile has its own].")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size (GPUs per replica) [default: 1, or the "
                                           "--cost profile's].")] = None,
    prefill: Annotated[list[str] | None, typer.Option(
        help="A prefill chunk TOKENS@CONTEXT (tokens new this step @ tokens already cached); repeatable.")] = None,
    decodes: Annotated[int, typer.Option(help="Number of decoding requests (one new token each).")] = 0,
    context: Annotated[int, typer.Option(help="Context of each decoding request, in tokens.")] = 1024,
    cost_profile: Annotated[str | None, typer.Option(
        "--cost", help="A calibrated profile PATH.json (`servesim calibrate`), not the defaults; or aic: each "
        "operator from AIConfigurator's measured tables (servesim[aic]).")] = None,
    aic_backend_version: Annotated[str | None, typer.Option(
        help="--cost aic: the engine release whose tables price the step [default: the newest].")] = None,
    quantization: Annotated[str | None, typer.Option("--quantization", "-q", help="fp8: linear layers in FP8 at "
                                                     "the GPU's FP8 peak | modelopt_fp4: NVFP4 | mxfp4: an MXFP4 "
                                                     "checkpoint's experts (gpt-oss) [default: none, or the "
                                                     "checkpoint's own].")] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="auto | fp8 [default: auto].")] = None,
    enable_expert_parallel: Annotated[bool | None, typer.Option(
        "--enable-expert-parallel", help="MoE models: whole experts per GPU (vLLM's expert parallelism) "
        "[default: off].")] = None,
    data_parallel_size: Annotated[int | None, typer.Option(
        "--data-parallel-size", "-dp", help="vLLM: data-parallel ranks of --tp GPUs; the step is one rank's, every "
        "rank alike [default: 1].")] = None,
    all2all_backend: Annotated[str | None, typer.Option(
        help="vLLM, EP over DP > 1: allgather_reducescatter | deepep_high_throughput | deepep_low_latency.")] = None,
    ep_size: Annotated[int | None, typer.Option(help="SGLang (--engine sglang): whole experts over N of the --tp "
                                                "GPUs, MoE TP --tp / N [default: 1].")] = None,
    enable_dp_attention: Annotated[bool | None, typer.Option(
        "--enable-dp-attention", help="SGLang: attention DP, --dp-size ranks of --tp / --dp-size GPUs.")] = None,
    dp_size: Annotated[int | None, typer.Option(help="SGLang, with --enable-dp-attention: the ranks.")] = None,
    moe_a2a_backend: Annotated[str | None, typer.Option(help="SGLang: none | deepep.")] = None,
    deepep_mode: Annotated[str | None, typer.Option(help="SGLang, deepep: normal | low_latency | auto.")] = None,
    expert_load_imbalance: Annotated[float | None, typer.Option(
        help="Expert parallelism: the busiest EP rank's routed tokens over the mean [default: 1.52].")] = None,
    engine: Annotated[str | None, typer.Option(help="Engine profile (host time per step): vllm-0.33 | vllm-0.13 | "
                                               "vllm-0.2 | trtllm | sglang [default: vllm-0.33].")] = None,
    enforce_eager: EnforceEagerOpt = None,
    distributed_executor_backend: ExecutorBackendOpt = None,
    disable_custom_all_reduce: CustomAllReduceOpt = None,
    async_scheduling: AsyncSchedulingOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON object: total_ms (wall), device_ms, host_ms "
                                                         "and the breakdown.")] = False,
) -> None:
    """Time of one step (milliseconds) on the roofline: the GPU's operators (all layers summed), the engine's host
    work beside them, and which of the two bounds the step. With --cost aic each operator comes from
    AIConfigurator's measured tables, and its column says the value's source (silicon: measured; mixed,
    empirical: interpolated or transferred; roofline: servesim's own)."""
    from servesim.cost.calibrate import parse_prefill

    # The model and GPU first, so a misspelled name is reported (with the valid ones) before a missing step.
    from servesim.defaults import build_cost

    if cost_profile is not None and cost_profile != "aic" and not cost_profile.endswith((".json", ".toml")):
        raise ConfigError(f"--cost {cost_profile}: expected aic or a profile PATH.json or PATH.toml (`servesim "
                          "calibrate`)")
    from servesim.cost.layout import from_flags

    layout = from_flags("sglang" if (engine or "").startswith("sglang") else "vllm", tp, expert_load_imbalance,
                        enable_expert_parallel=enable_expert_parallel, data_parallel_size=data_parallel_size,
                        all2all_backend=all2all_backend, ep_size=ep_size, enable_dp_attention=enable_dp_attention,
                        dp_size=dp_size, moe_a2a_backend=moe_a2a_backend, deepep_mode=deepep_mode)
    shaped = {"layout": layout} if layout is not None else {"tp": tp}
    roof = build_cost(cost_profile or "roofline", model=model, gpu=gpu, quantization=quantization,
                      aic_backend_version=aic_backend_version, **shaped,
                      kv_cache_dtype=kv_cache_dtype, engine=engine,
                      enforce_eager=enforce_eager, distributed_executor_backend=distributed_executor_backend,
                      disable_custom_all_reduce=disable_custom_all_reduce, async_scheduling=async_scheduling)
    chunks = [c for spec in prefill or () for c in parse_prefill(spec)]
    if decodes < 0 or context < 0:
        raise ConfigError("--decodes and --context must be >= 0")
    if not chunks and not decodes:
        raise ConfigError("an empty step: give --prefill TOKENS@CONTEXT and/or --decodes N")
    shape = StepShape.of(decodes=[context] * decodes, prefills=chunks)
    total, parts = roof.step_time(shape), roof.breakdown(shape)
    device, host, issue, bound = _split(roof, shape)
    e = roof.engine
    if as_json:
        print(json.dumps({
            "model": roof.model.name, "gpu": roof.gpu.name, "tp": roof.tp, "layout": _layout_json(roof),
            "total_ms": total * 1e3, "by_bound": {k: v * 1e3 for k, v in _by_bound(parts).items()},
            "device_ms": device * 1e3, "host_ms": host * 1e3, "launch_ms": issue * 1e3, "bound": bound,
            "engine": None if e is None else {
                "name": e.name, "version": e.version, "enforce_eager": e.enforce_eager,
                "distributed_executor_backend": e.distributed_executor_backend,
                "disable_custom_all_reduce": e.disable_custom_all_reduce, "async_scheduling": e.async_scheduling},
            "num_tokens": shape.num_tokens, "num_decodes": shape.num_decodes,
            **({"aic_database": dict(zip(("system", "backend", "version"), roof.database)),
                "aic_fallbacks": roof.fallbacks} if hasattr(roof, "database") else {}),
            "breakdown": [{"operator": p.name, "ms": p.seconds * 1e3, "bound": p.bound, "flops": p.flops,
                           "bytes": p.bytes} for p in parts],
        }, indent=2))
        return
    measured = getattr(roof, "database", None)
    lay = getattr(roof, "layout", None)
    where = f"{lay.gpus} x {roof.gpu.name} ({lay.describe()})" if lay is not None and lay.gpus > lay.tp or (
        lay is not None and lay.moe_ep > 1) else f"{roof.tp} x {roof.gpu.name}"
    table = _table(f"{roof.model.name} on {where}: {shape.num_tokens} tokens "
                   f"({shape.num_decodes} decodes, {len(chunks)} prefill chunks)"
                   + (f"; AIConfigurator's {' '.join(measured)} tables" if measured else ""))
    table.add_column("operator")
    table.add_column("ms", justify="right")
    table.add_column("share", justify="right")
    table.add_column("source" if measured else "bound")
    gpu_total = sum(p.seconds for p in parts)
    for p in parts:
        table.add_row(p.name, f"{p.seconds * 1e3:.3f}", f"{p.seconds / gpu_total:.0%}", p.bound)
    if not measured:
        table.add_row("by bound", "", "", " · ".join(f"{k} {v / gpu_total:.0%}" for k, v in _by_bound(parts).items()))
    if e is None:
        table.add_row("total", f"{total * 1e3:.3f}", "100%", "", style="bold")
        _console().print(table)
        return
    table.add_row("device (GPU)", f"{device * 1e3:.3f}", "100%", "", style="bold")
    if e.enforce_eager:
        table.add_row("eager launches (host)", f"{issue * 1e3:.3f}", "", "per layer max(launch, device)")
    how = "overlapped: max(host, device)" if e.async_scheduling else "in series: host + device"
    table.add_row(f"host ({e.name})", f"{host * 1e3:.3f}", "", how)
    table.add_row("step (wall)", f"{total * 1e3:.3f}", "", f"{bound}-bound", style="bold")
    _console().print(table)
    for which, why in (getattr(roof, "fallbacks", None) or {}).items():
        print(f"note: {which}: priced by the roofline, the tables have none ({why})")


def _by_bound(parts) -> dict[str, float]:
    """Seconds of the operators by what bounds each (compute, memory, communication, overhead), largest first."""
    out: dict[str, float] = {}
    for p in parts:
        out[p.bound] = out.get(p.bound, 0.0) + p.seconds
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _layout_json(roof) -> dict | None:
    lay = getattr(roof, "layout", None)
    if lay is None:
        return None
    return {"tp": lay.tp, "dp": lay.dp, "moe_tp": lay.moe_tp, "moe_ep": lay.moe_ep, "moe_comm": lay.moe_comm,
            "expert_load_imbalance": lay.imbalance, "gpus": lay.gpus}


def _split(roof, shape: StepShape) -> tuple[float, float, float, str]:
    """(device, host, eager issue seconds, what bounds the step: "device" | "host" | "launch"). Without an engine
    profile (a calibrated profile) the host part is the profile's flat step overhead, in series."""
    if roof.engine is None:
        host = roof.params.step_overhead
        device = roof.step_time(shape) - host
        return device, host, 0.0, "host" if host > device else "device"
    device, host, issue = roof.split(shape)
    gpu = max(device, issue) if roof.engine.enforce_eager else device
    if host > gpu:
        return device, host, issue, "host"
    return device, host, issue, "launch" if gpu > device else "device"


@app.command()
def models() -> None:
    """Built-in model specs (Hugging Face config.json values); KV bytes per token at tp=1."""
    from servesim.cli.render import text_table

    rows = []
    for name in builtin_models():
        m = load_model(name)
        mlp = (f"{m.expert_intermediate_size} x{m.num_local_experts}/{m.num_experts_per_tok}"
               if m.num_local_experts else f"{m.intermediate_size}")
        heads = f"{m.num_attention_heads}/MLA" if m.is_mla else f"{m.num_attention_heads}/{m.num_key_value_heads}"
        quant = {"compressed-tensors": "int4"}.get(m.quant_method, m.quant_method)
        rows.append([name, f"{m.num_parameters / 1e9:.1f}B", str(m.num_hidden_layers), str(m.hidden_size), heads,
                     _attention_kinds(m), str(m.vocab_size), str(m.kv_bytes_per_token),
                     mlp + (f" {quant}" if quant else "")])
    print("built-in models (--model NAME, or --model PATH/config.json)\n")
    print(text_table(["name", "params", "layers", "hidden", "heads/kv", "attention", "vocab", "KV B/tok", "MLP"],
                     rows, right={1, 2, 3, 4, 6, 7}, width=shutil.get_terminal_size().columns))
    print("\n" + textwrap.fill("heads/kv: attention and KV heads (MLA: one latent per token, kv_lora_rank + rope); "
                               "attention: the layers' kinds (sliding window W, Gated DeltaNet linear layers, DSA's "
                               "top-k); KV B/tok: the full-attention layers' (docs/cost-models.md, KV capacity); "
                               "MLP: intermediate_size, or an expert's width x experts/active for mixtures of "
                               "experts, and the checkpoint's quantization_config (fp8, int4, mxfp4)",
                               shutil.get_terminal_size().columns))


def _attention_kinds(m) -> str:
    """A model's attention layers by kind, for `servesim models`."""
    if m.index_topk:
        return f"DSA top-{m.index_topk}"
    if m.num_sliding_layers:
        return f"{m.num_full_attention_layers} full, {m.num_sliding_layers} window {m.sliding_window}"
    if m.num_linear_layers:
        return f"{m.num_full_attention_layers} full, {m.num_linear_layers} linear"
    return "full"


@app.command()
def gpus() -> None:
    """Built-in GPU specs (datasheet numbers) and their default efficiencies."""
    from servesim.cli.render import text_table

    rows = [[name, f"{g.peak_flops / 1e12:.0f}", "-" if g.fp8_flops is None else f"{g.fp8_flops / 1e12:.0f}",
             "-" if g.fp4_flops is None else f"{g.fp4_flops / 1e12:.0f}",
             f"{g.memory_bandwidth / 1e9:.0f}", f"{g.memory_bytes / 2**30:.0f}",
             f"{g.interconnect_bandwidth / 1e9:.0f}", f"{g.pcie_bandwidth / 1e9:.0f}",
             f"{g.compute_efficiency:g}/{g.memory_efficiency:g}/{g.interconnect_efficiency:g}",
             "uniform" if g.kernels is None else "fitted", ", ".join(g.aliases)]
            for name, g in builtin_gpus().items()]
    print("built-in GPUs (--gpu NAME or alias, or --gpu PATH.toml)\n")
    head = ["name", "bf16 TFLOP/s", "FP8 TFLOP/s", "FP4 TFLOP/s", "HBM GB/s", "GiB", "link GB/s", "PCIe GB/s",
            "eff c/m/l", "kernels", "aliases"]
    print(text_table(head, rows, right={1, 2, 3, 4, 5, 6, 7}, width=shutil.get_terminal_size().columns))
    print("\n" + textwrap.fill("TFLOP/s: dense tensor-core peaks (FP8: --quantization fp8; FP4: --quantization "
                               "modelopt_fp4, NVFP4; -: none); "
                               "link: GPU-to-GPU, both directions; eff c/m/l: the GEMMs' compute and memory "
                               "efficiencies and NCCL's link efficiency where no TP size is fitted; kernels: "
                               "per-operator constants fitted to measured profiles ([kernels] in the GPU file) or "
                               "one efficiency for all", shutil.get_terminal_size().columns))


POOR_FIT_MAPE = 50.0  # held-out MAPE (%) from which a fitted profile is written with a warning


@app.command("calibrate")
def calibrate_cmd(
    measured: Annotated[Path, typer.Argument(help="CSV of measurements: operator,tp,num_tokens,size_bytes,decodes,"
                                             "context,prefill,time_ms; or a `vllm bench serve --save-result "
                                             "--save-detailed` JSON, or AIPerf's profile_export.jsonl (or its "
                                             "artifacts folder) (see docs/cost-models.md).")],
    model: Annotated[str, typer.Option(help="Model measured (name or PATH/config.json).")],
    gpu: Annotated[str, typer.Option(help="GPU measured on (name, alias or PATH.toml).")],
    tp: Annotated[int, typer.Option(help="Tensor-parallel size the profile defaults to as --cost (and the vLLM "
                                         "result's run).")] = 1,
    output: Annotated[Path, typer.Option("-o", "--output", help="Profile to write (JSON).")] = Path("profile.json"),
    seed: Annotated[int, typer.Option(help="CSV: the seed of the split into fitted and held-out halves; vLLM "
                                           "result: vllm bench serve's --seed, for the arrivals.")] = 0,
    engine: Annotated[str | None, typer.Option(help="Fit this engine profile's host constants too: vllm-0.33 | "
                                               "vllm-0.13 | "
                                               "vllm-0.2 | trtllm | sglang [a vLLM result: vllm-0.33].")] = None,
    enforce_eager: EnforceEagerOpt = None,
    distributed_executor_backend: ExecutorBackendOpt = None,
    disable_custom_all_reduce: CustomAllReduceOpt = None,
    async_scheduling: AsyncSchedulingOpt = None,
    request_rate: Annotated[float | None, typer.Option(help="vLLM result: the run's --request-rate [default: the "
                                                       "file's request_rate].")] = None,
    burstiness: Annotated[float | None, typer.Option(help="vLLM result: the run's --burstiness [default: the "
                                                     "file's, else 1].")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="vLLM result: the server's --max-num-seqs [default: "
                                                     "vLLM's for the GPU].")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(help="vLLM result: the server's "
                                                               "--max-num-batched-tokens [default: vLLM's].")] = None,
) -> None:
    """Fit efficiencies and overheads (bounded least squares) to measured times; write a profile for --cost.

    Reports MAPE and the worst error on the half of the rows held out from the fit. With --engine (or a vLLM
    result file) the engine's host constants are fitted too, from the step rows (or by simulating the file's
    requests), the GPU part taken from the operator rows' fit or the GPU file.
    """
    from servesim.output import check_output_file

    if tp < 1:
        raise ConfigError(f"--tp {tp}: expected a tensor-parallel size >= 1")
    check_output_file(output, "--output")
    flags = {"enforce_eager": enforce_eager, "distributed_executor_backend": distributed_executor_backend,
             "disable_custom_all_reduce": disable_custom_all_reduce, "async_scheduling": async_scheduling}
    replay = {"--request-rate": request_rate, "--burstiness": burstiness, "--max-num-seqs": max_num_seqs,
              "--max-num-batched-tokens": max_num_batched_tokens}
    try:
        if measured.suffix in (".json", ".jsonl") or measured.is_dir():
            _calibrate_serve(measured, model, gpu, tp, output, seed, engine, flags, replay)
        else:
            given = [k for k, v in replay.items() if v is not None]
            if given:
                raise ConfigError(f"{', '.join(given)}: options of a vLLM result file (JSON), not of the "
                                  f"measurements CSV {measured}; drop them")
            _calibrate_csv(measured, model, gpu, tp, output, seed, engine, flags)
    except ImportError:
        raise ConfigError("calibration needs scipy: pip install 'servesim[fit]'") from None


def _calibrate_csv(measured: Path, model: str, gpu: str, tp: int, output: Path, seed: int, engine: str | None,
                   flags: dict) -> None:
    from servesim.cost.calibrate import calibrate, read_measurements
    from servesim.cost.calibrate_host import fit_host_steps
    from servesim.cost.host import get_engine
    from servesim.cost.roofline import CostParams
    from servesim.cost.specs import load_gpu

    rows = read_measurements(measured)
    host_wanted = engine is not None or any(v is not None for v in flags.values())
    preset = get_engine(engine, **{k: v for k, v in flags.items() if v is not None}) if host_wanted else None
    gpu_rows = [r for r in rows if r.operator != "step"] if host_wanted else rows
    fit = calibrate(gpu_rows, model, gpu, seed=seed) if gpu_rows else None
    report = {} if fit is None else {"num_fit": fit.num_fit, "num_held_out": fit.num_held_out,
                                     "held_out": fit.held_out, "seed": seed}
    params = CostParams.defaults(load_gpu(gpu), tp) if fit is None else fit.params
    by_tp = {} if fit is None else fit.allreduce_by_tp
    host = None
    if preset is not None:
        host = fit_host_steps(rows, model, gpu, preset, None if fit is None else fit.params, by_tp)
        report["host"] = host.report | {"file": str(measured), "warnings": list(host.warnings)}
    _write(output, model, gpu, tp, params, by_tp, report, host)
    if fit is not None:
        table = _table(f"held-out error ({fit.num_fit} rows fitted, {fit.num_held_out} held out)")
        for col in ("operators", "rows", "MAPE", "worst"):
            table.add_column(col, justify="left" if col == "operators" else "right")
        for group, e in fit.held_out.items():
            table.add_row(group, str(e["rows"]), f"{e['mape']:.1f} %", f"{e['worst']:.0f} %")
        _console().print(table)
        for group, e in fit.held_out.items():
            if e["mape"] >= POOR_FIT_MAPE:
                print(f"servesim: warning: held-out error {e['mape']:.0f} % on {group}: the profile predicts them "
                      "poorly (check the measurements' units, --model, --gpu and --tp)", file=sys.stderr)
        p = fit.params
        print(f"compute_efficiency {p.compute_efficiency:.3f}, memory_efficiency {p.memory_efficiency:.3f}, "
              f"kernel_latency {p.kernel_latency * 1e6:.1f} us"
              + ("" if host else f", step_overhead {p.step_overhead * 1e3:.2f} ms"))
    else:
        print(f"GPU part: {load_gpu(gpu).name}'s constants (no operator rows to fit)")
    _print_host(host)
    print(f"wrote {output} (use: --cost {output})")


def _calibrate_serve(measured: Path, model: str, gpu: str, tp: int, output: Path, seed: int, engine: str | None,
                     flags: dict, replay: dict) -> None:
    from servesim.cost.calibrate_serve import fit_host_serve, from_aiperf, read_vllm_result
    from servesim.cost.host import get_engine
    from servesim.cost.roofline import CostParams
    from servesim.cost.specs import load_gpu
    from servesim.engines.config import EngineConfig

    if measured.suffix == ".json":
        result = read_vllm_result(measured, replay["--request-rate"], replay["--burstiness"])
    else:  # AIPerf's per-request export: its sends recorded
        given = [k for k in ("--request-rate", "--burstiness") if replay[k] is not None]
        if given:
            raise ConfigError(f"{given[0]}: AIPerf's export records each request's send; drop it")
        result = from_aiperf(measured)
    preset = get_engine(engine, **{k: v for k, v in flags.items() if v is not None})
    config = EngineConfig(max_num_seqs=replay["--max-num-seqs"],
                          max_num_batched_tokens=replay["--max-num-batched-tokens"])
    params = CostParams.defaults(load_gpu(gpu), tp)
    host = fit_host_serve(result, model, gpu, tp, preset, config, params, seed)
    report = {"host": host.report | {"file": str(measured), "warnings": list(host.warnings)}}
    _write(output, model, gpu, tp, params, {}, report, host)
    r = host.report
    print(f"{r['requests']} requests simulated ({r['compared']}), {r['simulations']} runs: TTFT error "
          f"{_pct(r['ttft_mape'])}, ITL error {_pct(r['itl_mape'])}; GPU part: {load_gpu(gpu).name}'s constants")
    _print_host(host)
    print(f"wrote {output} (use: --cost {output})")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def _write(output: Path, model: str, gpu: str, tp: int, params, by_tp: dict, report: dict, host) -> None:
    from servesim.cost.profile import profile_dict, save_profile
    from servesim.cost.specs import load_gpu

    name = load_model(model).name if Path(model).suffix != ".json" else model
    save_profile(output, profile_dict(name, load_gpu(gpu).name, tp, params, by_tp, report,
                                      None if host is None else host.engine))


def _print_host(host) -> None:
    if host is None:
        return
    e, r = host.engine, host.report
    where = f"{r['rows_used']} of {r['rows']} step rows, in-sample MAPE {r['mape']:.1f} %, worst " \
            f"{r['worst']:.0f} %" if r["source"] == "steps" else "the vLLM result"
    print(f"host ({e.name}, {'max(host, device)' if e.async_scheduling else 'host + device'}): step_host "
          f"{e.step_host * 1e3:.3f} ms, seq_host {e.seq_host * 1e3:.4f} ms, tp_host {e.tp_host * 1e3:.3f} ms; "
          f"fitted {', '.join(host.fitted)} from {where}")
    for w in host.warnings:
        print(f"warning: {w}")
