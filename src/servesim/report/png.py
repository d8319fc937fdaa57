"""The report's figures as PNGs (matplotlib, no browser): one timeline per run and the latency CDFs, for papers and
terminals. The same data as the HTML (`report.view.RunView`), on the same time axis."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servesim.errors import ServesimError
from servesim.report.figures import COLOURS, METRIC_TITLES, RUN_COLOURS, time_unit
from servesim.report.view import RunView


def require_matplotlib() -> None:
    _pyplot()


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ServesimError("--png needs matplotlib: pip install 'servesim[plot]'") from None
    return plt


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in label)


def timeline_png(path: Path, view: RunView, x_range: tuple[float, float], unit: tuple[str, float]) -> Path:
    plt = _pyplot()
    name, k = unit
    rows = {rid: i for i, rid in enumerate(view.rows)}
    fig, (gantt, tokens, kv, queues) = plt.subplots(4, 1, sharex=True, figsize=(11, 8),
                                                    gridspec_kw={"height_ratios": [3, 1.4, 1, 1]})
    for kind, colour in COLOURS.items():
        bars = [b for b in view.bars if b.kind == kind]
        if bars:
            gantt.barh([rows[b.request_id] for b in bars], [(b.end - b.start) * k for b in bars],
                       left=[b.start * k for b in bars], color=colour, edgecolor="white", linewidth=0.4, label=kind,
                       height=0.8)
    if len(view.rows) <= 40:
        gantt.set_yticks(range(len(view.rows)), view.rows, fontsize=7)
    gantt.invert_yaxis()
    gantt.set_title(f"{view.label}: requests")
    gantt.legend(loc="upper right", fontsize=7, ncols=5)
    p = view.panel
    left = p.start * k
    edge = {} if p.binned else {"edgecolor": "white", "linewidth": 0.4}  # each step's bar apart
    tokens.bar(left, p.decode, width=p.width * k, align="edge", color=COLOURS["decode"], label="decode", **edge)
    tokens.bar(left, p.prefill, width=p.width * k, bottom=p.decode, align="edge", color=COLOURS["prefill"],
               label="prefill", **edge)
    tokens.step(left, p.budget, where="post", color="black", linestyle="--", linewidth=0.8, label="budget")
    tokens.set_ylabel("tokens / step", fontsize=8)
    tokens.legend(loc="upper right", fontsize=7, ncols=3)
    if p.kv_used is not None:
        kv.step(left, p.kv_used, where="post", color="#d62728", label="used")
        kv.step(left, p.kv_free, where="post", color="#2ca02c", label="free")
        kv.legend(loc="upper right", fontsize=7)
    kv.set_ylabel("KV blocks" if p.kv_used is not None else "KV: unlimited", fontsize=8)
    queues.step(left, p.running, where="post", label="running")
    queues.step(left, p.waiting, where="post", label="waiting")
    queues.set_ylabel("requests", fontsize=8)
    queues.legend(loc="upper right", fontsize=7)
    queues.set_xlim(*x_range)
    queues.set_xlabel(f"simulated time ({name})")
    fig.tight_layout()
    _save(fig, path)
    return path


def latency_png(path: Path, views: Sequence[RunView]) -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5))
    for ax, metric in zip(axes.ravel(), METRIC_TITLES):
        for i, view in enumerate(views):
            x, y = view.cdfs[metric]
            ax.step(x, y, where="post", color=RUN_COLOURS[i % len(RUN_COLOURS)], label=view.label)
        ax.set_title(METRIC_TITLES[metric], fontsize=9)
        ax.set_ylim(0, 1.02)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("latency CDFs (vllm bench serve's definitions)")
    fig.tight_layout()
    _save(fig, path)
    return path


def write_pngs(folder: Path, views: Sequence[RunView]) -> list[Path]:
    """timeline-LABEL.png per run and latency.png, into `folder` (which exists)."""
    unit = time_unit(views)
    starts = [float(v.panel.start[0]) for v in views if v.panel.start.size]
    x_range = ((min(starts) if starts else 0.0) * unit[1], max(v.end for v in views) * unit[1])
    out = [timeline_png(folder / f"timeline-{i}-{_safe(v.label)}.png", v, x_range, unit)
           for i, v in enumerate(views)]
    out.append(latency_png(folder / "latency.png", views))
    return out


def _save(fig, path: Path) -> None:
    """The figure as PNG bytes, written where `path` points (`servesim.output`)."""
    import io

    from servesim.output import write_output

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    _pyplot().close(fig)
    write_output(path, buf.getvalue(), "--png")
