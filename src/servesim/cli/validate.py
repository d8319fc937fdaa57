"""`servesim validate SOURCE`: servesim scored against measured deployments (docs/accuracy.md)."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each start.

from pathlib import Path
from typing import Annotated

import typer

from servesim.cli.app import app
from servesim.cli.term import LazyConsole

console = LazyConsole()


@app.command("validate")
def validate_cmd(
    source: Annotated[Path, typer.Argument(help="Your measurements: a CSV in docs/accuracy.md's format.")],
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the scores, every row and the rows out of "
                                                                  "reach here.")] = None,
) -> None:
    """Simulate every measured point under its client and compare: MAPE and signed error per metric, overall and
    by model, GPU, engine, client and load; every row servesim cannot express, with the reason. Nothing is
    fitted on the rows scored."""
    from servesim.output import check_output_file
    from servesim.validate.rows import read_points
    from servesim.validate.score import METHOD, score

    if json_path is not None:
        check_output_file(json_path, "--json")
    points = read_points(source)
    from servesim.cli.plan import PointsProgress

    with PointsProgress(len(points), "rows") as bar:
        report = score(points, bar.advance)
    print(f"method: {METHOD}")
    print(f"{report.rows} rows: {len(report.predicted)} predicted, {len(report.out_of_reach)} out of reach")
    _table(report)
    for line, why in report.out_of_reach:
        print(f"  line {line}: out of reach: {why}")
    if json_path is not None:
        from servesim.export.json_records import write_json

        write_json(json_path, report.to_json(), "--json")
        print(f"wrote {json_path}")


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
