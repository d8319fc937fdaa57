"""`servesim workload stats|generate|list`, and the workload options every simulating command shares.

Commands that simulate take the same options; declare them with the `*Opt` aliases below and pass the values to
`workload_from_options` (or `table_from_options` for the columnar table).
"""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each
# start, and would eval each string (~0.01 s in all).

import json
import math
import sys
from pathlib import Path
from typing import Annotated

import typer

from servesim.cli.app import app
from servesim.engine.request import Request
from servesim.errors import WorkloadError
from servesim.output import check_output_file
from servesim.workloads.builtin import BUILTIN_WORKLOADS
from servesim.workloads.formats import ALIASES, FORMATS
from servesim.workloads.resolve import make_table
from servesim.workloads.stats import format_stats, plot_workload, workload_stats
from servesim.workloads.synthetic import LENGTH_SYNTAX, RampUp
from servesim.workloads.table import RequestTable

workload_app = typer.Typer(help="Inspect, transform and generate workloads.", no_args_is_help=True)
app.add_typer(workload_app, name="workload")

WorkloadOpt = Annotated[
    str, typer.Option("--workload", "-w", help="A built-in name, a trace file, 'random' (synthetic lengths) or, "
                      "to simulate, 'multi-turn' (generated conversations).")
]
FormatOpt = Annotated[
    str | None,
    typer.Option(
        help="azure, burstgpt, mooncake, vidur, lengths, servesim; or csv/jsonl/parquet with --columns. "
        "Default: detected from the header."
    ),
]
ColumnsOpt = Annotated[
    str | None, typer.Option(help="Generic files: arrival=COL,prompt=COL,output=COL[,priority=,session=,hash_ids=,id=]")
]
TimeUnitOpt = Annotated[str | None, typer.Option(help="Unit of the --columns arrival column: s, ms, us, ns, datetime.")]
RequestRateOpt = Annotated[
    float | None, typer.Option(help="Requests/s, as vllm bench serve (inf: all at once). Replaces a file's arrivals.")
]
BurstinessOpt = Annotated[float, typer.Option(help="Gamma shape of the gaps: 1 Poisson, <1 burstier, inf fixed.")]
NumRequestsOpt = Annotated[int | None, typer.Option(help="'random': how many (default 1000); a trace: sample N.")]
PromptLenOpt = Annotated[str | None, typer.Option(help=f"'random' prompt lengths: {LENGTH_SYNTAX} (default 1024).")]
OutputLenOpt = Annotated[str | None, typer.Option(help="'random' output lengths, same syntax (default 128).")]
WindowOpt = Annotated[str | None, typer.Option(help="START:END seconds of the trace to keep (END may be empty).")]
RateScaleOpt = Annotated[float | None, typer.Option(help="Multiply the arrival rate (2: twice as fast).")]
MaxModelLenOpt = Annotated[int | None, typer.Option(help="Cap prompt + output at this many tokens (count reported).")]
SeedOpt = Annotated[int, typer.Option(help="Seed for sampling and synthetic arrivals/lengths.")]
TraceModelOpt = Annotated[str | None, typer.Option(help="BurstGPT: keep rows whose Model is this (e.g. ChatGPT).")]
LogTypeOpt = Annotated[str | None, typer.Option(help="BurstGPT: keep rows whose Log Type is this.")]
KeepFailedOpt = Annotated[bool, typer.Option(help="BurstGPT: keep failed requests (0 response tokens): an error.")]


def table_from_options(
    workload: str,
    format: str | None = None,
    columns: str | None = None,
    time_unit: str | None = None,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    num_requests: int | None = None,
    prompt_len: str | None = None,
    output_len: str | None = None,
    window: str | None = None,
    rate_scale: float | None = None,
    max_model_len: int | None = None,
    seed: int = 0,
    trace_model: str | None = None,
    log_type: str | None = None,
    keep_failed: bool = False,
    ramp_up: RampUp | None = None,
) -> RequestTable:
    """The common workload options to a request table; what loading changed is printed as warnings on stderr."""
    table = make_table(
        workload,
        format=format,
        columns=columns,
        time_unit=time_unit,
        request_rate=request_rate,
        burstiness=burstiness,
        num_requests=num_requests,
        prompt_len=prompt_len,
        output_len=output_len,
        window=parse_window(window) if window else None,
        rate_scale=rate_scale,
        max_model_len=max_model_len,
        seed=seed,
        trace_model=trace_model,
        log_type=log_type,
        keep_failed=keep_failed,
        ramp_up=ramp_up,
    )
    for note in table.notes:
        print(f"servesim: warning: {workload}: {note}", file=sys.stderr)
    return table


def workload_from_options(
    workload: str,
    format: str | None = None,
    columns: str | None = None,
    time_unit: str | None = None,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    num_requests: int | None = None,
    prompt_len: str | None = None,
    output_len: str | None = None,
    window: str | None = None,
    rate_scale: float | None = None,
    max_model_len: int | None = None,
    seed: int = 0,
    trace_model: str | None = None,
    log_type: str | None = None,
    keep_failed: bool = False,
    ramp_up: RampUp | None = None,
) -> list[Request]:
    """`table_from_options(...).to_requests()`: requests sorted by arrival, for the engine."""
    return table_from_options(**locals()).to_requests()


# The options above that `workload_from_options` takes, as a simulating command's parameters are named. Those
# commands declare `--max-model-len` themselves: it caps the workload (count reported) and sets the engine's limit.
LOADER_OPTIONS = (
    "format", "columns", "time_unit", "request_rate", "burstiness", "num_requests", "prompt_len", "output_len",
    "window", "rate_scale", "max_model_len", "seed", "trace_model", "log_type", "keep_failed",
)


def loader_options(params: dict[str, object]) -> dict[str, object]:
    """The workload options among a command's parameters (`loader_options(locals())`), for `workload_from_options`."""
    return {k: v for k, v in params.items() if k in LOADER_OPTIONS}


def parse_window(text: str) -> tuple[float, float]:
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return float(start or 0), float(end) if end.strip() else math.inf
    except ValueError:
        raise WorkloadError(f"--window: got {text!r}; expected START:END in seconds, e.g. 600:1200 or 600:") from None


@workload_app.command("stats")
def stats_cmd(
    file: Annotated[str, typer.Argument(help="A trace file or built-in workload name.")],
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
    max_model_len: MaxModelLenOpt = None,
    seed: SeedOpt = 0,
    trace_model: TraceModelOpt = None,
    log_type: LogTypeOpt = None,
    keep_failed: KeepFailedOpt = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the statistics as JSON on stdout.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write histograms and arrivals over time to this image.")] = None,
) -> None:
    """Count, duration, rate, burstiness and length percentiles of a workload."""
    opts = {k: v for k, v in locals().items() if k not in ("file", "json_out", "plot")}
    if plot is not None:
        check_output_file(plot, "--plot")
    table = table_from_options(file, **opts)
    stats = workload_stats(table)
    print(json.dumps(stats, indent=2) if json_out else format_stats(stats, file))
    if plot is not None:
        plot_workload(table, plot, title=file)


@workload_app.command("generate")
def generate_cmd(
    out: Annotated[Path, typer.Argument(help="CSV to write (servesim format: arrival_time,prompt_len,output_len); "
                                                   "- for stdout.")],
    workload: WorkloadOpt = "random",
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
    max_model_len: MaxModelLenOpt = None,
    seed: SeedOpt = 0,
    trace_model: TraceModelOpt = None,
    log_type: LogTypeOpt = None,
    keep_failed: KeepFailedOpt = False,
) -> None:
    """Write a workload (synthetic, or a trace after transforms) as a servesim CSV any command can load."""
    opts = {k: v for k, v in locals().items() if k != "out"}
    check_output_file(out, "output")
    table = table_from_options(**opts)
    table.write_csv(out)
    print(f"wrote {len(table):,} requests to {out}", file=sys.stderr)


@workload_app.command("list")
def list_cmd() -> None:
    """Built-in workloads and the trace formats servesim reads."""
    print("built-in workloads: " + ", ".join(BUILTIN_WORKLOADS) + ", random (synthetic lengths)")
    print("formats (--format):")
    for f in FORMATS.values():
        cols = ", ".join(f.required)
        print(f"  {f.name:<10} {cols:<55} {f.description}")
    print("  aliases: " + ", ".join(f"{a} = {b}" for a, b in ALIASES.items()))
    print("  csv, jsonl, parquet: any file, with --columns arrival=COL,prompt=COL,output=COL and --time-unit")
