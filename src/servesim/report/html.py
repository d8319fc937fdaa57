"""One self-contained HTML file: plotly's JavaScript inlined once, every figure's data in the page, no network.

Per run (one time axis shared by all runs: the same range, and zooming one zooms the others): the timeline figure
and a step scrubber (a slider showing one step's batch: who ran with how many tokens, who waited and why; it moves
a marker on the timeline). Then the latency CDFs overlaid, the summary table side by side (`servesim compare`'s
rows), the explain sentences, and the workload's shape.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from servesim.engine.result import SimResult
from servesim.report.figures import (
    latency_figure,
    speculation_gain_figure,
    time_unit,
    timeline_figure,
    workload_figure,
)
from servesim.report.view import RunView

PLOT_CONFIG = {"displaylogo": False, "responsive": True}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.meta, .note { color: #555; font-size: 0.9em; } .note { font-style: italic; }
table { border-collapse: collapse; font-size: 0.9em; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee; }
td.v { text-align: right; font-variant-numeric: tabular-nums; } th { text-align: right; }
.scrubber { background: #f6f6f6; padding: 0.6em 1em; border-radius: 4px; margin-bottom: 1em; }
.scrubber input { width: 100%; } .step { font-size: 0.9em; font-family: ui-monospace, monospace; }
.step .label { font-weight: bold; font-family: system-ui, sans-serif; }
"""

SCRIPT = """
function stepText(s) {
  const ran = s.ran.map(r => r[0] + ' ' + r[1] + (r[2] === 'prefill' ? ' (prefill)' : '')).join(', ')
    + (s.ran_more > 0 ? ' and ' + s.ran_more + ' more decodes' : '');
  const wait = s.wait.map(w => w[0] + ': ' + w[1] + (w[2] ? ' (' + w[2] + ')' : '')).join('; ')
    + (s.wait_more > 0 ? '; and ' + s.wait_more + ' more' : '');
  const rows = [['step', s.step + ' at ' + s.start_ms + ' ms, ' + s.ms + ' ms long, '
                 + s.tokens + ' of ' + s.budget + ' budget tokens'],
                ['ran', ran || 'nothing'], ['waited', wait || 'nobody']];
  if (s.preempted.length) rows.push(['preempted', s.preempted.join(', ')]);
  if (s.finished.length) rows.push(['finished', s.finished.join(', ')]);
  return rows;
}
function showStep(run, index) {
  const data = SERVESIM_RUNS[run], s = data.steps[index], box = document.getElementById('step-' + run);
  box.replaceChildren();
  for (const [label, text] of stepText(s)) {
    const line = document.createElement('div'), l = document.createElement('span');
    l.className = 'label'; l.textContent = label + ': ';
    line.appendChild(l); line.appendChild(document.createTextNode(text)); box.appendChild(line);
  }
  box.dataset.step = s.step;
  const plot = document.getElementById('timeline-' + run), x = s.start_ms / 1000 * data.k;
  if (plot && plot.layout) Plotly.relayout(plot, {'shapes[0].x0': x, 'shapes[0].x1': x});
}
function syncZoom() {
  const plots = Array.from(document.querySelectorAll('.timeline .js-plotly-plot'));
  let busy = false;
  for (const p of plots) {
    p.on('plotly_relayout', ev => {
      if (busy) return;
      let update = null;
      for (const key in ev) {
        if (/^xaxis[0-9]*\\.range\\[0\\]$/.test(key))
          update = {'xaxis.range': [ev[key], ev[key.replace('[0]', '[1]')]]};
        else if (/^xaxis[0-9]*\\.range$/.test(key)) update = {'xaxis.range': ev[key]};
        else if (/^xaxis[0-9]*\\.autorange$/.test(key)) update = {'xaxis.autorange': true};
      }
      if (!update) return;
      busy = true;
      Promise.all(plots.filter(q => q !== p).map(q => Plotly.relayout(q, update))).finally(() => { busy = false; });
    });
  }
}
window.addEventListener('load', () => {
  document.querySelectorAll('input.scrub').forEach(input => {
    const run = Number(input.dataset.run);
    input.addEventListener('input', () => showStep(run, Number(input.value)));
    showStep(run, Number(input.value));
  });
  syncZoom();
});
"""


def _json(data: object) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def _figure_html(fig, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG)


def headline(view: RunView) -> str:
    """The longest step and the worst gap between two tokens: the lesson's stall, or its absence, in one line."""
    from servesim.analysis.breakdown import step_log
    from servesim.analysis.metrics import worst_gap

    log = step_log(view.result)
    if not len(log):
        return f"{view.label}: no step ran"
    i = int(log.duration.argmax())
    text = (f"{view.label}: longest step {log.duration[i] * 1000:.4g} ms (step {i}: {int(log.prefill_tokens[i])} "
            f"prefill tokens beside {int(log.num_decodes[i])} decodes)")
    gap = worst_gap(view.result)
    if gap is not None:
        text += f"; worst gap between two tokens {gap.seconds * 1000:.4g} ms ({gap.request_id}, step {gap.step})"
    return text


def _readable(view: RunView) -> SimResult:
    """The result the table and the sentences read: without a partial set of records (which would pass for all)."""
    r = view.result
    return r if view.exact else replace(r, steps=(), record="summary")


def summary_table(views: Sequence[RunView]) -> str:
    from servesim.analysis.compare import compare_rows

    rows = compare_rows({v.label: _readable(v) for v in views})
    head = "".join(f"<th>{html.escape(v.label)}</th>" for v in views)
    body = "".join(f"<tr><td>{html.escape(label)}</td>" + "".join(f"<td class='v'>{html.escape(x)}</td>"
                                                                   for x in values) + "</tr>"
                   for label, values in rows)
    return f"<table><tr><th></th>{head}</tr>{body}</table>"


def sentences(views: Sequence[RunView]) -> list[tuple[str, list[str]]]:
    """explain's sentences per run (all of them with every record kept; else those the step log allows), then
    compare's sentences on neighbouring runs."""
    from servesim.analysis.compare import compare_sentences
    from servesim.analysis.explain import explain_run, policy_sentence
    from servesim.analysis.overload import detect_overload
    from servesim.analysis.speculation import speculation_sentences

    out = []
    for v in views:
        r = _readable(v)
        out.append((v.label, explain_run(r, plain=v.plain) if v.exact else
                    [policy_sentence(r), detect_overload(r).sentence(), *speculation_sentences(r, v.plain)]))
    same = len({tuple(v.result.timelines.ids) for v in views}) == 1  # one workload each (not a cluster's replicas)
    if len(views) > 1 and same:
        out.append(("side by side", compare_sentences({v.label: _readable(v) for v in views})))
    return out


def _run_section(i: int, view: RunView, x_range: tuple[float, float], unit: tuple[str, float]) -> str:
    fig = timeline_figure(view, x_range, unit)
    notes = "".join(f"<p class='note'>Aggregated: {html.escape(n)}.</p>" for n in view.notes)
    n = len(view.scrub)
    scrub = (f"<div class='scrubber'><label for='scrub-{i}'>Step scrubber ({n} steps):</label>"
             f"<input type='range' class='scrub' id='scrub-{i}' data-run='{i}' min='0' max='{max(n - 1, 0)}' "
             f"value='0' step='1'><div class='step' id='step-{i}'></div></div>") if n else \
        "<p class='note'>No step records to scrub.</p>"
    return (f"<section class='run'><h2>{html.escape(view.label)}</h2>{notes}"
            f"<div class='timeline'>{_figure_html(fig, f'timeline-{i}')}</div>{scrub}</section>")


def report_html(views: Sequence[RunView], title: str, meta: str, notes: Sequence[str] = ()) -> str:
    from plotly.offline import get_plotlyjs

    unit = time_unit(views)
    start = min(float(v.panel.start[0]) for v in views if v.panel.start.size) if any(
        v.panel.start.size for v in views) else 0.0
    x_range = (start * unit[1], max(v.end for v in views) * unit[1])
    runs = {i: {"k": unit[1], "steps": v.scrub} for i, v in enumerate(views)}
    parts = [f"<h1>{html.escape(title)}</h1><p class='meta'>{html.escape(meta)}</p>"]
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in notes]
    parts.append("<h2>At a glance</h2><ul>" + "".join(f"<li>{html.escape(headline(v))}</li>" for v in views)
                 + "</ul>")
    parts += [_run_section(i, v, x_range, unit) for i, v in enumerate(views)]
    parts.append(f"<h2>Latency</h2>{_figure_html(latency_figure(views), 'latency')}")
    parts.append(f"<h2>Summary</h2>{summary_table(views)}")
    spec = speculation_gain_figure(views)
    if spec is not None:
        parts.append(f"<h2>Speculative decoding</h2>{_figure_html(spec, 'speculation')}")
    parts.append("<h2>Explanations</h2>" + "".join(
        f"<h3>{html.escape(label)}</h3><ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in lines) + "</ul>"
        for label, lines in sentences(views)))
    parts.append(f"<h2>Workload</h2>{_figure_html(workload_figure(views[0]), 'workload')}")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>{''.join(parts)}"
            f"<script type='text/javascript'>const SERVESIM_RUNS = {_json(runs)};{SCRIPT}</script></body></html>")


def write_report(path: Path, views: Sequence[RunView], title: str, meta: str, notes: Sequence[str] = ()) -> int:
    """Write the page (renamed into place when complete); its size in bytes."""
    from servesim.output import write_output

    return write_output(path, report_html(views, title, meta, notes).encode("utf-8"), "--output")
