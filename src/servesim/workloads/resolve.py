"""`--workload NAME|PATH|random` and its options, to one request table.

The pipeline, in order: load (a built-in, a file, or `random` lengths) -> time window -> sample N -> synthetic
arrivals (when a request rate is given) -> rate scaling -> cap at max_model_len.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from servesim.engine.request import Request
from servesim.errors import WorkloadError
from servesim.workloads.builtin import BUILTIN_WORKLOADS, builtin_table
from servesim.workloads.loaders import load_trace
from servesim.workloads.synthetic import (
    ClosedLoop,
    LengthDist,
    RampUp,
    arrival_times,
    parse_length,
    ramp_up_arrival_times,
    synthetic_lengths,
)
from servesim.workloads.table import MAX_SYNTHETIC_REQUESTS, RequestTable
from servesim.workloads.transforms import cap_lengths, sample, scale_rate, time_window

RANDOM = "random"  # vllm bench serve's --dataset-name for synthetic lengths
DEFAULT_NUM_REQUESTS = 1000  # vllm bench serve --num-prompts
DEFAULT_PROMPT_LEN, DEFAULT_OUTPUT_LEN = "1024", "128"  # vllm bench serve --random-input-len / --random-output-len


class WorkloadWarning(UserWarning):
    """Loading changed the workload: requests dropped, sorted, sampled or capped. The message says how many."""


def load_table(
    spec: str,
    *,
    format: str | None = None,
    columns: str | None = None,
    time_unit: str | None = None,
    trace_model: str | None = None,
    log_type: str | None = None,
    keep_failed: bool = False,
) -> RequestTable:
    """A built-in name or a trace file, as loaded (no transforms)."""
    if spec in BUILTIN_WORKLOADS:
        if format or columns:
            raise WorkloadError(f"--format/--columns describe files; {spec!r} is a built-in workload")
        return builtin_table(spec)
    path = Path(spec)
    if path.is_dir():
        raise WorkloadError(f"{spec}: is a directory; expected a trace file, a built-in workload or {RANDOM!r}")
    if path.exists() and not path.is_file():
        raise WorkloadError(f"{spec}: not a regular file (a device, FIFO or socket); expected a trace file, a "
                            f"built-in workload or {RANDOM!r}")
    if not path.is_file():
        raise WorkloadError(
            f"{spec}: no such file, and not a built-in workload "
            f"(built-ins: {', '.join(sorted(BUILTIN_WORKLOADS))}; or {RANDOM!r} for synthetic lengths)"
        )
    return load_trace(path, format, columns, time_unit, trace_model, log_type, keep_failed)


def make_table(
    spec: str,
    *,
    format: str | None = None,
    columns: str | None = None,
    time_unit: str | None = None,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    num_requests: int | None = None,
    prompt_len: str | None = None,
    output_len: str | None = None,
    window: tuple[float, float] | None = None,
    rate_scale: float | None = None,
    max_model_len: int | None = None,
    seed: int = 0,
    trace_model: str | None = None,
    log_type: str | None = None,
    keep_failed: bool = False,
    ramp_up: RampUp | None = None,
) -> RequestTable:
    """The whole pipeline. `spec` `random` makes `num_requests` (default 1000) synthetic requests with lengths
    from `prompt_len`/`output_len` (default 1024/128, as `vllm bench serve --dataset-name random`); a length-only
    file needs `request_rate`. `request_rate` replaces any file's arrivals with `vllm bench serve`'s process, as
    does `ramp_up` (its `--ramp-up-strategy`), which takes the place of `request_rate`."""
    if seed < 0:
        raise WorkloadError(f"--seed: got {seed}; expected an integer >= 0")
    # only when something is drawn: numpy.random alone takes ~0.015 s to import, more than loading a small trace
    if ramp_up is not None and request_rate is not None and not math.isinf(request_rate):
        raise WorkloadError(f"--request-rate {request_rate:g} and --ramp-up-strategy {ramp_up.strategy}: the ramp "
                            "sets the rate (vllm bench serve: do not specify --request-rate); drop --request-rate")
    drawn = spec == RANDOM or num_requests is not None or request_rate is not None or ramp_up is not None
    rng = np.random.default_rng(seed) if drawn else None
    if spec == RANDOM:
        n = DEFAULT_NUM_REQUESTS if num_requests is None else num_requests
        if window is not None:
            raise WorkloadError(f"--window selects part of a trace; --workload {RANDOM} has no trace to cut")
        if not 1 <= n <= MAX_SYNTHETIC_REQUESTS:
            raise WorkloadError(
                f"--num-requests: got {n:,}; expected from 1 to {MAX_SYNTHETIC_REQUESTS:,} synthetic requests "
                "(servesim's limit: each takes memory before anything runs)"
            )
        p, o = synthetic_lengths(
            length_dist(prompt_len or DEFAULT_PROMPT_LEN, "--prompt-len"),
            length_dist(output_len or DEFAULT_OUTPUT_LEN, "--output-len"),
            n,
            rng,
        )
        table = RequestTable(np.zeros(n), p, o)
        if request_rate is None and ramp_up is None:
            table = table.with_note("no --request-rate: all requests arrive at once (rate inf)")
            request_rate = math.inf
    else:
        if prompt_len or output_len:
            raise WorkloadError(f"--prompt-len/--output-len make synthetic lengths: use --workload {RANDOM}")
        table = load_table(
            spec,
            format=format,
            columns=columns,
            time_unit=time_unit,
            trace_model=trace_model,
            log_type=log_type,
            keep_failed=keep_failed,
        )
        if not table.has_arrivals and request_rate is None and ramp_up is None:
            raise WorkloadError(f"{spec}: has lengths but no arrival times; give --request-rate (inf: all at once)")
        if window is not None:
            table = time_window(table, *window)
        if num_requests is not None:
            table = sample(table, num_requests, rng)
    table = send_times(table, spec != RANDOM, request_rate, burstiness, ramp_up, rng)
    if rate_scale is not None:
        table = scale_rate(table, rate_scale)
    if max_model_len is not None:
        table = cap_lengths(table, max_model_len)
    return table


def send_times(table: RequestTable, replaces: bool, request_rate: float | None, burstiness: float,
               ramp_up: RampUp | None, rng: np.random.Generator | None) -> RequestTable:
    """`vllm bench serve`'s send times in place of the table's arrivals: on `ramp_up`'s ramp, else at
    `request_rate` (None: the table's own). `replaces`: the table's arrivals came from a file (noted)."""
    if ramp_up is not None:
        note = (f"arrival times replaced: --ramp-up-strategy {ramp_up.strategy} from {ramp_up.start_rps:g} to "
                f"{ramp_up.end_rps:g} requests/s")
        t = ramp_up_arrival_times(len(table), ramp_up, burstiness, rng)
    elif request_rate is not None:
        note = f"arrival times replaced: --request-rate {request_rate:g}, --burstiness {burstiness:g}"
        t = arrival_times(len(table), request_rate, burstiness, rng)
    else:
        return table
    if table.has_arrivals and replaces:
        table = table.with_note(note)
    return replace(table, arrival_time=t, has_arrivals=True)


def length_dist(spec: str, option: str) -> LengthDist:
    dist = parse_length(spec, option)
    if dist.kind != "empirical":
        return dist
    table = load_table(dist.source)
    values = table.prompt_len if option == "--prompt-len" else table.output_len
    return replace(dist, values=values)


def make_closed_loop(spec: str, users: int, think_time: float = 0.0, **options: object) -> ClosedLoop:
    """`users` concurrent users with `think_time` seconds between a response and their next request. The other
    options (lengths, sampling, capping) are `make_table`'s; arrival options make no sense here."""
    if options.get("request_rate") is not None or options.get("rate_scale") is not None:
        raise WorkloadError("--request-rate/--rate-scale set open-loop arrivals; a closed loop's come from --users")
    return ClosedLoop(users, think_time, make_table(spec, **options))  # type: ignore[arg-type]


def load_workload(spec: str, **options: object) -> list[Request]:
    """Resolve a built-in name, a trace file or `random` into requests sorted by arrival.

    Options are `make_table`'s. What loading changed (dropped, sorted, capped) is emitted as `WorkloadWarning`s.
    """
    table = make_table(spec, **options)  # type: ignore[arg-type]
    for note in table.notes:
        warnings.warn(f"{spec}: {note}", WorkloadWarning, stacklevel=2)
    return table.to_requests()
