"""`servesim validate SOURCE`: servesim scored against measured deployments (docs/accuracy.md)."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each start.

from pathlib import Path
from typing import Annotated

import typer

from servesim.cli.app import app
from servesim.cli.plan import Executor, RayAddress, Workers
from servesim.cli.term import LazyConsole
from servesim.errors import ConfigError

console = LazyConsole()
MAX_LISTED = 20  # rows out of reach listed one by one; past that, counted by reason


@app.command("validate")
def validate_cmd(
    sources: Annotated[list[str], typer.Argument(
        metavar="SOURCE...", help="Your measurements: a CSV in docs/accuracy.md's format, vllm bench serve "
        "--save-result files, AIPerf exports (profile_export.jsonl or its artifacts folder), folders of them; or "
        "aic-silicon: AIConfigurator's measured points (servesim[aic]).")],
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the scores, every row and the rows out of "
                                                                  "reach here.")] = None,
    start: Annotated[str | None, typer.Option("--start", help="aic-silicon, every row under vllm-bench: how a "
                                              "closed loop's users start: staggered (a desynchronised stream) | "
                                              "together (identical requests in waves).")] = None,
    client: Annotated[str | None, typer.Option("--client", help="aic-silicon: one client for every row instead of "
                                               "the one its source names (the default: InferenceX's rows "
                                               "inferencex, AIConfigurator's gap analysis aiperf): vllm-bench | "
                                               "aiperf (AIConfigurator's own benchmark script: 2C warm-up, 20C "
                                               "measured, users together) | inferencex (InferenceX's "
                                               "benchmark_serving.py: lengths in [0.8 L, L], 10C prompts).")] =
    None,
    mode: Annotated[str | None, typer.Option("--mode", help="aic-silicon: only its rows of this mode, agg | disagg "
                                             "(P/D deployments); all by default.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Run files: a deployment key the files lack or "
                                                   "that overrides theirs, e.g. --set gpu=h100 --set tp=2 (keys: "
                                                   "model, gpu, tp, engine, engine_version, quantization, ...).")]
    = None,
    frontend: Annotated[str | None, typer.Option("--frontend", help="Every row without its own: the path outside "
                                                 "the engine core, vllm | sglang | none (servesim.engine.frontend)."
                                                 )] = None,
    cost: Annotated[str | None, typer.Option("--cost", help="Every row without its own: the cost model, roofline "
                                             "(the default) | aic (each operator from AIConfigurator's measured "
                                             "tables for the row's GPU, engine and release; servesim[aic]).")] =
    None,
    executor: Executor = "local",
    workers: Workers = None,
    ray_address: RayAddress = None,
    html: Annotated[Path | None, typer.Option("--html", help="Write an offline HTML page: predicted vs measured "
                                                             "per metric, error by group, the worst rows.")] = None,
) -> None:
    """Simulate every measured point under its client and compare: MAPE and signed error per metric, overall and
    by model, GPU, engine, client and load; every row servesim cannot express, with the reason. Nothing is
    fitted on the rows scored."""
    from servesim.output import check_output_file
    from servesim.plan.executors import make_executor
    from servesim.validate.score import METHOD, score

    for path, flag in ((json_path, "--json"), (html, "--html")):
        if path is not None:
            check_output_file(path, flag)
    ex = make_executor(executor, workers, ray_address)
    points, skipped = _points(sources, start, client, set_ or [], mode)
    if frontend is not None:
        from servesim.engine.frontend import frontend as preset

        preset(frontend)  # (an unknown name: refused before anything runs)
    if cost is not None and cost not in ("roofline", "aic", "toy"):
        raise ConfigError(f"--cost {cost}: expected roofline, aic or toy")
    points = _fill(points, frontend=frontend, cost=cost)
    from servesim.cli.plan import PointsProgress

    with PointsProgress(len(points), "rows") as bar:
        report = score(points, bar.advance, ex)
    if "aic-silicon" in sources:
        from servesim.validate.aic import method

        report.method = f"{METHOD}; {method(points)}"
    report.rows += len(skipped)
    report.out_of_reach = skipped + report.out_of_reach
    print(f"method: {report.method}")
    print(f"{report.rows} rows: {len(report.predicted)} predicted, {len(report.out_of_reach)} out of reach")
    _table(report)
    if len(report.out_of_reach) > MAX_LISTED:
        print("out of reach, by reason (--json lists every row):")
        _reasons(report.out_of_reach)
    else:
        for line, why in report.out_of_reach:
            print(f"  {'line ' if isinstance(line, int) else ''}{line}: out of reach: {why}")
    if json_path is not None:
        from servesim.export.json_records import write_json

        write_json(json_path, report.to_json(), "--json")
        print(f"wrote {json_path}")
    if html is not None:
        from servesim.report.accuracy import write_page

        write_page(html, report, ", ".join(sources), report.method)
        print(f"wrote {html}")


def _fill(points: list, **given) -> list:
    """Each point with the options given (`--frontend`, `--cost`) where its row does not say its own."""
    from dataclasses import replace

    given = {k: v for k, v in given.items() if v is not None}
    return [replace(p, fields={**given, **p.fields}) if given.keys() - p.fields.keys() else p for p in points]


def _points(sources: list[str], start: str | None, client: str | None, set_: list[str],
            mode: str | None = None) -> tuple[list, list]:
    """Every source's points, and the rows out of reach before simulating (line or file, reason)."""
    from servesim.validate.files import parse_set, run_files, run_points
    from servesim.validate.rows import is_points_json, read_points

    if "aic-silicon" in sources:
        if len(sources) > 1 or set_:
            raise ConfigError("aic-silicon is scored on its own: give it alone, without --set")
        from servesim.validate.aic import read_silicon

        return read_silicon(start=start, client=client, mode=mode)
    if mode is not None:
        raise ConfigError("--mode picks aic-silicon's agg or disagg rows; your CSV's rows are scored as they are")
    if start is not None:
        raise ConfigError("--start sets how aic-silicon's loops start; your CSV says it per row (its start column)")
    if client is not None:
        raise ConfigError("--client sets aic-silicon's client; your CSV says it per row (its client column), a run "
                          "file is its own")
    given = parse_set(set_)
    points, skipped, runs = [], [], []
    for source in sources:
        path = Path(source)
        if path.suffix.lower() == ".csv" or path.suffix.lower() == ".json" and is_points_json(path):
            if given:
                raise ConfigError(f"--set fills the run files' deployment; {path} says it per row")
            points += read_points(path)
        else:
            runs += run_files(path)
    if given and not runs:
        raise ConfigError("--set fills the run files' deployment: no vllm bench serve result or AIPerf export given")
    more, out = run_points(runs, given)
    return points + more, skipped + out


def _table(report) -> None:
    from rich.table import Table

    from servesim.validate.rows import METRICS

    metrics = [m for m in METRICS if report.mape(m) is not None]
    if not metrics:
        return
    t = Table(title="error (%): MAPE / signed mean", title_justify="left")
    for col in ("group", "rows", *metrics):
        t.add_column(col, justify="left" if col == "group" else "right", overflow="fold")

    def cells(rows):
        return [f"{report.mape(m, rows):.1f} / {report.signed(m, rows):+.1f}" if report.mape(m, rows) is not None
                else "-" for m in metrics]

    t.add_row("all", str(len(report.predicted)), *cells(None))
    for g, by in report.groups().items():
        if len(by) > 1:
            for key, rows in sorted(by.items()):
                t.add_row(f"{g} {key}", str(len(rows)), *cells(rows))
    console.print(t)


def _reasons(out_of_reach: list) -> None:
    """The rows out of reach counted by reason (the words after the row's id)."""
    from collections import Counter

    counts = Counter(why.split(": ", 1)[-1] for _, why in out_of_reach)
    for why, n in counts.most_common():
        print(f"  {n:>6,} rows: {why}")
