"""Capacity planning: `servesim sweep` (a row per point of a cartesian product) and `servesim capacity` (the
highest request rate that meets the SLOs). The work is `servesim.plan`'s; this module reads options and prints."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each
# start, and would eval each string (~0.01 s in all).

import io
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from servesim.analysis.words import number, plural
from servesim.cli.app import app
from servesim.cli.options import SimOptions, policy_names, simulating
from servesim.cli.term import LazyConsole
from servesim.errors import ConfigError

console = LazyConsole(highlight=False, soft_wrap=True)

# The simulating options that are lists here (the axes); same flags as `servesim run`'s single values.
_LISTS = {
    "request_rate": Annotated[str | None, typer.Option("--request-rate", help="Requests/s to sweep, e.g. 1,2,4,8 "
                                                       "(vllm bench serve's arrivals at the seed).")],
    "rate_scale": Annotated[str | None, typer.Option("--rate-scale", help="A trace's rate multipliers to sweep, "
                                                     "e.g. 0.5,1,2.")],
    "model": Annotated[str | None, typer.Option("--model", help="Roofline models to sweep, e.g. "
                                                "llama-3-8b,qwen2.5-7b.")],
    "gpu": Annotated[str | None, typer.Option("--gpu", help="GPUs to sweep, e.g. h100,a100.")],
    "tp": Annotated[str | None, typer.Option("--tensor-parallel-size", "-tp", "--tp",
                                             help="Tensor-parallel sizes to sweep, e.g. 1,2.")],
    "num_replicas": Annotated[str | None, typer.Option("--num-replicas", help="Data-parallel replica counts to "
                                                       "sweep behind --router, e.g. 1,2,4,8 (layouts 1, 2, ...).")],
    "prefill_replicas": Annotated[str | None, typer.Option("--prefill-replicas", help="P/D: prefill replica "
                                                           "counts; with --decode-replicas each pair is a layout "
                                                           "xPyD, e.g. 1P3D.")],
    "decode_replicas": Annotated[str | None, typer.Option("--decode-replicas", help="P/D: decode replica "
                                                          "counts.")],
    "router": Annotated[str | None, typer.Option("--router", help="Routers to sweep, e.g. "
                                                 "round-robin,least-loaded (servesim routers).")],
}
_CLUSTER = ("num_replicas", "prefill_replicas", "decode_replicas", "router")


def sweeping(command):
    """`@simulating` with the axes' options taking comma-separated lists (the command splits them)."""
    wrapped = simulating(command)
    sig = wrapped.__signature__
    params = [p.replace(annotation=_LISTS[p.name]) if p.name in _LISTS else p for p in sig.parameters.values()]
    wrapped.__signature__ = sig.replace(parameters=params)
    wrapped.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
    return wrapped


def split(opts: SimOptions, policies: str, sets: list[str] | None) -> tuple[SimOptions, Any]:
    """The base options (the axes' fields emptied) and the axes. The layouts: each --num-replicas, then each
    --prefill-replicas x --decode-replicas pair."""
    from servesim.plan.layouts import layouts_from
    from servesim.plan.points import axes_from, parse_list

    counts = [parse_list(getattr(opts, f), f"--{f.replace('_', '-')}", int) for f in _CLUSTER[:3]]
    axes = axes_from(policies, opts.model, opts.gpu, opts.tp, opts.request_rate, opts.rate_scale, sets,
                     layouts_from(*counts), opts.router, opts.seed)
    base = replace(opts, request_rate=None, rate_scale=None, model=None, gpu=None, tp=None,
                   **dict.fromkeys(_CLUSTER))
    return base, axes


def preflight(base: SimOptions, first: Any, rates: str | None = None) -> None:
    """Load the first point's workload here: a mistake is one line before anything starts, and what loading
    changed is printed once, not once per point. `rates`: what sets each point's arrivals (the swept rates, the
    rates capacity tries), said instead of the first point's rate."""
    import contextlib
    import io
    import re

    from servesim.plan.sweep import point_options

    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        point_options(base, first).requests()
    text = said.getvalue()
    if rates is not None:
        text = re.sub(r"--request-rate [^,]+,", f"{rates},", text)
    sys.stderr.write(text)


Policies = Annotated[str, typer.Option("--policies", help=f"Policies to sweep: {policy_names()}, "
                                                          "comma-separated.")]
Sets = Annotated[list[str] | None, typer.Option("--set", help="An EngineConfig knob's values, e.g. "
                                                "max_num_seqs=64,256 (SGLang's: sglang.max_running_requests="
                                                "256,1024); repeat for several knobs.")]
Goodput = Annotated[list[str] | None, typer.Option("--goodput", help="SLOs in ms, vLLM's syntax: "
                                                   "--goodput 'ttft:500 tpot:50'.")]
Executor = Annotated[str, typer.Option("--executor", help="local (a process pool) | ray.")]
Workers = Annotated[int | None, typer.Option("--workers", help="Processes (local) or CPUs of a local Ray "
                                             "cluster. Default: this machine's cores.")]
RayAddress = Annotated[str | None, typer.Option("--ray-address", help="A Ray cluster to run on (auto: the one "
                                                "this machine belongs to). Default: a local cluster.")]
JsonOut = Annotated[Path | None, typer.Option("--json", help="Write the result as JSON here.")]


@app.command("sweep")
@sweeping
def sweep_cmd(
    opts: SimOptions,
    policies: Policies = "vllm",
    sets: Sets = None,
    goodput: Goodput = None,
    percentiles: Annotated[str, typer.Option("--metric-percentiles", "--percentiles",
                                             help="Percentiles in every row (99 is always there).")] = "50,90,99",
    gpu_cost: Annotated[list[str] | None, typer.Option("--gpu-cost", help="$/GPU-hour, e.g. h100=4.0,a100=1.8 "
                                                       "(default table: docs/planning.md).")] = None,
    executor: Executor = "local",
    workers: Workers = None,
    ray_address: RayAddress = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the rows: .parquet, .csv or "
                                                ".json.")] = None,
    json_path: JsonOut = None,
    checkpoint: Annotated[Path | None, typer.Option("--checkpoint", help="Append each finished row here (JSON "
                                                    "lines). Default: OUTPUT.partial.jsonl with --output/--json; "
                                                    "removed when the sweep completes.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Keep the checkpoint's rows and run only the points "
                                         "it lacks.")] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write one offline HTML page: tail latency "
                                                "against throughput per GPU, the Pareto front marked.")] = None,
) -> None:
    """Every point of the product of --set knobs, --request-rate (or --rate-scale), --policies, --model/--gpu/
    --tp lists and cluster layouts (--num-replicas, --prefill-replicas x --decode-replicas, --router lists):
    vllm bench serve's metrics, goodput and SLO attainment, OVERLOADED, $ per million output tokens, and the
    Pareto front (TTFT p99, TPOT p99, output throughput per GPU, GPUs = replicas x TP) marked."""
    from servesim.analysis.benchmark import parse_goodput, parse_percentiles
    from servesim.output import check_output_file, is_stdout
    from servesim.plan.api import run_sweep
    from servesim.plan.executors import make_executor
    from servesim.plan.points import product
    from servesim.plan.prices import parse_gpu_cost
    from servesim.plan.sweep import Measure

    if output is not None and not is_stdout(output) and output.suffix not in (".parquet", ".csv", ".json"):
        raise ConfigError(f"--output {output}: expected a .parquet, .csv or .json file (or - for CSV on stdout)")
    if report is not None:
        from servesim.report.figures import require_plotly

        if report.suffix.lower() not in (".html", ".htm"):
            raise ConfigError(f"--report {report}: expected an .html file")
        check_output_file(report, "--report")
        require_plotly()
    outs = [check_output_file(p, o) for p, o in ((output, "--output"), (json_path, "--json")) if p is not None]
    how = Measure(parse_goodput(goodput or []), parse_percentiles(percentiles), parse_gpu_cost(gpu_cost))
    base, axes = split(opts, policies, sets)
    points = product(axes)
    if len(points) > MAX_POINTS:
        raise ConfigError(f"{len(points):,} points: a sweep takes at most {MAX_POINTS:,}; narrow an axis or split the "
                          "sweep (--resume joins the parts)")
    ex = make_executor(executor, workers, ray_address)
    if len(points) > LONG_SWEEP:
        print(f"servesim: note: {len(points):,} points on {getattr(ex, 'workers', None) or 'the'} workers; the bar "
              "shows the time left once the first points are done (interrupt keeps them: --resume)", file=sys.stderr)
    checkpoint = _checkpoint(checkpoint, outs)
    rates = f"each point's --request-rate ({', '.join(f'{r:g}' for r in axes.request_rates)})"
    preflight(base, points[0], rates if len(axes.request_rates) > 1 else None)
    t0, finished = time.monotonic(), []
    with PointsProgress(len(points)) as bar:
        try:
            rows = run_sweep(base, axes, how, ex, str(checkpoint) if checkpoint else None, resume,
                             lambda p, r: (finished.append(r), bar.advance()))
        except KeyboardInterrupt:
            kept = f"kept in {checkpoint}; run again with --resume" if checkpoint else "lost (no --checkpoint)"
            print(f"servesim: interrupted: {len(finished)} of {len(points)} points finished, {kept}", file=sys.stderr)
            raise typer.Exit(130) from None
    print_sweep(rows, axes, opts.workload, time.monotonic() - t0)
    write_rows(rows, output, json_path, axes, how)
    if report is not None:
        from servesim.report.pareto import write_sweep_report

        size = write_sweep_report(report, rows, axes.swept(), f"servesim sweep: {opts.workload}")
        print(f"wrote {report} ({size / 2**20:.1f} MiB)")
    if checkpoint is not None and outs:
        checkpoint.unlink(missing_ok=True)


def _checkpoint(checkpoint: Path | None, outs: list[Path]) -> Path | None:
    """The file finished rows go to as they come (given, or beside the first output file), checked writable."""
    from servesim.output import check_output_file, is_stdout

    files = [o for o in outs if not is_stdout(o)]
    if checkpoint is None and files:
        checkpoint = files[0].with_name(files[0].name + ".partial.jsonl")
    if checkpoint is not None:
        if is_stdout(checkpoint):
            raise ConfigError("--checkpoint -: the checkpoint is a file the sweep reads back (--resume); give a path")
        check_output_file(checkpoint, "--checkpoint")
    return checkpoint


def write_rows(rows: list[dict], output: Path | None, json_path: Path | None, axes: Any, how: Any) -> None:
    from servesim.export.json_records import write_json

    doc = {"axes": axes.swept(), "goodput": how.goodput, "gpu_cost": how.gpu_cost, "rows": rows}
    if json_path is not None:
        write_json(json_path, doc, "--json")
        print(f"wrote {json_path}")
    if output is not None:
        if output.suffix == ".json":
            write_json(output, doc, "--output")
        else:
            import polars as pl

            from servesim.output import write_output

            df, buf = pl.DataFrame(rows, infer_schema_length=None), io.BytesIO()
            df.write_parquet(buf) if output.suffix == ".parquet" else df.write_csv(buf)
            write_output(output, buf.getvalue(), "--output")
        print(f"wrote {output}")


SHORT = {"request_rate": "rate", "rate_scale": "scale", "max_num_seqs": "seqs", "max_num_batched_tokens": "budget",
         "layout": "replicas"}


def _f(v: Any, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def print_sweep(rows: list[dict], axes: Any, workload: str, wall_s: float) -> None:
    from rich.table import Table

    cols = axes.swept() or ["policy"]
    t = Table(title=f"{workload}: {len(rows)} points; ms; * the Pareto front (TTFT p99, TPOT p99, tok/s/GPU)",
              title_justify="left")
    for c in cols:  # (fold, never cut: a narrow terminal wraps a number rather than end it in an ellipsis)
        t.add_column(SHORT.get(c, c), overflow="fold")
    spec = any("speculation_speedup" in r for r in rows)  # (a speculating engine's rows: `plan.sweep`)
    for head in ("req/s", "tok/s/GPU", "TTFT p99", "TPOT p99", *(["spec x"] if spec else []), "SLO %", "$/Mtok",
                 "over", "*"):
        t.add_column(head, justify="right", overflow="fold")
    for r in rows:
        key = [str(r.get(c if c in r else f"engine_{c}")) for c in cols]
        t.add_row(*key, _f(r["request_throughput"]), _f(r["output_throughput_per_gpu"], ".1f"),
                  _f(r["p99_ttft_ms"], ".1f"), _f(r["p99_tpot_ms"], ".2f"),
                  *([_f(r.get("speculation_speedup"))] if spec else []), _f(r["slo_attainment"], ".1f"),
                  _f(r["cost_per_million_output_tokens"], ".3f"), "YES" if r["overloaded"] else "",
                  "*" if r["pareto"] else "")
    console.print(t)
    if spec:
        from servesim.plan.sweep import speculation_lines

        console.print("spec x: mean TPOT without speculative decoding / with it, the same point run again without it")
        for line in speculation_lines(rows, axes.swept()):
            console.print(line)
    print(f"servesim: note: {plural(len(rows), 'point')} in {wall_s:.1f} s wall time", file=sys.stderr)


MAX_POINTS = 100_000  # points one sweep may have (the table and checkpoint are held whole)
LONG_SWEEP = 100  # past this many points, the work is said before it starts


class PointsProgress:
    """A rich progress bar over points on standard error, shown once a sweep has run ~2 s (as `SimProgress`)."""

    def __init__(self, total: int, label: str = "points") -> None:
        self.total, self.label, self.done = total, label, 0
        self._t0, self._bar, self._task = time.monotonic(), None, None

    def advance(self) -> None:
        self.done += 1
        if self._bar is None:
            from servesim.cli.progress import SHOW_AFTER_S

            if time.monotonic() - self._t0 < SHOW_AFTER_S or self.done >= self.total:
                return
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("left"), TimeRemainingColumn(), console=Console(stderr=True),
                                 transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total)
        self._bar.update(self._task, completed=self.done)

    def __enter__(self) -> "PointsProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


@app.command("capacity")
@sweeping
def capacity_cmd(
    opts: SimOptions,
    goodput: Goodput = None,
    attainment: Annotated[float, typer.Option("--attainment", help="Percent of requests that must meet every "
                                              "SLO.")] = 99.0,
    rate_tolerance: Annotated[float, typer.Option("--rate-tolerance", help="Stop when the failing rate is within "
                                                  "this fraction of the passing one.")] = 0.01,
    start_rate: Annotated[float, typer.Option("--start-rate", help="First rate tried (req/s).")] = 1.0,
    max_rate: Annotated[float, typer.Option("--max-rate", help="Highest rate tried (req/s).")] = 10_000.0,
    target_rate: Annotated[float | None, typer.Option("--target-rate", help="Also answer: the fewest GPUs "
                                                      "(replicas x TP) and the configuration serving this many "
                                                      "req/s at the SLO, by simulating replicas behind "
                                                      "--router at this rate.")] = None,
    policies: Policies = "vllm",
    sets: Sets = None,
    executor: Executor = "local",
    workers: Workers = None,
    ray_address: RayAddress = None,
    json_path: JsonOut = None,
) -> None:
    """The highest request rate at which at least --attainment % of requests meet the --goodput SLOs, for each
    configuration (--set, --policies, --model/--gpu/--tp lists): bracketing and bisection over vllm bench
    serve's arrivals (Poisson at --seed); the limit that binds at capacity, from the step records. Layouts
    (--num-replicas, --prefill-replicas x --decode-replicas lists) are simulated as clusters; --target-rate R
    simulates replicas behind each --router at R, from the even-split estimate, for the fewest GPUs."""
    from servesim.analysis.benchmark import parse_goodput
    from servesim.output import check_output_file
    from servesim.plan.api import check_no_rate, run_capacity
    from servesim.plan.capacity import Search
    from servesim.plan.executors import make_executor
    from servesim.plan.points import product
    from servesim.plan.sweep import Measure

    if json_path is not None:
        check_output_file(json_path, "--json")
    slos = parse_goodput(goodput or [])
    search = Search(slos, attainment, rate_tolerance, start_rate, max_rate)
    base, axes = split(opts, policies, sets)
    check_no_rate(base, axes)
    if target_rate is not None:
        from servesim.plan.api import check_target

        check_target(axes, target_rate)  # before the search, not after
    ex = make_executor(executor, workers, ray_address)
    points = product(axes)
    preflight(replace(base, request_rate=start_rate), points[0], f"the rates capacity tries (from --start-rate "
              f"{start_rate:g}, Poisson at --seed {base.seed})" if base.burstiness == 1 else "the rates capacity tries")
    t0 = time.monotonic()
    with PointsProgress(len(points), "configurations") as bar:
        found = run_capacity(base, axes, search, Measure(slos), ex, target_rate, lambda p, c: bar.advance())
    print_capacity(found, axes, opts.workload, time.monotonic() - t0)
    if json_path is not None:
        from servesim.export.json_records import write_json

        write_json(json_path, found.to_json(), "--json")
        print(f"wrote {json_path}")


def print_capacity(found: Any, axes: Any, workload: str, wall_s: float) -> None:
    from rich.table import Table

    s = found.search
    cols = [c for c in axes.swept() if c not in ("request_rate", "rate_scale")] or ["policy"]
    slo = " ".join(f"{k}:{v:g}" for k, v in s.goodput.items())
    t = Table(title=f"{workload}: capacity at {s.attainment:g} % of requests within {slo} ms "
                    f"(rate tolerance {s.tolerance:g})", title_justify="left")
    for c in cols:
        t.add_column(SHORT.get(c, c), overflow="fold")
    for head in ("max req/s", "fails at", "GPUs", "req/s per GPU", "rates tried", "binding at capacity"):
        t.add_column(head, justify="right", overflow="fold")
    for c in found.configs:
        key = [str(c.get(k if k in c else f"engine_{k}")) for k in cols]
        top = c["binding"]
        binding = "-" if top is None else f"{top} ({c['bound_steps'][top]:.0f} % of steps)"
        fails = "-" if c["failing_rate"] is None else f"{c['failing_rate']:.4g}"
        if not c["bracketed"] and c["max_request_rate"] > 0:
            fails = f"> {s.max_rate:g} (not reached)"
        t.add_row(*key, f"{c['max_request_rate']:.4g}", fails, str(c["num_gpus"]),
                  f"{c['max_request_rate'] / c['num_gpus']:.4g}", str(len(c["points"])), binding)
    console.print(t)
    for c in found.configs:
        if c["max_request_rate"] == 0:
            console.print(f"{c['policy']}: even {s.min_rate:g} req/s misses the SLO for more than "
                          f"{100 - s.attainment:g} % of requests")
    print_target(found, cols)
    print(f"servesim: note: {plural(len(found.configs), 'configuration')} in {wall_s:.1f} s wall time",
          file=sys.stderr)


def print_target(found: Any, cols: list[str]) -> None:
    """--target-rate: the simulated answer, and the even-split estimate it started from."""
    if found.target_rate is None:
        return
    est = found.target_estimate
    if found.target is None:
        why = ("no configuration serves any rate at the SLO" if est is None
               else "no replica count behind the router meets the SLO (simulated)")
        console.print(f"{found.target_rate:g} req/s at the SLO: {why}")
        return
    tg, c = found.target, found.configs[found.target["index"]]
    key = ", ".join(f"{k} {c.get(k if k in c else f'engine_{k}')}" for k in [k for k in cols if k != "router"]
                    or ["policy"])
    console.print(f"{tg['target_rate']:g} req/s at the SLO: {plural(tg['num_gpus'], 'GPU')} = "
                  f"{plural(tg['replicas'], 'replica')} "
                  f"x TP {c['tp'] or 1} of {key} behind {tg['router']} (simulated at {tg['target_rate']:g} req/s; "
                  f"{plural(len(c['target']['tried']), 'replica count')} tried)")
    console.print(f"even-split estimate: {plural(est['num_gpus'], 'GPU')} = {plural(est['replicas'], 'replica')} of "
                  f"{number(est['max_request_rate'])} req/s each (ceil(R / capacity), not simulated)")
