"""A sweep's points drawn: tail latency against throughput per GPU, the Pareto front marked (`plan.pareto`).

Two panels share the throughput axis: TTFT p99 and TPOT p99 against output tokens/s per GPU. Front points are
filled and joined in throughput order, the others hollow, OVERLOADED ones grey crosses (their tail latencies
describe the run's length, not the configuration). Hovering a point shows its axes' values.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servesim.report.figures import require_plotly

PANELS = (("p99_ttft_ms", "TTFT p99 (ms)"), ("p99_tpot_ms", "TPOT p99 (ms)"))
X = "output_throughput_per_gpu"


def _label(row: dict[str, Any], axes: Sequence[str]) -> str:
    return ", ".join(f"{a}={row[a]}" for a in axes if a in row) or "point"


def pareto_figure(rows: Sequence[dict[str, Any]], axes: Sequence[str] = ()):
    """The sweep's rows (`plan.sweep`) as two scatter panels; `axes`: the swept columns named in the hover."""
    require_plotly()
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=[t for _, t in PANELS], horizontal_spacing=0.08)
    groups = (("Pareto front", lambda r: r["pareto"], {"symbol": "circle", "size": 10, "color": "#d62728"}),
              ("other points", lambda r: not r["pareto"] and not r["overloaded"],
               {"symbol": "circle-open", "size": 9, "color": "#1f77b4"}),
              ("OVERLOADED", lambda r: r["overloaded"], {"symbol": "x", "size": 8, "color": "#999999"}))
    for col, (key, _) in enumerate(PANELS, start=1):
        for name, keep, marker in groups:
            pts = sorted((r for r in rows if keep(r)), key=lambda r: r[X])
            fig.add_trace(go.Scatter(
                x=[r[X] for r in pts], y=[r[key] for r in pts], name=name, legendgroup=name, showlegend=col == 1,
                mode="lines+markers" if name == "Pareto front" else "markers", marker=marker,
                line={"color": marker["color"], "dash": "dot"}, text=[_label(r, axes) for r in pts],
                hovertemplate="%{text}<br>%{x:.1f} tok/s/GPU, %{y:.1f} ms<extra></extra>"), row=1, col=col)
        fig.update_xaxes(title_text="output tokens/s per GPU", row=1, col=col)
        fig.update_yaxes(type="log", row=1, col=col)  # an overloaded point's tail is orders of magnitude above
    fig.update_layout(height=460, margin={"t": 40, "l": 50, "r": 10, "b": 40})
    return fig


def speculation_figure(rows: Sequence[dict[str, Any]], axes: Sequence[str]):
    """A speculating sweep's speedup (mean TPOT without speculative decoding / with it) against the offered load,
    one line per configuration, the break-even line at 1: where verifying drafts stops paying. None: no row
    speculated."""
    spec = [r for r in rows if r.get("speculation_speedup") is not None]
    if not spec:
        return None
    import plotly.graph_objects as go

    load = next((a for a in ("request_rate", "rate_scale") if a in axes), "request_throughput")
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in spec:
        groups.setdefault(_label(r, [a for a in axes if a != load]), []).append(r)
    fig = go.Figure()
    for name, group in groups.items():
        pts = sorted(group, key=lambda r: r[load])
        fig.add_trace(go.Scatter(x=[r[load] for r in pts], y=[r["speculation_speedup"] for r in pts], name=name,
                                 mode="lines+markers",
                                 hovertemplate="%{x:g}: %{y:.2f}x<extra>" + html.escape(name) + "</extra>"))
    fig.add_hline(y=1.0, line={"dash": "dash", "color": "#999999"}, annotation_text="break-even")
    fig.update_xaxes(title_text=load.replace("_", " "), type="log")
    fig.update_yaxes(title_text="mean TPOT without / with speculation")
    fig.update_layout(height=380, margin={"t": 30, "l": 50, "r": 10, "b": 40})
    return fig


def write_sweep_report(path: Path, rows: Sequence[dict[str, Any]], axes: Sequence[str], title: str) -> int:
    """One self-contained page (plotly inlined, no network): the figure, then every row; renamed into place."""
    require_plotly()
    from plotly.offline import get_plotlyjs

    from servesim.plan.sweep import speculation_lines

    fig, spec = pareto_figure(rows, axes), speculation_figure(rows, axes)
    cols = [*axes, "request_throughput", X, "p99_ttft_ms", "p99_tpot_ms", "speculation_speedup", "overloaded",
            "pareto"]
    cols = [c for c in dict.fromkeys(cols) if rows and c in rows[0]]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
    front = sum(bool(r["pareto"]) for r in rows)
    text = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><script type='text/javascript'>{get_plotlyjs()}</script>"
            "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;font-size:12px}"
            "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{len(rows)} points, {front} on the Pareto front (TTFT p99, TPOT "
            "p99, output throughput per GPU; OVERLOADED points do not compete).</p>"
            f"{fig.to_html(full_html=False, include_plotlyjs=False, div_id='pareto')}"
            + ("" if spec is None else "<h2>Speculative decoding</h2>" + "".join(
                f"<p>{html.escape(t)}</p>" for t in speculation_lines(rows, axes))
               + spec.to_html(full_html=False, include_plotlyjs=False, div_id="speculation")) +
            f"<table><tr>{head}</tr>{body}</table></body></html>")
    from servesim.output import write_output

    return write_output(path, text.encode("utf-8"), "--report")


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
