"""Analysis commands: run (vLLM's benchmark block), compare (side by side), explain (sentences from records)."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each
# start, and would eval each string (~0.01 s in all).

import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from servesim.cli.app import app
from servesim.cli.options import Policy, SimOptions, simulating
from servesim.cli.progress import SimProgress
from servesim.cli.term import LazyConsole
from servesim.engine import simulate
from servesim.engines.registry import engine_for
from servesim.errors import ConfigError
from servesim.export.json_records import write_json
from servesim.export.parquet import ParquetRecords
from servesim.output import check_output_dir, check_output_file

console = LazyConsole(highlight=False, soft_wrap=True)  # compare, explain; run prints plain text


def note(message: str | None) -> None:
    if message:
        print(f"servesim: note: {message}", file=sys.stderr)


def engine_note(opts, cost) -> None:
    """--engine NAME whose host model, at this TP, is the default preset's: the run's numbers are the default's."""
    from servesim.cost.host import DEFAULT_ENGINE, get_engine

    preset = getattr(cost, "engine", None)
    if opts.engine is None or preset is None or preset.name == DEFAULT_ENGINE:
        return
    tp = getattr(cost, "tp", 1)
    flags = {"enforce_eager": opts.enforce_eager, "distributed_executor_backend": opts.distributed_executor_backend,
             "disable_custom_all_reduce": opts.disable_custom_all_reduce, "async_scheduling": opts.async_scheduling}
    if preset.behaviour(tp) == get_engine(DEFAULT_ENGINE, **flags).behaviour(tp):  # as without --engine
        note(f"--engine {preset.name}: at TP {tp} its host model is {DEFAULT_ENGINE}'s (no per-step host "
             "measurement of it is public: the same upper bound), so every step time is the default's")


def rejected_note(result) -> None:
    if result.rejected:
        n = len(result.rejected)
        which = f"request {result.rejected[0]}" if n == 1 else f"{n:,} requests (e.g. {result.rejected[0]})"
        it = "it" if n == 1 else "them"
        engine = engine_for(result.policy).rejecter
        note(f"{which} longer than max_model_len {result.config.max_model_len:,} (prompt + output tokens) failed: "
             f"{engine} rejects {it}, and vllm bench serve counts {it} as failed")
    full = [p for p in getattr(result, "preemptions", ()) if p.mode == "recompute (swap pool full)"]
    if full:
        cfg = result.config
        note(f"{len(full):,} of {len(result.preemptions):,} preemptions found the CPU swap space full (swap_space "
             f"{cfg.swap_space:g} GiB = {cfg.num_cpu_blocks:,} blocks of {cfg.block_size} tokens) and were recomputed "
             "instead (vLLM v0 aborts the engine there: 'Aborted due to the lack of CPU swap space'); raise "
             "--swap-space")


@app.command("run")
@simulating
def run_cmd(
    opts: SimOptions,
    policy: Policy = "vllm",
    metric_percentiles: Annotated[str, typer.Option(
        "--metric-percentiles", "--percentiles", help="Percentiles to report, vLLM's syntax, e.g. 25,50,99.")] = "99",
    percentile_metrics: Annotated[str, typer.Option(
        "--percentile-metrics", help="Metrics with percentiles: any of ttft,tpot,itl,e2el.")] = "ttft,tpot,itl",
    goodput: Annotated[list[str] | None, typer.Option(
        "--goodput", help="SLOs in ms, vLLM's syntax: --goodput 'ttft:300 tpot:50' (or repeat the option).")] = None,
    warmup: Annotated[float, typer.Option(
        "--warmup-s", help="Exclude requests arriving in the first S seconds.")] = 0.0,
    cooldown: Annotated[float, typer.Option("--cooldown-s", help="Exclude requests arriving in the last S seconds "
                                                                 "of the arrivals.")] = 0.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the result file here (vLLM's keys, "
                                                                  "and `config`).")] = None,
    save_result: Annotated[bool, typer.Option("--save-result", help="Write the result file as vllm bench serve "
                                                                    "does (--result-dir, --result-filename).")] = False,
    result_dir: Annotated[Path | None, typer.Option("--result-dir", help="Folder for --save-result "
                                                                         "(default: here).")] = None,
    result_filename: Annotated[str | None, typer.Option(
        "--result-filename", help="File name for --save-result (default: vLLM's "
                                  "BACKEND-RATEqps-MODEL-DATE.json).")] = None,
    save_detailed: Annotated[bool, typer.Option(
        "--save-detailed", help="Add per-request input_lens, output_lens, ttfts, itls and errors.")] = False,
    server: Annotated[bool, typer.Option(help="Also print the server-side breakdown.")] = True,
    record: Annotated[str, typer.Option(
        "--record", help="Step records kept: summary (compact per-step arrays: fastest, every metric) | steps | "
                         "full (with why each waiting request got nothing).")] = "summary",
    records_dir: Annotated[Path | None, typer.Option(
        "--records", help="Stream the step records to DIR/steps.parquet and scheduled.parquet (with --record "
                          "steps or full) and waiting.parquet (--record full: why each waiting request got nothing) "
                          "instead of holding them.")] = None,
) -> None:
    """Simulate and print `vllm bench serve`'s "Serving Benchmark Result" block (same labels and layout), the
    server-side breakdown only a simulator can give, and OVERLOADED with its evidence when the queue is unstable."""
    from servesim.analysis.benchmark import parse_goodput, parse_metric_names, parse_percentiles
    from servesim.export.result_file import default_filename

    ps, names = parse_percentiles(metric_percentiles), parse_metric_names(percentile_metrics)
    slos = parse_goodput(goodput or [])
    outputs = _run_outputs(json_path, record, records_dir, save_result, result_dir, result_filename)
    cfg, cm = opts.engine_config(policy), opts.cost_model(policy)
    engine_note(opts, cm)
    if check_client(opts, {"--warmup-s": warmup, "--cooldown-s": cooldown, "--save-result": save_result or None,
                           "--goodput": goodput, "--records": records_dir}):
        return run_client(opts, cfg, policy, cm, outputs)
    reqs = opts.requests()
    if opts.is_cluster():
        if records_dir is not None or save_result:
            raise ConfigError("--records and --save-result write one engine's run: not with the cluster options yet")
        return run_cluster(opts, reqs, cfg, policy, cm, record, ps, names, slos, warmup, cooldown, outputs)
    if save_result:
        name = result_filename or default_filename(cm, opts.request_rate, opts.max_concurrency, opts.ramp_up())
        outputs.append(check_output_file((result_dir or Path(".")) / name, "--result-filename"))
    with SimProgress() as progress, (ParquetRecords(records_dir) if records_dir else nullcontext()) as sink:
        result = simulate(reqs, cfg, policy, cm, record=record, progress=progress, sink=sink)
    if records_dir is not None:
        print(f"wrote step records to {records_dir}/")
    note(opts.lesson_note(policy))
    rejected_note(result)
    _print_run(opts, result, cm, ps, names, slos, warmup, cooldown, server, outputs, save_detailed)


def _run_outputs(json_path: Path | None, record: str, records_dir: Path | None, save_result: bool,
                 result_dir: Path | None, result_filename: str | None) -> list[Path]:
    """`run`'s output options checked before anything runs; the files to write (--json)."""
    if records_dir is not None and record == "summary":
        raise ConfigError("--records writes step records: give --record steps or --record full with it")
    if (result_dir is not None or result_filename is not None) and not save_result:
        raise ConfigError("--result-dir and --result-filename name the --save-result file: add --save-result")
    outputs = [check_output_file(json_path, "--json")] if json_path else []
    if records_dir is not None:
        check_output_dir(records_dir, "--records")
    if result_dir is not None:
        check_output_dir(result_dir, "--result-dir")
    return outputs


def _print_run(opts: SimOptions, result, cm, ps, names, slos, warmup: float, cooldown: float, server: bool,
               outputs: list[Path], save_detailed: bool) -> None:
    """vllm bench serve's block, OVERLOADED when unstable, the server side; the result file to `outputs`."""
    from servesim.analysis.benchmark import benchmark_metrics, format_result
    from servesim.analysis.breakdown import format_prefix_cache, format_server, server_metrics
    from servesim.analysis.overload import detect_overload
    from servesim.export.result_file import result_file

    m = benchmark_metrics(result, ps, slos, warmup, cooldown)
    over = detect_overload(result, warmup, cooldown)
    if over.overloaded:
        print(over.sentence())
    print(format_result(m, names, request_rate=opts.request_rate, max_concurrency=opts.max_concurrency,
                        spec=result.spec_decoding))
    if server:
        print(format_server(server_metrics(result, ps)))
    if server and result.prefix_cache is not None:
        print(format_prefix_cache(result.prefix_cache))
    if outputs:
        data = result_file(result, m, names, cm, opts.request_rate, opts.burstiness, over.overloaded,
                           detailed=save_detailed, ramp_up=opts.ramp_up())
        for path in outputs:
            write_json(path, data, "--json")
            print(f"wrote {path}")


# vllm bench serve's load options: another client sends its own load, so they are refused under it
VLLM_BENCH_LOAD = {"max_concurrency": "--max-concurrency", "num_requests": "--num-prompts",
                   "dataset_name": "--dataset-name", "prompt_len": "--prompt-len", "output_len": "--output-len",
                   "random_input_len": "--random-input-len", "random_output_len": "--random-output-len",
                   "random_range_ratio": "--random-range-ratio", "random_prefix_len": "--random-prefix-len",
                   "rate_scale": "--rate-scale", "window": "--window", "ramp_up_strategy": "--ramp-up-strategy",
                   "ramp_up_start_rps": "--ramp-up-start-rps", "ramp_up_end_rps": "--ramp-up-end-rps"}


def check_client(opts: SimOptions, run_options: dict) -> bool:
    """Whether `run` goes to another client than vllm bench serve (`--client`); each client's flags are refused
    under another, and vllm bench serve's load options and `run`'s vLLM-result options under any other."""
    from servesim.clients import CLIENTS, DEFAULT_CLIENT, client_module

    own = client_module(opts.client)
    for name in CLIENTS:
        other = client_module(name)
        if other is not own and other.FLAGS is not None and other.given(opts):
            raise ConfigError(f"{other.given(opts)[0]} is an option of the {name} client: add --client {name}")
    if own.NAME == DEFAULT_CLIENT:
        return False
    shared = getattr(own, "SHARES_VLLM_LOAD", ())
    given = [flag for name, flag in VLLM_BENCH_LOAD.items() if getattr(opts, name) is not None and name not in shared]
    given += [flag for flag, v in run_options.items() if v]
    if opts.burstiness != 1.0:
        given.append("--burstiness")
    if opts.workload != "seed" and not getattr(own, "TAKES_WORKLOAD", False):
        given.append("--workload")
    if given:
        raise ConfigError(f"{given[0]}: not an option of --client {own.NAME}, which sends its own load "
                          "(docs/clients.md); drop it")
    return True


def run_client(opts: SimOptions, cfg, policy: str, cm, outputs: list[Path]) -> None:
    """`run --client NAME`: the client's load, its own measurement and report (and --json as its export)."""
    from servesim.clients import client_module

    client = client_module(opts.client)
    load = client_load(opts, client)
    server = None
    if opts.is_cluster() and getattr(load, "in_order", False):
        raise ConfigError("--request-rate with --concurrency (AIPerf's paced sends under a cap) on a cluster is not "
                          "modelled yet: give one of them")
    if opts.is_cluster():  # the client sends to the cluster's router; its clock is the cluster's
        layouts: list = []

        def server(requests, config):
            c = opts.simulate_cluster(requests, config, policy, cm, "summary")
            layouts.append(c)
            return c.cluster

    result, measured = client.run(load, cfg, policy, cm, server=server)
    for one in result if isinstance(result, list) else [result]:  # (a sweep of benchmarks: each)
        rejected_note(one)
    m = client.summarize(result, measured, load, opts)
    print(client.format_metrics(m))
    if server is not None:
        c = layouts[-1]
        print(f"on {len(c.replicas)} replicas ({', '.join(c.names)}), router {c.router}")
    first = result[0] if isinstance(result, list) else result
    for path in outputs:
        write_json(path, {"client": client.NAME, "client_version": client.VERSION, "records": m,
                          "policy": first.policy, "cost_model": first.cost_model}, "--json")
        print(f"wrote {path}")


def client_load(opts: SimOptions, client) -> object:
    """What `--client NAME` sends, planned from its flags (and its samples: the workload's requests, as vllm bench
    loads them, for a client that takes a workload)."""
    if getattr(client, "TAKES_WORKLOAD", False):
        from servesim.cli.workload import workload_from_options

        synthetic = "random" in (opts.dataset_name, opts.workload)  # (the client makes its own random lengths)
        return client.plan(opts, [] if synthetic else workload_from_options(opts.workload, **opts.loader_options()))
    return client.plan(opts)


def client_result(opts: SimOptions, cfg, policy: str, cm, command: str, **sim) -> object:
    """A non-vLLM client's run with step records, for `trace` and `explain`: its load as `run --client` sends it,
    and the result of its last simulation (its phases, warm-up included, are one run; AIPerf's paced profiling
    after a warm-up runs alone, and is that run)."""
    from servesim.clients import client_module
    from servesim.engine import simulate

    check_client(opts, {})
    if opts.is_cluster():
        raise ConfigError(f"{command} --client {opts.client} on a cluster is not modelled yet: servesim run takes it")
    client = client_module(opts.client)
    result, _ = client.run(client_load(opts, client), cfg, policy, cm,
                           server=lambda reqs, config: simulate(reqs, config, policy, cm, **sim))
    if isinstance(result, list):
        if len(result) > 1:
            raise ConfigError(f"--profile kind=sweep runs {len(result)} benchmarks: {command} takes one (give "
                              "--profile kind=synchronous|concurrent|throughput|constant|poisson)")
        result = result[0]
    return result


def run_cluster(opts: SimOptions, reqs, cfg, policy: str, cm, record: str, ps, names, slos, warmup: float,
                cooldown: float, outputs: list[Path]) -> None:
    """`run` on a cluster: vLLM's block for the whole cluster, then one line per replica (and the KV link, P/D)."""
    from servesim.analysis.benchmark import format_result, to_json

    c = opts.simulate_cluster(reqs, cfg, policy, cm, record)
    note(opts.lesson_note(policy))
    rejected_note(c.cluster)
    m = c.benchmark(ps, slos, warmup, cooldown)
    print(format_result(m, names, request_rate=opts.request_rate))
    data = c.to_json()
    print(f"{len(c.replicas)} replicas, router {c.router}:")
    for row in data["replicas"]:
        kv = "-" if row["mean_kv_use"] is None else f"{row['mean_kv_use']:.1%}"
        hit = "" if row["prefix_hit_rate"] is None else f", prefix hit rate {row['prefix_hit_rate']:.1%}"
        print(f"  {row['replica']:<12} {row['completed']:>8,} requests {row['tokens']:>12,} tokens  KV {kv:>6}  "
              f"max waiting {row['max_waiting']:,}  preemptions {row['preemptions']:,}{hit}")
    if c.transfers:
        print(f"KV transfers: {data['kv_transfer_count']:,}, mean {data['mean_kv_transfer_ms']:.2f} ms, p99 "
              f"{data['p99_kv_transfer_ms']:.2f} ms, link use {data['kv_transfer_link_utilization']:.1%}")
    for path in outputs:
        write_json(path, {**to_json(m, names), **data, "request_rate": opts.request_rate}, "--json")
        print(f"wrote {path}")


@app.command()
def routers() -> None:
    """The routers --router takes, and how each picks a replica."""
    from servesim.cluster.routers import ROUTERS

    for name, what in ROUTERS.items():
        print(f"{name:<32} {what}")


@app.command()
@simulating
def compare(
    opts: SimOptions,
    policies: Annotated[str | None, typer.Option(
        "--policies", help="Policies side by side, e.g. static,continuous,vllm.")] = None,
    set_: Annotated[str | None, typer.Option(
        "--set", help="One knob, several values, e.g. max_num_batched_tokens=256,512,2048.")] = None,
    policy: Annotated[str, typer.Option("--policy", "-p", help="Policy for --set.")] = "vllm",
) -> None:
    """The same workload through several policies or several values of one knob: one table, a column each, and
    sentences attributing the differences. A token budget applies to chunking policies only (static and
    continuous never chunk; vLLM would reject a budget below max_model_len for them)."""
    from servesim.analysis.compare import compare_rows, compare_sentences, parse_set, run_policies, run_sweep
    from servesim.cluster.compare import KNOBS as CLUSTER_KNOBS

    if (policies is None) == (set_ is None):
        raise ConfigError("give exactly one of --policies A,B,... or --set KNOB=V1,V2,...")
    names = [p.strip() for p in policies.split(",") if p.strip()] if policies is not None else []
    # (--set runs one policy: its engine's host preset, as `run` does; --policies share the default preset)
    cfg, cm = opts.engine_config(policy, policies=tuple(names)), opts.cost_model(None if names else policy)
    reqs = opts.requests()
    knob = set_.partition("=")[0].strip().replace("-", "_") if set_ is not None else None
    if opts.is_cluster() or knob in CLUSTER_KNOBS:
        return compare_cluster(opts, reqs, cfg, cm, policy, names, set_)
    notes: list[str] = []
    if policies is not None:
        if len(names) < 2:
            raise ConfigError(f"--policies {policies!r}: name at least two policies")
        results, notes = run_policies(reqs, names, cfg, cm)
    else:
        results = run_sweep(reqs, policy, cfg, cm, *parse_set(set_))
    note(opts.lesson_note(policy))
    rejected_note(max(results.values(), key=lambda r: len(r.rejected)))
    from rich.table import Table

    title = f"{opts.workload}: side by side ({cm.name} cost)"
    headers = list(results)
    if set_ is not None:  # every column is one value of the knob: the title names the knob, a header its value
        knob = headers[0].partition("=")[0]
        headers = [h.partition("=")[2] for h in headers]
        title = f"{opts.workload}: {knob} = {', '.join(headers)} ({policy}, {cm.name} cost)"
    t = Table(title=title, title_justify="left")
    t.add_column("")
    for name in headers:
        t.add_column(name, justify="right")
    for label, values in compare_rows(results):
        t.add_row(label, *values)
    console.print(t)
    for line in notes + compare_sentences(results):
        console.print(line)


def compare_cluster(opts: SimOptions, reqs, cfg, cm, policy: str, policies: list[str], set_: str | None) -> None:
    """`compare` on clusters: a column per router, layout (--set router=..., num_replicas=..., router_delay_ms=...),
    engine knob value or policy, each run on the cluster the options describe."""
    from dataclasses import replace

    from rich.table import Table

    from servesim.analysis.compare import parse_set
    from servesim.cluster.compare import KNOBS, cluster_rows, cluster_sentences, parse_cluster_set

    runs = {}
    if set_ is None:
        if len(policies) < 2:
            raise ConfigError(f"--policies {','.join(policies)!r}: name at least two policies")
        for name in policies:
            runs[name] = opts.simulate_cluster(reqs, opts.engine_config(name), name, cm, "full")
    else:
        knob = set_.partition("=")[0].strip().replace("-", "_")
        knob, values = parse_cluster_set(set_) if knob in KNOBS else parse_set(set_)
        for v in values:
            o, c = (replace(opts, **{knob: v}), cfg) if knob in KNOBS else (opts, cfg.with_knobs({knob: v}))
            runs[f"{v}"] = o.simulate_cluster(reqs, c, policy, cm, "full")
    note(opts.lesson_note(policy))
    rejected_note(max((c.cluster for c in runs.values()), key=lambda r: len(r.rejected)))
    what = "policy" if set_ is None else set_.partition("=")[0].strip()
    t = Table(title=f"{opts.workload}: {what} = {', '.join(runs)} (cluster, {cm.name} cost)", title_justify="left")
    t.add_column("")
    for name in runs:
        t.add_column(name, justify="right")
    for label, values in cluster_rows(runs):
        t.add_row(label, *values)
    console.print(t)
    for line in cluster_sentences(runs):
        console.print(line)


@app.command()
@simulating
def explain(
    opts: SimOptions,
    policy: Policy = "vllm",
    request: Annotated[str | None, typer.Option("--request", help="Explain one request by id.")] = None,
    counterfactual: Annotated[bool, typer.Option(
        help="When a prompt was chunked, also run the workload unchunked and say what chunking changed.")] = True,
) -> None:
    """Plain sentences built from the step records: what bound the schedule, where tail latency came from,
    preemptions and their cost; with --request ID, that request's wait, prefill chunks, preemptions and gaps."""
    from servesim.analysis.explain import explain_request
    from servesim.run import Run

    cfg, cm = opts.engine_config(policy), opts.cost_model(policy)
    if opts.client != "vllm-bench":  # the client's own load (its phases need a simulation to place their sends)
        reqs, result = None, client_result(opts, cfg, policy, cm, "explain")
        if counterfactual:
            note(f"--client {opts.client}: the unchunked counterfactual reruns vllm bench serve's requests, not a "
                 "client's load; not run (--no-counterfactual says so)")
            counterfactual = False
    else:
        reqs = opts.requests()
        if opts.is_cluster():
            return explain_cluster_cmd(opts, reqs, cfg, policy, cm, request)
        result = simulate(reqs, cfg, policy, cm)
    if request is not None and request not in {r.id for r in result.requests}:
        raise ConfigError(f"--request {request!r}: no such request in {opts.workload!r} "
                          f"(ids: {', '.join(r.id for r in result.requests[:10])}"
                          f"{', ...' if len(result.requests) > 10 else ''})")
    note(opts.lesson_note(policy))
    rejected_note(result)
    if request in result.rejected:
        r = result.request(request)
        lines = [f"{request} failed on arrival: its {r.prompt_len:,} prompt + {r.output_len:,} output tokens exceed "
                 f"max_model_len {result.config.max_model_len:,} ({engine_for(policy).rejecter} "
                 "rejects it; vllm bench serve counts it as "
                 "failed)."]
    elif request is not None:
        lines = explain_request(result, request)
    else:
        lines = Run(result, reqs if counterfactual else None, cost=cm).explain().split("\n")
    for line in lines:
        console.print(line)


def explain_cluster_cmd(opts: SimOptions, reqs, cfg, policy: str, cm, request: str | None) -> None:
    """`explain` on a cluster: why each request went where it went, then its replica's records."""
    from servesim.cluster.explain import explain_cluster, explain_cluster_request

    c = opts.simulate_cluster(reqs, cfg, policy, cm, "full")
    ids = [r.request_id for r in reqs]
    if request is not None and request not in set(ids):
        raise ConfigError(f"--request {request!r}: no such request in {opts.workload!r} "
                          f"(ids: {', '.join(ids[:10])}{', ...' if len(ids) > 10 else ''})")
    note(opts.lesson_note(policy))
    rejected_note(c.cluster)
    if request is not None and request in c.cluster.rejected:
        r = c.cluster.request(request)
        lines = [f"{request} failed on arrival: its {r.prompt_len:,} prompt + {r.output_len:,} output tokens exceed "
                 f"max_model_len {c.cluster.config.max_model_len:,}."]
    else:
        lines = explain_cluster(c, cm) if request is None else explain_cluster_request(c, request)
    for line in lines:
        console.print(line)
