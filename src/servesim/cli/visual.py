"""Commands that draw a run: `export perfetto` (a Chrome trace) and `report` (one offline HTML file)."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each
# start, and would eval each string (~0.01 s in all).

from pathlib import Path
from typing import Annotated

import typer

from servesim.cli.analysis import note, rejected_note
from servesim.cli.app import app
from servesim.cli.options import Policy, SimOptions, simulating
from servesim.cli.progress import SimProgress
from servesim.engine import simulate
from servesim.errors import ConfigError
from servesim.output import check_output_dir, check_output_file

export_app = typer.Typer(help="Write a run in another tool's format.", no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("perfetto")
@simulating
def perfetto_cmd(
    opts: SimOptions,
    policy: Policy = "vllm",
    output: Annotated[Path, typer.Option("--output", "-o", help="The trace file (JSON).")] = Path("trace.json"),
    max_events: Annotated[int, typer.Option(
        "--max-events", help="Cap on trace events (~100 bytes each): past it consecutive steps are merged into one "
                             "slice and every k-th request is kept. 0 = no cap.")] = 50_000,
) -> None:
    """The run as a Chrome trace for ui.perfetto.dev or chrome://tracing: a track per request (queued, prompt
    chunks, decode runs, preempted, swapped), a track of the engine's steps with each batch, and counters for KV
    blocks, running and waiting requests and scheduled tokens against the budget. Microseconds of simulated time."""
    from servesim.export.perfetto import write_perfetto

    if max_events < 0 or 0 < max_events < 100:
        raise ConfigError(f"--max-events {max_events}: expected 0 (no cap) or a count >= 100")
    check_output_file(output, "--output")
    cfg, cm = opts.engine_config(policy), opts.cost_model(policy)
    reqs = opts.requests()
    if opts.is_cluster():  # a process per replica
        result = opts.simulate_cluster(reqs, cfg, policy, cm, "full")
        rejected_note(result.cluster)
    else:
        with SimProgress() as progress:
            result = simulate(reqs, cfg, policy, cm, record="full", progress=progress)
        rejected_note(result)
    note(opts.lesson_note(policy))
    summary = write_perfetto(output, result, max_events or None)
    note(summary.note())
    print(f"wrote {output} ({summary.events:,} events; open it in ui.perfetto.dev)")


@app.command()
@simulating
def report(
    opts: SimOptions,
    policies: Annotated[str | None, typer.Option(
        "--policies", help="Policies side by side, e.g. static,continuous,vllm.")] = None,
    set_: Annotated[str | None, typer.Option(
        "--set", help="One knob, several values side by side, e.g. max_num_batched_tokens=256,512,2048.")] = None,
    policy: Policy = "vllm",
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file.")] = Path("report.html"),
    png: Annotated[Path | None, typer.Option(
        "--png", help="Also write the figures as PNGs into this folder (matplotlib).")] = None,
) -> None:
    """One self-contained HTML file (plotly inlined, no network; opens from disk): per run a request Gantt, tokens
    per step against the budget, KV blocks and queues on one time axis, with a step scrubber; then latency CDFs,
    the summary table side by side and the explanations. Large runs are aggregated, and the page says how."""
    from servesim.report.figures import require_plotly
    from servesim.report.html import write_report
    from servesim.report.runs import report_runs
    from servesim.report.view import run_view
    from servesim.version import __version__

    require_plotly()
    if policies is not None and policy != "vllm":
        raise ConfigError(f"--policy {policy} and --policies {policies}: --policy names the one run's policy (or "
                          "--set's); with --policies name every policy there")
    check_output_file(output, "--output")
    if png is not None:
        from servesim.report.png import require_matplotlib

        check_output_dir(png, "--png")
        require_matplotlib()
    cfg, cm = opts.engine_config(policy), opts.cost_model(policy)
    reqs = opts.requests()
    if opts.is_cluster():  # a section per replica, on the cluster's one time axis
        if policies is not None or set_ is not None:
            raise ConfigError("--policies/--set lay several runs side by side; a cluster's report lays its replicas "
                              "side by side: give one or the other")
        c = opts.simulate_cluster(reqs, cfg, policy, cm, "full")
        notes = [f"a cluster of {len(c.replicas)} replicas behind the {c.router} router: one section per replica"]
        results, plains = list(zip(c.names, c.replicas)), {}
        rejected_note(c.cluster)
    else:
        with SimProgress() as progress:
            runs, notes = report_runs(reqs, cfg, cm, policy, policies, set_, progress)
        results = [(r.label, r.result) for r in runs]
        rejected_note(max((r.result for r in runs), key=lambda r: len(r.rejected)))
        from servesim.analysis.speculation import plain_run

        plains = {r.label: plain_run(r.result, reqs, cm) for r in runs}  # explain's twin: what speculation changed
    note(opts.lesson_note(policy))
    for n in notes:
        note(n)
    views = [run_view(label, r, plain=plains.get(label)) for label, r in results]
    meta = (f"servesim {__version__} · workload {opts.workload} ({len(reqs):,} requests) · {cm.name} cost · "
            f"simulated time; built offline")
    size = write_report(output, views, f"servesim report: {opts.workload}", meta, notes)
    if png is not None:
        from servesim.report.png import write_pngs

        png.mkdir(exist_ok=True)
        for path in write_pngs(png, views):
            print(f"wrote {path}")
    print(f"wrote {output} ({size / 2**20:.1f} MiB)")
