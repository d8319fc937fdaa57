"""aic-silicon's rows in parts, and two scorings side by side by source (docs/accuracy.md, "The clients the rows
name"): `python -m bench.aic_sources score OUT.json [--engines trtllm] [--skip-engines trtllm] [--every K]
[--client NAME]` scores the rows `servesim validate aic-silicon` predicts (every K-th of each source, in file
order), as `validate --json` writes them; `python -m bench.aic_sources compare BEFORE.json AFTER.json[,MORE.json]
[--by source,engine,model,load]` prints MAPE / signed mean of TTFT, TPOT and E2E on the rows both predict.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

METRICS = ("ttft_ms", "tpot_ms", "e2el_ms")


def score_part(out: str, engines: list[str], skip: list[str], every: int, client: str | None) -> None:
    from servesim.validate.aic import read_silicon
    from servesim.validate.score import score

    points, _ = read_silicon(client=client)
    points = [p for p in points if (not engines or p.fields["engine"] in engines) and p.fields["engine"] not in skip]
    picked = []
    for source in sorted({p.fields["source"] for p in points}):
        picked += [p for p in points if p.fields["source"] == source][::every]
    report = score(picked)
    with open(out, "w") as f:
        json.dump(report.to_json(), f)
    print(f"{len(report.predicted)} of {len(picked)} rows predicted; wrote {out}")


def compare(before: str, after: str, by: list[str]) -> None:
    import polars as pl

    from servesim.validate.aic import silicon_csv, source_of

    source = {r["id"]: source_of(r["silicon_data_source"])
              for r in pl.read_csv(silicon_csv(), infer_schema_length=0).iter_rows(named=True)}
    with open(before) as f:
        b = {p["line"]: p for p in json.load(f)["points"]}
    a = {}
    for path in after.split(","):
        with open(path) as f:
            a |= {p["line"]: p for p in json.load(f)["points"]}
    rows = sorted(a.keys() & b.keys())

    def band(c: int) -> str:
        return "c1" if c == 1 else "c2-8" if c <= 8 else "c9-64" if c <= 64 else "c65+"

    def key(p: dict, g: str) -> str:
        return {"source": source[p["id"]], "load": band(p["concurrency"])}.get(g) or str(p[g])

    def cells(lines: list) -> str:
        out = []
        for m in METRICS:
            for d in (b, a):
                e = np.array([d[line]["error_pct"][m] for line in lines])
                out.append(f"{np.mean(np.abs(e)):.1f} / {np.mean(e):+.1f}")
        return " | ".join(out)

    print("| group | rows | " + " | ".join(f"{m[:-3].upper()} before | {m[:-3].upper()} after" for m in METRICS) +
          " |\n|---|---:|" + "---:|" * 6)
    print(f"| **all** | {len(rows)} | {cells(rows)} |")
    for g in by:
        groups: dict[str, list] = {}
        for line in rows:
            groups.setdefault(key(b[line], g), []).append(line)
        for k in sorted(groups):
            print(f"| {g} {k} | {len(groups[k])} | {cells(groups[k])} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score")
    s.add_argument("out")
    s.add_argument("--engines", default="")
    s.add_argument("--skip-engines", default="")
    s.add_argument("--every", type=int, default=1)
    s.add_argument("--client", default=None)
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--by", default="source,engine,model,load")
    args = ap.parse_args()
    if args.cmd == "score":
        split = lambda text: [e for e in text.split(",") if e]  # noqa: E731
        score_part(args.out, split(args.engines), split(args.skip_engines), args.every, args.client)
    else:
        compare(args.before, args.after, args.by.split(","))


if __name__ == "__main__":
    main()
