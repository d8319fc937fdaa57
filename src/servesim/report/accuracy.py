"""`servesim validate --html`: the scores on one self-contained page (plotly inlined, no network).

Three parts: predicted against measured per metric (log axes, the y = x line, a point a row, its settings on
hover); MAPE per group and metric (bars, one panel a group kind); the worst rows by absolute error of TTFT (or
the first metric scored), with their settings; then the method and the rows out of reach, counted by reason.
"""

from __future__ import annotations

import html
from collections import Counter
from pathlib import Path

from servesim.report.figures import require_plotly

WORST = 20
SETTINGS = ("model", "gpu", "engine", "engine_version", "tp", "quantization", "client", "concurrency",
            "request_rate", "isl", "osl")


def _label(point) -> str:
    f = point.fields
    return ", ".join(f"{k}={f[k]}" for k in SETTINGS if k in f)


def scatter_figure(report, metrics: list[str]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=metrics, horizontal_spacing=0.06)
    for col, m in enumerate(metrics, start=1):
        rows = [(p, pred) for p, pred, _ in report.predicted if m in p.measured and m in pred]
        xs, ys = [p.measured[m] for p, _ in rows], [pred[m] for _, pred in rows]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=m, showlegend=False,
                                 text=[_label(p) for p, _ in rows], marker={"size": 6, "opacity": 0.7},
                                 hovertemplate="%{text}<br>measured %{x:.4g}, servesim %{y:.4g}<extra></extra>"),
                      row=1, col=col)
        if xs:
            lo, hi = min(xs + ys), max(xs + ys)
            fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", showlegend=False, hoverinfo="skip",
                                     line={"color": "#999", "dash": "dot"}), row=1, col=col)
        fig.update_xaxes(type="log", title_text="measured", row=1, col=col)
        fig.update_yaxes(type="log", title_text="servesim" if col == 1 else None, row=1, col=col)
    fig.update_layout(height=380, margin={"t": 40, "l": 50, "r": 10, "b": 40})
    return fig


def groups_figure(report, metrics: list[str]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    kinds = {g: by for g, by in report.groups().items() if len(by) > 1}
    fig = make_subplots(rows=max(len(kinds), 1), cols=1, subplot_titles=list(kinds) or ["(one group)"],
                        vertical_spacing=0.12)
    for row, by in enumerate(kinds.values(), start=1):
        keys = sorted(by)
        for i, m in enumerate(metrics):
            fig.add_trace(go.Bar(x=keys, y=[report.mape(m, by[k]) for k in keys], name=m, legendgroup=m,
                                 showlegend=row == 1, marker={"color": f"hsl({i * 70}, 60%, 50%)"},
                                 hovertemplate="%{x}: MAPE %{y:.1f} %<extra>" + m + "</extra>"), row=row, col=1)
        fig.update_yaxes(title_text="MAPE %", row=row, col=1)
    fig.update_layout(height=260 * max(len(kinds), 1), barmode="group", margin={"t": 40, "l": 50, "r": 10, "b": 40})
    return fig


def page(report, source: str, method: str) -> str:
    require_plotly()
    from plotly.offline import get_plotlyjs

    from servesim.validate.rows import METRICS

    metrics = [m for m in METRICS if report.mape(m) is not None]
    summary = ", ".join(f"{m} MAPE {report.mape(m):.1f} % (signed {report.signed(m):+.1f} %)" for m in metrics)
    parts = [f"<h1>servesim validate: {html.escape(source)}</h1>",
             f"<p>{report.rows} rows: {len(report.predicted)} predicted, {len(report.out_of_reach)} out of reach. "
             f"{html.escape(summary)}</p><p><i>{html.escape(method)}</i></p>"]
    if metrics:
        parts += ["<h2>servesim against measured</h2>",
                  scatter_figure(report, metrics).to_html(full_html=False, include_plotlyjs=False, div_id="scatter"),
                  "<h2>Error by group</h2>",
                  groups_figure(report, metrics).to_html(full_html=False, include_plotlyjs=False, div_id="groups"),
                  _worst(report, metrics)]
    parts.append(_out_of_reach(report))
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>servesim validate</title>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script><style>body{{font-family:sans-serif;"
            "margin:1.5em}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
            "padding:2px 6px;text-align:right}</style></head><body>" + "".join(parts) + "</body></html>")


def _worst(report, metrics: list[str]) -> str:
    key = metrics[0]
    rows = sorted((r for r in report.predicted if key in r[2]), key=lambda r: -abs(r[2][key]))[:WORST]
    cols = [k for k in SETTINGS if any(k in p.fields for p, _, _ in rows)]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["row", *cols, *(f"{m} measured / servesim / error"
                                                                         for m in metrics)])
    body = ""
    for p, pred, err in rows:
        cells = [str(p.line), *(str(p.fields.get(c, "")) for c in cols)]
        cells += [f"{p.measured[m]:.4g} / {pred[m]:.4g} / {err[m]:+.1f} %" if m in err else "" for m in metrics]
        body += "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
    return f"<h2>The {len(rows)} worst rows by {html.escape(key)}</h2><table><tr>{head}</tr>{body}</table>"


def _out_of_reach(report) -> str:
    if not report.out_of_reach:
        return ""
    counts = Counter(why.split(": ", 1)[-1] for _, why in report.out_of_reach)  # (as `validate` prints them)
    items = "".join(f"<li>{n:,} rows: {html.escape(why)}</li>" for why, n in counts.most_common())
    return f"<h2>Out of reach</h2><ul>{items}</ul>"


def write_page(path: Path, report, source: str, method: str) -> int:
    from servesim.output import write_output

    return write_output(path, page(report, source, method).encode("utf-8"), "--html")
