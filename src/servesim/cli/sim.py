"""Simulation commands: demo, trace, lesson, conform."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each
# start, and would eval each string (~0.01 s in all).

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servesim.analysis.metrics import longest_prompt, slot_utilization, worst_gap
from servesim.cli.app import app
from servesim.cli.options import Policy, SimOptions, simulating
from servesim.cli.term import LazyConsole
from servesim.engine import simulate
from servesim.engine.result import SimResult
from servesim.engines.config import EngineConfig
from servesim.engines.sglang.server_args import SGLangConfig
from servesim.engines.trtllm.llm_args import TrtllmConfig
from servesim.errors import ConfigError
from servesim.workloads import load_workload

if TYPE_CHECKING:
    from rich.table import Table

console = LazyConsole()


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.4g} ms"


DEMO_POLICIES = {
    # The seed scenario: budget 256 for vllm; static and continuous never chunk (budget = max_model_len).
    "static": EngineConfig(max_num_seqs=8),
    "continuous": EngineConfig(max_num_seqs=8),
    "vllm": EngineConfig(max_num_batched_tokens=256, max_num_seqs=8),
    # SGLang 0.5.23 with its own knobs at the same sizes: prefill first (the decodes wait while L's chunks run),
    # and with --enable-mixed-chunk the decodes ride in the chunk's forward, as vLLM's do
    "sglang": EngineConfig(sglang=SGLangConfig(chunked_prefill_size=256, max_running_requests=8)),
    "sglang mixed": EngineConfig(sglang=SGLangConfig(chunked_prefill_size=256, max_running_requests=8,
                                                     enable_mixed_chunk=True)),
    # TensorRT-LLM 1.2 with chunked context (FIRST_COME_FIRST_SERVED: a cut chunk rounded down to the 32-token
    # block) in batches of 256 tokens beside the decodes
    "trtllm": EngineConfig(trtllm=TrtllmConfig(max_batch_size=8, max_num_tokens=256, enable_chunked_prefill=True)),
}


def demo_results() -> dict[str, SimResult]:
    reqs = load_workload("seed")
    return {name: simulate(reqs, cfg, name.split()[0], "toy") for name, cfg in DEMO_POLICIES.items()}


@app.command()
def demo(
    steps: Annotated[int, typer.Option(help="Rows of each per-step table to show (0 = all).")] = 16,
) -> None:
    """The seed scenario (4 short requests decoding, a 2000-token prompt arriving at 20 ms) under static,
    continuous, vllm, sglang (and sglang with mixed chunks) and trtllm scheduling, toy cost (1 ms per decode, 0.1 ms per
    prefill token), 8 seats, chunks of 256 tokens."""
    import shutil

    from servesim.analysis.explain import policy_sentence
    from servesim.cli.render import step_lines

    width = shutil.get_terminal_size().columns
    results = demo_results()
    for name, r in results.items():
        shown = None if steps == 0 else steps
        more = f" (first {steps} of {len(r.steps)} steps)" if shown and shown < len(r.steps) else ""
        print(f"{name}: per-step schedule{more}")
        print("\n".join(step_lines(r, limit=shown, width=width)))
        print()
    console.print(summary_table(results))
    for name, r in results.items():
        print(fill(f"{name}: {policy_sentence(r)}", width))


def summary_table(results: dict[str, SimResult]) -> "Table":
    from rich.table import Table

    t = Table(title="Side by side", title_justify="left")
    t.add_column("")
    for name in results:
        t.add_column(name, justify="right")
    any_r = next(iter(results.values()))
    lp = longest_prompt(any_r)
    rows = {
        "worst gap between tokens": [_ms(g.seconds) if (g := worst_gap(r)) else "-" for r in results.values()],
        f"TTFT of {lp} (longest prompt)": [_ms(r.request(lp).ttft) for r in results.values()],
        "tokens processed": [str(r.tokens_processed) for r in results.values()],
        "slot utilization": [f"{slot_utilization(r):.1%}" for r in results.values()],
        "steps": [str(len(r.steps)) for r in results.values()],
        "makespan": [_ms(r.makespan) for r in results.values()],
    }
    for label, vals in rows.items():
        t.add_row(label, *vals)
    return t


TRACE_ROWS = 200  # rows `trace` prints by default


@app.command()
@simulating
def trace(
    opts: SimOptions,
    policy: Policy = "vllm",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write every step record and timeline "
                                                                  "here.")] = None,
    limit: Annotated[int | None, typer.Option(help=f"Rows to print (0 = all). Default: the first {TRACE_ROWS}; "
                                                  "only the steps printed (or written) keep records, so a long "
                                                  "run stays fast.")] = None,
) -> None:
    """Print the per-step schedule: step, start and duration (ms), decodes, tokens/budget, free KV blocks,
    prefill chunks as id:tokens, and events (arrivals, preemptions, finishes, and why each waiting request got
    nothing); then one sentence on the longest prompt and the worst gap between tokens."""
    import shutil

    from servesim.analysis.explain import policy_sentence
    from servesim.cli.analysis import note, rejected_note
    from servesim.cli.render import step_lines
    from servesim.export.json_records import result_to_dict, write_json
    from servesim.output import check_output_file

    if json_path:
        check_output_file(json_path, "--json")
    if limit is not None and limit < 0:
        raise ConfigError(f"--limit {limit}: expected a number of rows >= 0 (0 = all)")
    rows = TRACE_ROWS if limit is None else limit or None
    cfg, cm = opts.engine_config(policy), opts.cost_model(policy)
    keep = None if json_path else rows
    if opts.client != "vllm-bench":  # the client's own load: its last simulation, with records
        from servesim.cli.analysis import client_result

        result = client_result(opts, cfg, policy, cm, "trace", max_records=keep)
    else:
        if opts.is_cluster():
            return trace_cluster(opts, cfg, policy, cm, rows, json_path)
        result = simulate(opts.requests(), cfg, policy, cm, max_records=keep)
    note(opts.lesson_note(policy))
    rejected_note(result)
    width = shutil.get_terminal_size().columns
    print("\n".join(step_lines(result, limit=rows, width=width)))
    total = len(result.step_log)
    if rows is not None and total > rows:
        print(f"... the first {rows:,} of {total:,} steps: --limit N prints more, --limit 0 all, --json FILE "
              "writes every record")
    if result.preemptions:
        n = len(result.preemptions)
        print(f"{n:,} preemption{'s' if n != 1 else ''}; recomputed tokens {result.recomputed_tokens:,} "
              f"(recompute tax {result.recompute_tax:.1%})")
    print(fill(policy_sentence(result), width))
    if json_path:
        write_json(json_path, result_to_dict(result), "--json")
        print(f"wrote {json_path}")


def trace_cluster(opts: SimOptions, cfg: EngineConfig, policy: str, cm, rows: int | None,
                  json_path: Path | None) -> None:
    """`trace` on a cluster: each replica's per-step schedule under its name (`--limit` rows each); `--json`
    writes every step record with its replica, the requests on the cluster's clock and the routing decisions."""
    import shutil

    from servesim.analysis.explain import policy_sentence
    from servesim.cli.analysis import note, rejected_note
    from servesim.cli.render import step_lines
    from servesim.export.json_records import write_json

    c = opts.simulate_cluster(opts.requests(), cfg, policy, cm, "full")
    note(opts.lesson_note(policy))
    rejected_note(c.cluster)
    width = shutil.get_terminal_size().columns
    for name, res in zip(c.names, c.replicas):
        total = len(res.steps)
        shown = f"the first {rows:,} of {total:,} steps" if rows is not None and total > rows else f"{total:,} steps"
        print(f"{name}: {len(res.requests):,} requests, {shown}")
        print("\n".join(step_lines(res, limit=rows, width=width)))
        if res.steps:
            print(fill(policy_sentence(res), width))
        print()
    if json_path:
        write_json(json_path, c.records_dict(), "--json")
        print(f"wrote {json_path}")


def fill(text: str, width: int) -> str:
    import textwrap

    return textwrap.fill(text, max(width, 40), break_on_hyphens=False)


@app.command()
def lesson() -> None:
    """The lesson's questions, answered by servesim's lesson functions (computed, not stored)."""
    from servesim.lesson.questions import lesson_answers

    for question, answer in lesson_answers():
        console.print(f"[bold]Q.[/bold] {question}")
        console.print(f"[green]A.[/green] {answer}\n")


@app.command()
def conform(
    scenario: Annotated[Path, typer.Argument(help="A scenario JSON in the ../shared/conformance format.")],
    expected: Annotated[Path | None, typer.Option("--expected", help="A trace recorded from the engine to "
                                                                    "match.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write servesim's trace (same schema) here.")] = None,
    policy: Annotated[str | None, typer.Option(help="The engine's policy: vllm (../shared/conformance) or sglang "
                                                    "(../shared/conformance/sglang). Default: the engine whose "
                                                    "format the scenario is in.")] = None,
) -> None:
    """Run a conformance scenario under its engine's policy on a step clock (every step costs 1.0); with
    --expected, exit 0 on an exact match, else print the first differing step side by side and exit 1."""
    from servesim.export.json_records import write_json
    from servesim.output import check_output_file

    spec = _conformance_engine(scenario, policy)
    conf = spec.load("conformance")
    if out:
        check_output_file(out, "--out")
    sc = conf.load_scenario(scenario)
    actual = conf.to_trace(sc, conf.run_scenario(sc))
    if out:
        write_json(out, actual, "--out")
        console.print(f"wrote {out}")
    summary = actual["summary"]
    if expected is None:
        n = summary.get("total_preemptions", summary.get("total_retractions"))
        console.print(f"{len(actual['steps'])} steps, {n} {spec.preemption_word}")
        return
    diff = conf.compare(sc, conf.load_trace(expected), actual)
    if diff is None:
        console.print(f"[green]match[/green]: {len(actual['steps'])} steps identical to {expected}")
        return
    i, field, want, got = diff
    from rich.table import Table

    t = Table(title=f"first difference: step #{i}, field {field}", title_justify="left")
    t.add_column(f"{spec.display} (expected)", overflow="fold")
    t.add_column("servesim", overflow="fold")
    t.add_row(json.dumps(want), json.dumps(got))
    console.print(t)
    raise typer.Exit(1)


def _conformance_engine(scenario: Path, policy: str | None):
    """The engine whose format to read `scenario` in: --policy's, else the one the scenario's config names (a file
    that cannot be read or told apart is read as vLLM's, whose reader then says what is wrong)."""
    from servesim.engines.registry import conformance_for, engines

    recorded = [e for e in engines() if e.conformance]
    if policy is not None:
        spec = next((e for e in recorded if e.load("conformance").POLICY == policy), None)
        if spec is None:
            names = " or ".join(e.load("conformance").POLICY for e in recorded)
            raise ConfigError(f"--policy {policy!r}: expected {names} (the engines with recorded schedules)")
        return spec
    try:
        parsed = json.loads(scenario.read_bytes())
    except (OSError, ValueError):
        parsed = None
    return conformance_for(parsed) or recorded[0]
