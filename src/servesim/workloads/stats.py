"""`servesim workload stats`: what a workload looks like, in numbers and, optionally, in a picture."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from servesim.errors import WorkloadError
from servesim.workloads.table import RequestTable

PERCENTILES = {"p50": 50, "p90": 90, "p99": 99}


def workload_stats(table: RequestTable) -> dict[str, float | int | None]:
    """Flat statistics with `vllm bench serve`-style keys (`mean_prompt_len`, `p99_output_len`, ...).

    duration_s: last arrival minus first. mean_rate: 1 / mean inter-arrival time = (count - 1) / duration_s.
    burstiness_cv: coefficient of variation (population std / mean) of the inter-arrival times: 1 for Poisson.
    equivalent_burstiness: the `--burstiness` (gamma shape) that gives that CV, 1 / CV^2.
    Undefined values (one request, all at once) are None.
    """
    n = len(table)
    t = table.arrival_time
    gaps = np.diff(t)
    duration = float(t[-1] - t[0]) if n else 0.0
    mean_gap = float(gaps.mean()) if len(gaps) else 0.0
    cv = float(gaps.std() / mean_gap) if mean_gap > 0 else None
    out: dict[str, float | int | None] = {
        "count": n,
        "duration_s": duration,
        "mean_rate": 1.0 / mean_gap if mean_gap > 0 else None,
        "burstiness_cv": cv,
        "equivalent_burstiness": 1.0 / cv**2 if cv else None,
        "total_prompt_tokens": int(table.prompt_len.sum()),
        "total_output_tokens": int(table.output_len.sum()),
    }
    for name, col in (("prompt_len", table.prompt_len), ("output_len", table.output_len)):
        out[f"mean_{name}"] = float(col.mean()) if n else None
        out[f"min_{name}"] = int(col.min()) if n else None
        for key, q in PERCENTILES.items():
            out[f"{key}_{name}"] = float(np.percentile(col, q)) if n else None
        out[f"max_{name}"] = int(col.max()) if n else None
    total_out = out["total_output_tokens"]
    out["prompt_output_ratio"] = out["total_prompt_tokens"] / total_out if total_out else None  # type: ignore[operator]
    return out


def format_stats(stats: dict[str, float | int | None], name: str) -> str:
    def f(v: float | int | None, digits: int = 1) -> str:
        if v is None:
            return "n/a"
        return f"{v:,}" if isinstance(v, int) else f"{v:,.{digits}f}"

    lines = [
        f"workload:                  {name}",
        f"requests:                  {f(stats['count'])}",
        f"duration (s):              {f(stats['duration_s'], 3)}",
        f"mean rate (req/s):         {f(stats['mean_rate'], 3)}",
        f"burstiness (CV of gaps):   {f(stats['burstiness_cv'], 3)}"
        f"   (= --burstiness {f(stats['equivalent_burstiness'], 3)})",
        f"prompt:output tokens:      {f(stats['prompt_output_ratio'], 2)}",
        f"{'tokens':<26} {'mean':>9} {'min':>9} {'p50':>9} {'p90':>9} {'p99':>9} {'max':>9}",
    ]
    for name_ in ("prompt_len", "output_len"):
        cells = [f(stats[f"{k}_{name_}"]) for k in ("mean", "min", "p50", "p90", "p99", "max")]
        lines.append(f"{name_:<26} " + " ".join(f"{c:>9}" for c in cells))
    return "\n".join(lines)


def plot_workload(table: RequestTable, path: Path, title: str) -> None:
    """Arrivals over time and the two length histograms, one PNG (or any format matplotlib knows)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise WorkloadError("--plot needs matplotlib: pip install 'servesim[plot]'") from None
    from servesim.output import write_output

    fig, (ax_t, ax_p, ax_o) = plt.subplots(1, 3, figsize=(15, 4))
    t = table.arrival_time
    span = float(t[-1] - t[0]) if len(t) else 0.0
    width = max(span / 100, 1e-3) if span > 0 else 1.0
    bins = max(1, math.ceil(span / width))
    ax_t.hist(t, bins=bins, color="tab:blue")
    ax_t.set(title="arrivals over time", xlabel="time (s)", ylabel=f"requests per {width:.3g} s")
    ax_p.hist(table.prompt_len, bins=50, color="tab:green")
    ax_p.set(title="prompt length", xlabel="tokens", ylabel="requests")
    ax_o.hist(table.output_len, bins=50, color="tab:orange")
    ax_o.set(title="output length", xlabel="tokens", ylabel="requests")
    fig.suptitle(title)
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fmt = path.suffix.lstrip(".") or "png"
    try:
        fig.savefig(buf, format=fmt)
    except ValueError as exc:
        raise WorkloadError(f"--plot {path}: {exc}") from None
    finally:
        plt.close(fig)
    write_output(path, buf.getvalue(), "--plot")
