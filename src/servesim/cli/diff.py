"""`servesim diff RUN`: a real run's requests replayed through servesim, and where prediction and measurement part.

RUN is a `vllm bench serve --save-result --save-detailed` file or AIPerf's `profile_export.jsonl` (or its
artifacts folder): the load comes from it (lengths, send times, the client's cap), the deployment from the
options (and from the file's `--metadata` keys where an option is not given).
"""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each start.

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from servesim.cli.app import app
from servesim.cli.options import SimOptions, simulating
from servesim.errors import ConfigError

METRIC_LABELS = {"ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)", "itl_ms": "ITL (ms)", "e2el_ms": "E2EL (ms)",
                 "output_throughput": "Output tokens/s"}
FIT_ROUNDS = 8  # replays of --fit-frontend at most
FROM_FILE = ("model", "gpu", "tp", "quantization", "kv_cache_dtype", "max_num_seqs", "max_num_batched_tokens",
             "frontend")


@app.command("diff")
@simulating
def diff_cmd(
    opts: SimOptions,
    run_path: Annotated[Path, typer.Argument(metavar="RUN", help="A vllm bench serve --save-result --save-detailed "
                                             "file, or AIPerf's profile_export.jsonl (or its artifacts folder).")],
    policy: Annotated[str | None, typer.Option("--policy", "-p", help="The engine's policy (default: the file's "
                                               "engine metadata, else vllm).")] = None,
    worst: Annotated[int, typer.Option("--worst", help="Requests listed: the N farthest apart.")] = 10,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write every request's comparison here.")] = None,
    engine_log: Annotated[Path | None, typer.Option("--engine-log", help="The server's log with vLLM's per-step "
                                                    "lines (vllm serve --enable-logging-iteration-details, vLLM "
                                                    ">= 0.14): a per-step diff.")] = None,
    fit_frontend: Annotated[bool, typer.Option("--fit-frontend", help="Fit the path outside the engine core "
                                               "(servesim.engine.frontend) to the TTFT gaps: ms a request and us a "
                                               "prompt token, then replay with it.")] = False,
) -> None:
    """Replay a measured run request by request (same lengths, same order, sent when the client sent them) and
    show per request where servesim and the measurement part: TTFT (predicted as queue + prefill) and decode."""
    from servesim.measured.read import read_run
    from servesim.measured.replay import replay
    from servesim.output import check_output_file

    if worst < 0:
        raise ConfigError(f"--worst: got {worst}; expected a count >= 0")
    if json_path is not None:
        check_output_file(json_path, "--json")
    refuse_load(opts, "diff")
    run = read_run(run_path)
    if not run.per_request:
        raise ConfigError(f"{run_path}: saved without --save-detailed: it has the means, not the per-request arrays "
                          "diff compares (servesim validate scores the means)")
    opts, policy, taken = deployment(opts, run, policy)
    if taken:
        print(f"from {run_path.name}'s metadata: " + ", ".join(f"{k} {v}" for k, v in taken.items()))
    cfg, cost = opts.engine_config(policy), opts.cost_model(policy)
    if fit_frontend and (cfg.frontend_latency or cfg.frontend_latency_per_token):
        raise ConfigError("--fit-frontend fits the whole path outside the engine core: drop --frontend and its "
                          "latencies")
    rep = replay(run, cfg, policy, cost, sends="measured")
    fit = None
    if fit_frontend:
        rep, fit = _fit(run, rep, cfg, policy, cost)
    rows = request_rows(run, rep)
    _print(run, rep, rows, worst)
    steps = None
    if engine_log is not None:
        from servesim.analysis.breakdown import step_log
        from servesim.measured.engine_log import read_engine_log, step_diff

        steps = step_diff(read_engine_log(engine_log), step_log(rep.result))
        _print_steps(steps)
    if json_path is not None:
        from servesim.export.json_records import write_json

        doc = {"run": str(run_path), "client": run.client, "sends": rep.sends, "policy": policy,
               "means": mean_rows(run, rep), "requests": rows}
        if fit is not None:
            doc["frontend_fit"] = fit
        if steps is not None:
            doc["steps"] = steps
        write_json(json_path, doc, "--json")
        print(f"wrote {json_path}")


def _fit(run, rep, cfg, policy: str, cost) -> tuple:
    """The front end fitted to the TTFT gaps of the engine core alone, and the replay with it (`--fit-frontend`)."""
    from servesim.engine.frontend import fit_frontend
    from servesim.measured.replay import replay

    before = float(np.nanmean(np.abs(rep.ttft - run.ttft))) * 1e3
    lat = per = 0.0
    fitted = rep
    for _ in range(FIT_ROUNDS):  # a front end moves the arrivals, and so the engine's queueing: refit on the gaps left
        d_lat, d_per = fit_frontend(run.ttft - fitted.ttft, run.input_lens, floor=(-lat, -per))
        lat, per = lat + d_lat, per + d_per
        fitted = replay(run, replace(cfg, frontend_latency=lat, frontend_latency_per_token=per), policy, cost,
                        sends="measured")
        if abs(d_lat) < 1e-7 and abs(d_per) < 1e-10:
            break
    after = float(np.nanmean(np.abs(fitted.ttft - run.ttft))) * 1e3
    print(f"front end fitted to the TTFT gaps: {lat * 1e3:.3f} ms a request + {per * 1e6:.3f} us a prompt token "
          f"(mean |TTFT gap| {before:.2f} -> {after:.2f} ms); use: --frontend-latency-ms {lat * 1e3:.4g} "
          f"--frontend-latency-per-token-us {per * 1e6:.4g}")
    return fitted, {"frontend_latency_ms": lat * 1e3, "frontend_latency_per_token_us": per * 1e6,
                    "mean_abs_ttft_gap_ms": {"engine_core": before, "with_frontend": after}}


def refuse_load(opts: SimOptions, command: str) -> None:
    """The run file sends the load: every load option is refused."""
    from servesim.cli.analysis import VLLM_BENCH_LOAD

    given = [flag for name, flag in VLLM_BENCH_LOAD.items() if getattr(opts, name) is not None]
    if opts.request_rate is not None:
        given.append("--request-rate")
    if opts.burstiness != 1.0:
        given.append("--burstiness")
    if opts.workload != "seed":
        given.append("--workload")
    if opts.client != "vllm-bench":
        given.append("--client")
    if given:
        raise ConfigError(f"{given[0]}: {command} replays the run's own load (its lengths, sends and client); drop it")
    opts.no_cluster(command)


def deployment(opts: SimOptions, run, policy: str | None) -> tuple[SimOptions, str, dict]:
    """The options with what the file says where an option is not given; (options, policy, what was taken)."""
    from servesim.cost.specs import builtin_for_hf_id, builtin_models
    from servesim.engines.registry import engine_for

    meta, taken = dict(run.deployment), {}
    opts = replace(opts, workload=str(run.path))  # (not a lesson workload: none of the lesson's settings)
    toy = any(v is not None for v in (opts.decode_ms, opts.prefill_token_ms, opts.overhead_ms))
    if opts.cost == "auto":
        opts = replace(opts, cost="toy" if toy else "roofline")
    if "model" not in meta and run.model_id:  # (servesim's own files name a built-in)
        found = run.model_id if run.model_id in builtin_models() else builtin_for_hf_id(run.model_id)
        if found:
            meta["model"] = found
    roofline_keys = ("model", "gpu", "tp", "quantization", "kv_cache_dtype")
    for key in FROM_FILE:
        if opts.cost == "toy" and key in roofline_keys:  # (the toy cost times steps from tokens alone)
            continue
        if key in meta and getattr(opts, key) is None:
            value = meta[key]
            if key in ("tp", "max_num_seqs", "max_num_batched_tokens"):
                if not value.isdigit() or int(value) < 1:
                    raise ConfigError(f"{run.path}: {key}: got {value!r}; expected an integer >= 1")
                value = int(value)
            opts = replace(opts, **{key: value})
            taken[key] = value
    if opts.model is None and opts.cost == "roofline":
        raise ConfigError(f"{run.path}: model {run.model_id!r} is not a servesim model; give --model (a built-in "
                          "name or the model's config.json)")
    if policy is None:
        policy = meta.get("engine", "vllm")
        if "engine" in meta:
            taken["engine"] = policy
    engine_for(policy)  # (an unknown policy: refused here, naming the choices)
    return opts, policy, taken


def request_rows(run, rep) -> list[dict]:
    """Per request: the measured and predicted TTFT and decode (ms), the predicted queue and prefill, and which
    of TTFT and decode parts more (in ms)."""
    rows = []
    m_decode, p_decode = run.e2el - run.ttft, rep.decode
    t0 = None if run.send is None else float(run.send.min())
    for i in range(len(run)):
        d_ttft, d_dec = (rep.ttft[i] - run.ttft[i]) * 1e3, (p_decode[i] - m_decode[i]) * 1e3
        rows.append({"index": i, "send_s": None if t0 is None else float(run.send[i]) - t0,
                     "input_len": int(run.input_lens[i]), "output_len": int(run.output_lens[i]),
                     "ttft_ms": float(run.ttft[i] * 1e3), "predicted_ttft_ms": float(rep.ttft[i] * 1e3),
                     "predicted_queue_ms": float(rep.queue[i] * 1e3),
                     "predicted_prefill_ms": float(rep.prefill[i] * 1e3),
                     "decode_ms": float(m_decode[i] * 1e3), "predicted_decode_ms": float(p_decode[i] * 1e3),
                     "e2el_error_pct": float((rep.e2el[i] - run.e2el[i]) / run.e2el[i] * 100),
                     "diverges_in": _parts(d_ttft, d_dec)})
    return rows


def _parts(d_ttft: float, d_decode: float) -> str:
    """Which part is farther off (ms): "ttft", "decode", or "-" when both agree to a microsecond."""
    if max(abs(d_ttft), abs(d_decode)) < 1e-3:
        return "-"
    return "ttft" if abs(d_ttft) >= abs(d_decode) else "decode"


def mean_rows(run, rep) -> dict:
    return {m: {"measured": run.means[m], "predicted": rep.means.get(m),
                "error_pct": None if rep.means.get(m) is None or run.means[m] == 0
                else (rep.means[m] - run.means[m]) / run.means[m] * 100}
            for m in METRIC_LABELS if m in run.means}


def _print(run, rep, rows: list[dict], worst: int) -> None:
    from rich.table import Table

    from servesim.cli.term import LazyConsole

    console = LazyConsole()
    how = ("at the file's send times" if rep.sends == "measured" else
           "as the client sends (the file has no send times)")
    print(f"{run.path.name}: {len(run)} requests ({run.failed} failed, left out), {run.client}, sent {how}")
    t = Table(title="means, the client's definitions", title_justify="left")
    for col in ("metric", "measured", "servesim", "error"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m, row in mean_rows(run, rep).items():
        err = "-" if row["error_pct"] is None else f"{row['error_pct']:+.1f} %"
        pred = "-" if row["predicted"] is None else f"{row['predicted']:.2f}"
        t.add_row(METRIC_LABELS[m], f"{row['measured']:.2f}", pred, err)
    console.print(t)
    _gaps(rows)
    if worst:
        _worst(rows, worst)


def _gaps(rows: list[dict]) -> None:
    """Where the gap is, over all requests: TTFT (its predicted split) and decode, signed means in ms."""
    d_ttft = np.mean([r["predicted_ttft_ms"] - r["ttft_ms"] for r in rows])
    d_dec = np.nanmean([r["predicted_decode_ms"] - r["decode_ms"] for r in rows])
    queue, prefill = (np.mean([r[k] for r in rows]) for k in ("predicted_queue_ms", "predicted_prefill_ms"))
    n_ttft, n_dec = (sum(r["diverges_in"] == k for r in rows) for k in ("ttft", "decode"))
    print(f"servesim - measured, mean per request: TTFT {d_ttft:+.2f} ms (predicted queue {queue:.2f} + prefill "
          f"{prefill:.2f} ms), decode {d_dec:+.2f} ms; farther off in TTFT: {n_ttft}, in decode: {n_dec} of "
          f"{len(rows)} requests")


def _worst(rows: list[dict], worst: int) -> None:
    order = sorted(rows, key=lambda r: -abs(r["e2el_error_pct"]))[:worst]
    print(f"the {len(order)} requests farthest apart (E2EL), ms; pred: servesim's")
    print(f"{'#':>5} {'sent s':>8} {'in':>6} {'out':>5} {'TTFT':>7} {'pred':>7} {'queue':>6} {'prefill':>7} "
          f"{'decode':>7} {'pred':>7} {'E2EL':>7}  parts")
    for r in order:
        sent = "-" if r["send_s"] is None else f"{r['send_s']:.3f}"
        print(f"{r['index']:>5} {sent:>8} {r['input_len']:>6} {r['output_len']:>5} {r['ttft_ms']:>7.1f} "
              f"{r['predicted_ttft_ms']:>7.1f} {r['predicted_queue_ms']:>6.1f} {r['predicted_prefill_ms']:>7.1f} "
              f"{r['decode_ms']:>7.0f} {r['predicted_decode_ms']:>7.0f} {r['e2el_error_pct']:>+6.1f}%  "
              f"{r['diverges_in']}")


def _print_steps(d: dict) -> None:
    """The per-step diff (`servesim.measured.engine_log.step_diff`)."""
    print(f"steps: {d['logged_steps']:,} logged, {d['servesim_steps']:,} in servesim; the schedules agree for the "
          f"first {d['steps_agreeing']:,}")
    if "first_difference" in d:
        f = d["first_difference"]
        print(f"  step {f['step']}: logged {f['logged'][0]} context requests, {f['logged'][1]} context tokens, "
              f"{f['logged'][2]} generation requests; servesim {f['servesim'][0]}, {f['servesim'][1]}, "
              f"{f['servesim'][2]}")
    for kind in ("decode_only", "with_prefill"):
        k = d[kind]
        real = "-" if k["logged_mean_ms"] is None else f"{k['logged_mean_ms']:.2f}"
        sim = "-" if k["servesim_mean_ms"] is None else f"{k['servesim_mean_ms']:.2f}"
        print(f"  {kind.replace('_', ' ')} steps: {k['logged_steps']:,} logged, mean {real} ms (vLLM's elapsed: "
              f"the model's step); servesim {k['servesim_steps']:,}, mean {sim} ms")
