"""servesim beside AIConfigurator's own estimate on the same measured rows: `python -m bench.aic_side_by_side
[--start staggered|together] [--cost roofline|aic] [--mode agg|disagg] [--models gpt-oss-120b,...]` (needs
`pip install 'servesim[aic]'`; a few minutes, the rows of the servesim models named alone with --models).

The rows are those `servesim validate aic-silicon` predicts; AIConfigurator's estimate of each is
`bench.aic_estimate`'s (its own scoring of its file). Printed as the table of docs/accuracy.md: MAPE of TTFT and
TPOT per group, over the rows both predict, and the rows AIConfigurator refuses, with the reason.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict

import numpy as np

from bench.aic_estimate import estimate


def main() -> None:
    import polars as pl

    from servesim.validate.aic import MODELS, read_silicon, silicon_csv
    from servesim.validate.score import group_of, score

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", default="staggered", choices=("staggered", "together"))
    ap.add_argument("--cost", default="roofline", choices=("roofline", "aic"), help="servesim's cost model: the "
                    "roofline, or its operators from AIConfigurator's measured tables (servesim.cost.aic)")
    ap.add_argument("--mode", choices=("agg", "disagg"), help="only the rows of this mode (all by default)")
    ap.add_argument("--models", default=None, help="only the rows of these servesim models (comma-separated)")
    ap.add_argument("--workers", type=int, default=1, help="processes scoring servesim's rows")
    ap.add_argument("--json", default=None, help="write servesim's report (validate's --json) here")
    args = ap.parse_args()
    raw = {r["id"]: r for r in pl.read_csv(silicon_csv(), infer_schema_length=0).iter_rows(named=True)}
    points, out = read_silicon(start=args.start, mode=args.mode)
    if args.models:
        wanted = set(args.models.split(","))
        points = [p for p in points if p.fields["model"] in wanted]
        names = {k for k, v in MODELS.items() if v in wanted}
        mine = [why for line, why in out if raw_model(raw, why) in names]
        print(f"{len(points)} rows of {args.models} expressible, {len(mine)} out of reach:")
        for why, n in Counter(why.split(": ", 1)[1] for why in mine).most_common():
            print(f"  {n:4d} {why}")
    if args.cost != "roofline":
        from dataclasses import replace

        points = [replace(p, fields=p.fields | {"cost": args.cost}) for p in points]
    from servesim.plan.executors import LocalExecutor

    report = score(points, executor=LocalExecutor(args.workers))
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(report.to_json(), f)
    print(f"servesim alone on its {len(report.predicted)} rows (MAPE / signed mean, %):")
    print("| model | rows | TTFT | TPOT | E2E |")
    print("|---|---:|---:|---:|---:|")
    for key, rows in sorted(report.groups()["model"].items()):
        cells = " | ".join(f"{report.mape(m, rows):.1f} / {report.signed(m, rows):+.1f}"
                           for m in ("ttft_ms", "tpot_ms", "e2el_ms"))
        print(f"| {key} | {len(rows)} | {cells} |")
    both, refused = [], Counter()
    for p, _, err in report.predicted:
        aic = estimate(raw[p.fields["id"]])
        if isinstance(aic, str):
            refused[aic] += 1
            continue
        m = p.measured
        aic_err = {"ttft_ms": (aic[0] - m["ttft_ms"]) / m["ttft_ms"] * 100,
                   "tpot_ms": (aic[1] - m["tpot_ms"]) / m["tpot_ms"] * 100}
        both.append((p, err, aic_err))
    print(f"{len(report.predicted)} rows servesim predicts ({args.start}, {args.cost}); AIConfigurator estimates "
          f"{len(both)}")
    print("| group | rows | TTFT servesim | TTFT AIConfigurator | TPOT servesim | TPOT AIConfigurator |")
    print("|---|---:|---:|---:|---:|---:|")
    _row("**all**", both)
    for g in ("model", "gpu", "engine", "load"):
        by = defaultdict(list)
        for row in both:
            by[group_of(row[0], g)].append(row)
        for key in sorted(by):
            _row(key, by[key])
    for why, n in refused.most_common():
        print(f"  AIConfigurator refuses {n} rows: {why}")


def raw_model(raw: dict, why: str) -> str:
    """The model id of the row an out-of-reach reason names (its id first)."""
    row = raw.get(why.split(": ", 1)[0])
    return row["model_path"] if row else ""


def _row(label: str, rows: list) -> None:
    def mape(which: int, metric: str) -> str:
        return f"{np.mean([abs(r[which][metric]) for r in rows]):.1f}"

    print(f"| {label} | {len(rows)} | {mape(1, 'ttft_ms')} | {mape(2, 'ttft_ms')} | {mape(1, 'tpot_ms')} | "
          f"{mape(2, 'tpot_ms')} |")


if __name__ == "__main__":
    main()
