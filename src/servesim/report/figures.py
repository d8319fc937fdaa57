"""Plotly figures of a run (`report.view.RunView`): the timeline (Gantt, tokens per step against the budget, KV
blocks, queues, on one time axis) and the latency CDFs overlaid per run. The HTML report and the notebook's
`Run.plot_timeline()` / `Run.plot_latency()` use these."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servesim.report.view import RunView

COLOURS = {"queued": "#b0b0b0", "prefill": "#e4572e", "decode": "#4c78a8", "preempted": "#f2a541",
           "swapped": "#9c6ade"}
RUN_COLOURS = ("#4c78a8", "#e4572e", "#54a24b", "#b279a2", "#f2a541", "#72b7b2", "#9d755d", "#ff9da6")
METRIC_TITLES = {"ttft": "TTFT (ms)", "tpot": "TPOT (ms)", "itl": "ITL (ms)", "e2el": "E2E latency (ms)"}


def require_plotly() -> None:
    """plotly is in the `plot` extra: a one-line error without it, before any simulation."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        from servesim.errors import ServesimError

        raise ServesimError("the report's figures need plotly: pip install 'servesim[plot]'") from None


def time_unit(views: Sequence[RunView]) -> tuple[str, float]:
    """ms for runs under 10 s, else s: (label, factor from seconds)."""
    end = max((v.end for v in views), default=0.0)
    return ("ms", 1000.0) if end < 10 else ("s", 1.0)


def _bar_x(start: np.ndarray, width: np.ndarray, k: float) -> tuple[list, list]:
    return ((start + width / 2) * k).tolist(), (width * k).tolist()


def _gantt(fig, view: RunView, k: float) -> None:
    import plotly.graph_objects as go

    for kind, colour in COLOURS.items():
        bars = [b for b in view.bars if b.kind == kind]
        if not bars:
            continue
        fig.add_trace(go.Bar(
            orientation="h", y=[b.request_id for b in bars], base=[b.start * k for b in bars],
            x=[(b.end - b.start) * k for b in bars], name=kind, legendgroup=kind, marker_color=colour,
            marker_line={"color": "white", "width": 0.5}, hovertext=[b.hover for b in bars],
            hovertemplate="%{hovertext}<extra></extra>"), row=1, col=1)


def _steps(fig, view: RunView, k: float) -> None:
    import plotly.graph_objects as go

    p = view.panel
    x, width = _bar_x(p.start, p.width, k)
    what = "mean per step in a bin of " if p.binned else "step "
    label = [f"{what}steps {a}-{b}" if a != b else f"step {a}" for a, b in zip(p.first_step.tolist(),
                                                                             p.last_step.tolist())]

    line = {"width": 0} if p.binned else {"color": "white", "width": 0.5}  # each step's bar apart

    def hover(what: str) -> str:
        return f"%{{customdata}}<br>%{{y:.4g}} {what} tokens<extra></extra>"

    fig.add_trace(go.Bar(x=x, width=width, y=p.decode, name="decode tokens", marker_color=COLOURS["decode"],
                         marker_line=line, customdata=label, hovertemplate=hover("decode")), row=2, col=1)
    fig.add_trace(go.Bar(x=x, width=width, y=p.prefill, base=p.decode, name="prefill tokens",
                         marker_color=COLOURS["prefill"], marker_line=line, customdata=label,
                         hovertemplate=hover("prefill")), row=2, col=1)
    edges = np.append(p.start, p.start[-1:] + p.width[-1:]) * k if p.start.size else np.zeros(0)
    fig.add_trace(go.Scatter(x=edges, y=np.append(p.budget, p.budget[-1:]), mode="lines", line_shape="hv",
                             name="token budget", line={"color": "black", "dash": "dash", "width": 1}),
                  row=2, col=1)
    start = (p.start * k).tolist()
    if p.kv_used is not None:
        fig.add_trace(go.Scatter(x=start, y=p.kv_used, mode="lines", line_shape="hv", name="KV blocks used",
                                 line={"color": "#d62728"}), row=3, col=1)
        fig.add_trace(go.Scatter(x=start, y=p.kv_free, mode="lines", line_shape="hv", name="KV blocks free",
                                 line={"color": "#2ca02c"}), row=3, col=1)
    if p.kv_cached is not None:
        fig.add_trace(go.Scatter(x=start, y=p.kv_cached, mode="lines", line_shape="hv",
                                 name="KV blocks free, cached (prefix)", line={"color": "#9467bd", "dash": "dot"}),
                      row=3, col=1)
    fig.add_trace(go.Scatter(x=start, y=p.running, mode="lines", line_shape="hv", name="running",
                             line={"color": "#1f77b4"}), row=4, col=1)
    fig.add_trace(go.Scatter(x=start, y=p.waiting, mode="lines", line_shape="hv", name="waiting",
                             line={"color": "#ff7f0e"}), row=4, col=1)


def timeline_figure(view: RunView, x_range: tuple[float, float] | None = None, unit: tuple[str, float] | None = None):
    """Gantt, tokens per step (decode and prefill stacked) against the budget, KV blocks, running and waiting, on
    one time axis; `x_range` (in the unit) shares the axis with other runs' figures."""
    require_plotly()
    from plotly.subplots import make_subplots

    name, k = unit or time_unit([view])
    rows = len(view.rows)
    gantt_px = min(max(120, 18 * rows), 900)
    heights = [gantt_px, 180, 140, 140]
    kv_title = "KV blocks" if view.panel.kv_used is not None else "KV blocks (unlimited)"
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.03,
                        row_heights=[h / sum(heights) for h in heights],
                        subplot_titles=("requests", "tokens per step", kv_title, "requests running / waiting"))
    _gantt(fig, view, k)
    _steps(fig, view, k)
    fig.update_yaxes(autorange="reversed", type="category", row=1, col=1)
    fig.update_xaxes(title_text=f"simulated time ({name})", row=4, col=1)
    if x_range is not None:
        fig.update_xaxes(range=list(x_range))
    start = view.scrub[0]["start_ms"] / 1000 * k if view.scrub else 0.0
    fig.update_layout(
        title=f"{view.label}: timeline", barmode="overlay", bargap=0, height=sum(heights) + 160,
        hovermode="closest", margin={"l": 70, "r": 20, "t": 70, "b": 50}, legend={"orientation": "h", "y": -0.06},
        # the step the scrubber shows (moved by the page's script)
        shapes=[{"type": "line", "xref": "x", "yref": "paper", "x0": start, "x1": start, "y0": 0, "y1": 1,
                 "line": {"color": "rgba(0,0,0,0.45)", "width": 1.5, "dash": "dot"}}])
    return fig


def latency_figure(views: Sequence[RunView]):
    """TTFT, TPOT, ITL and E2E latency CDFs, one line per run."""
    require_plotly()
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=2, subplot_titles=list(METRIC_TITLES.values()), vertical_spacing=0.14)
    for i, view in enumerate(views):
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        for j, metric in enumerate(METRIC_TITLES):
            x, y = view.cdfs[metric]
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv", name=view.label, legendgroup=view.label,
                                     showlegend=j == 0, line={"color": colour},
                                     hovertemplate=f"{view.label}: %{{x:.4g}} ms, %{{y:.1%}}<extra></extra>"),
                          row=j // 2 + 1, col=j % 2 + 1)
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    fig.update_layout(title="latency distributions (CDF; vllm bench serve's definitions)", height=620,
                      margin={"l": 60, "r": 20, "t": 80, "b": 40})
    return fig


def workload_figure(view: RunView, bins: int = 60):
    """The workload's shape: arrivals over time and the prompt and output length histograms (pre-binned)."""
    require_plotly()
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t = view.result.timelines
    fig = make_subplots(rows=1, cols=3, subplot_titles=("arrivals per bin", "prompt tokens", "output tokens"))
    for col, (values, colour) in enumerate(((t.arrival_time, "#72b7b2"), (t.prompt_len, COLOURS["prefill"]),
                                            (t.output_len, COLOURS["decode"])), start=1):
        counts, edges = np.histogram(np.asarray(values, float), bins=bins)
        fig.add_trace(go.Bar(x=((edges[:-1] + edges[1:]) / 2).tolist(), y=counts.tolist(),
                             width=np.diff(edges).tolist(), marker_color=colour, showlegend=False), row=1, col=col)
    fig.update_xaxes(title_text="arrival time (s)", row=1, col=1)
    fig.update_layout(title=f"workload: {len(t):,} requests", height=300, bargap=0,
                      margin={"l": 60, "r": 20, "t": 70, "b": 50})
    return fig


def speculation_gain_figure(views: Sequence[RunView]):
    """Per decoding request, a verify step's tokens per second over a plain decode step's at each batch size
    (`analysis.speculation.gains`), one line per speculating run, the break-even line at 1: the batch size past
    which verifying drafts stops paying. None: no run speculated (or none has its plain twin)."""
    from servesim.analysis.speculation import gains

    lines = [(v, gains(v.result, v.plain)) for v in views if v.plain is not None]
    lines = [(v, g) for v, g in lines if g]
    if not lines:
        return None
    require_plotly()
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, (view, gain) in enumerate(lines):
        fig.add_trace(go.Scatter(x=list(gain), y=list(gain.values()), mode="lines+markers", name=view.label,
                                 line={"color": RUN_COLOURS[i % len(RUN_COLOURS)]},
                                 hovertemplate=f"{view.label}: batch %{{x}}, %{{y:.2f}}x<extra></extra>"))
    fig.add_hline(y=1.0, line={"dash": "dash", "color": "#999999"}, annotation_text="break-even")
    fig.update_xaxes(title_text="requests decoding (decode-only steps)")
    fig.update_yaxes(title_text="tokens/s per request: verify / plain")
    fig.update_layout(title="speculative decoding: what a verify step brings against a plain decode step",
                      height=360, margin={"l": 60, "r": 20, "t": 60, "b": 50})
    return fig
