"""The iteration loop: arrivals in, the policy picks the step's work, the cost model times it, the clock moves.

One clock in seconds. At time `now` every request with `arrival_time <= now` joins the queue; the policy
schedules; the step lasts `cost.step_time(shape)` (plus any swap traffic); a chunk that reaches the end of a
request's known tokens samples one token at the step's end; the step that samples a request's last token
finishes it. When nothing can run, the clock jumps to the next arrival. No randomness, no wall clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from servesim.cost import CostModel, StepShape, get_cost_model
from servesim.engine.config import EngineConfig
from servesim.engine.fastpath import DecodeCohort, Stretch, plan_stretch, step_duration
from servesim.engine.records import Kind, ScheduledEntry, StepRecord, TokenClock
from servesim.engine.request import Request, RequestState, RequestStatus
from servesim.engine.resolve import resolve_config
from servesim.engine.result import SimResult
from servesim.engine.steplog import StepLog
from servesim.engine.timelines import FLOAT_COLUMNS, INT_COLUMNS, Timelines
from servesim.errors import ConfigError
from servesim.policies import make_scheduler

RECORD_LEVELS = ("full", "steps", "summary")


def simulate(
    requests: Sequence[Request],
    config: EngineConfig | None = None,
    policy: str = "vllm",
    cost: CostModel | str = "toy",
    record: str = "full",
    check_invariants: bool = False,
    fast: bool = True,
    progress: Callable[[float, int, int, int], None] | None = None,
    sink: Callable[[StepRecord], None] | None = None,
) -> SimResult:
    """Run `requests` through `policy` and return step records, per-request timelines and preemptions.

    `record`: "full" keeps every step record with the reason each waiting request got nothing; "steps" keeps the
    records without reasons; "summary" keeps only compact per-step arrays (`SimResult.step_log`).
    `fast`: advance the decoding requests in aggregate and plan steady stretches of steps at once
    (`servesim.engine.fastpath`); the result is the same as step by step (`fast=False`).
    `progress(now, finished, total, waiting)` is called every few thousand iterations (for a progress bar).
    `sink`: each step record (at record "full" or "steps") goes to it instead of into the result, so a large run
    can stream its records to disk (`servesim.export.parquet.ParquetRecords`) without holding them.
    """
    if record not in RECORD_LEVELS:
        raise ConfigError(f"unknown record level {record!r}; valid: {', '.join(RECORD_LEVELS)}")
    cost_model = get_cost_model(cost) if isinstance(cost, str) else cost
    cfg = resolve_config(config or EngineConfig(), policy, requests, cost_model)
    sched = make_scheduler(policy, cfg, explain=record == "full")
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_time, i))
    states = [RequestState(requests[i], i) for i in order]
    swap_seconds_per_block = cfg.block_size * cfg.kv_bytes_per_token / cfg.pcie_bandwidth
    fast = fast and not cfg.async_scheduling and not check_invariants

    steps: list[StepRecord] = []
    emit = steps.append if sink is None else sink
    log = StepLog()
    preemptions = []
    kv, running = sched.kv, sched.running
    # the running requests' decoding prefix, advanced in aggregate (fast path only)
    cohort = DecodeCohort(cfg.block_size, grows=not sched.reserves_lifetime_kv)
    aggregate = hasattr(cost_model, "step_time_with_decodes") and hasattr(cost_model, "decode_stretch")
    now, step, nxt, n_done = 0.0, 0, 0, 0
    arrivals: list[str] = []
    release: list[RequestState] = []  # async scheduling: finished, blocks and seat come back after next step
    ticks, total, keep_records = 0, len(states), record != "summary"
    arrival_times = [s.request.arrival_time for s in states] + [None]  # None: no more arrivals
    while n_done < total or release:  # async: the last seats come back in one more step
        ticks += 1
        if progress is not None and not ticks & 4095:
            progress(now, n_done, total, len(sched.waiting) + len(sched.swapped))
        while nxt < total and arrival_times[nxt] <= now:
            sched.add_request(states[nxt])
            if keep_records:
                arrivals.append(states[nxt].request_id)
            nxt += 1
        next_arrival = arrival_times[nxt]

        n = cohort.n
        g = cohort.growth(step) if n else 0
        if n and ((kv.free_blocks is not None and g > kv.free_blocks)
                  or (cfg.policy == "priority" and n < len(running))):
            # the cohort's blocks do not fit (schedule() picks victims among everyone), or a priority victim
            # could be a member: bring everyone up to date and schedule step by step
            cohort.leave_all(running, step)
            n = g = 0
        contexts = None if aggregate or not n else cohort.contexts(running, step)
        out = None
        if n and n == len(running) and not len(sched.waiting) and not sched.swapped:
            plan = plan_stretch(cohort, kv.free_blocks, cost_model, step, now, next_arrival, contexts)
        else:
            plan = None
            if kv.free_blocks is not None:
                kv.free_blocks -= g
            sched.step_index = step
            out = sched.schedule(n)
            if not n and not out.scheduled and not out.preempted and not release:
                if next_arrival is None:
                    raise RuntimeError(f"no request can run at t={now} and none will arrive (a servesim bug)")
                now = max(now, next_arrival)
                continue
            if (n == len(running) and not out.scheduled and not out.preempted and not out.swap_in_blocks
                    and record != "full"):
                # the queue is blocked (seats, budget or blocks) and stays so until a member finishes or a
                # request arrives: a stretch as above (full records go step by step for the reasons)
                if kv.free_blocks is not None:
                    kv.free_blocks += g
                plan = plan_stretch(cohort, kv.free_blocks, cost_model, step, now, next_arrival, contexts)
                if plan is None or plan.k == 1:
                    plan = None
                    if kv.free_blocks is not None:
                        kv.free_blocks -= g
        if plan is not None:
            while plan is not None:
                n_done += _advance(plan, sched, cohort, step, tuple(arrivals), record, emit, log, contexts)
                step += plan.k
                now = plan.end
                arrivals = []
                # the next stretch follows at once while the cohort alone runs, nobody waits or has arrived
                n = cohort.n
                if (out is not None or not n or n != len(running)
                        or (next_arrival is not None and next_arrival <= now)
                        or (kv.free_blocks is not None and cohort.growth(step) > kv.free_blocks)):
                    break
                contexts = None if aggregate else cohort.contexts(running, step)
                plan = plan_stretch(cohort, kv.free_blocks, cost_model, step, now, next_arrival, contexts)
            continue

        free_after_schedule = kv.free_blocks
        # the step's shape and duration: the cohort's n decodes first, then what schedule() chose
        sched_items = list(out.scheduled.items())
        new_tokens, context, decode = [], [], []
        num_sampled = num_prefill = num_decodes = 0
        for s, k in sched_items:
            new_tokens.append(k)
            context.append(s.num_computed_tokens)
            decode.append(s.sampled_since_admission)
            if s.sampled_since_admission:
                num_decodes += 1
            else:
                num_prefill += k
            if s.num_computed_tokens + k == s.request.prompt_len + s.num_output_tokens:  # reaches num_tokens
                num_sampled += 1
        rest = StepShape(tuple(new_tokens), tuple(context), tuple(decode), num_sampled)
        swap_time = (out.swap_in_blocks + out.swap_out_blocks) * swap_seconds_per_block
        duration = step_duration(cost_model, n, cohort.base + n * step, rest, contexts) + swap_time
        end = now + duration

        entries = []
        if record != "summary":
            if n:
                entries = _cohort_entries(running[:n], contexts or cohort.contexts(running, step), cfg.block_size,
                                          cohort.grows)
            entries += [
                ScheduledEntry(
                    s.request_id, k, Kind.DECODE if s.sampled_since_admission else Kind.PREFILL,
                    s.num_computed_tokens, s.num_tokens, s in out.resumed,
                    s.num_computed_tokens + k == s.num_tokens, s.num_blocks,
                )
                for s, k in sched_items
            ]

        # run it: advance computed tokens, sample, finish
        observed = []
        if release:  # async scheduling: last step's finishes give back their blocks and seats now
            observed = [s.request_id for s in release]
            for s in release:
                sched.finish(s)
            release = []
        finished: list[str] = []
        if n and cohort.heap[0][0] <= step:
            done = cohort.finishing(step)
            if done:
                if record != "summary":  # in running order, as a step-by-step run lists them
                    ids = {s.request_id for s in done}
                    finished = [s.request_id for s in running[:n] if s.request_id in ids]
                for s in done:
                    s.finish_time = end
                    sched.finish(s)
                n_done += len(done)
        for s in out.preempted:
            s.preempted_at = now
        for s, k in sched_items:
            if s.first_scheduled_time is None:
                s.first_scheduled_time = now
            if not s.sampled_since_admission:
                s.num_prefill_chunks += 1
            if s.preempted_at is not None:
                s.time_preempted += now - s.preempted_at
                s.preempted_at = None
            s.num_computed_tokens += k
            if s.num_computed_tokens == s.request.prompt_len + s.num_output_tokens:  # reached num_tokens: sample
                s.num_output_tokens += 1
                s.sampled(step)
                s.sampled_since_admission = True
                if s.num_output_tokens == s.request.output_len:
                    s.finish_time = end
                    finished.append(s.request_id)
                    n_done += 1
                    if cfg.async_scheduling:
                        s.status = RequestStatus.FINISHED
                        release.append(s)
                    else:
                        sched.finish(s)
        preemptions.extend(out.preemptions)
        if check_invariants:
            _check(sched, states, out, cfg)
        num_waiting = len(sched.waiting) + len(sched.swapped)
        log.add(now, duration, n + len(sched_items), n + sum(new_tokens), num_prefill, n + num_decodes,
                free_after_schedule, len(running), num_waiting, len(out.preempted))
        if record != "summary":
            emit(StepRecord(
                step=step, start_time=now, duration=duration, arrivals=tuple(arrivals),
                scheduled=tuple(entries), preempted=tuple(s.request_id for s in out.preempted),
                finished=tuple(finished), waiting=tuple(out.waiting),
                num_running_after=len(running), num_waiting_after=num_waiting,
                free_blocks_after_schedule=free_after_schedule, free_blocks_after_step=kv.free_blocks,
                token_budget=cfg.max_num_batched_tokens, swap_in_blocks=out.swap_in_blocks,
                swap_out_blocks=out.swap_out_blocks, finished_observed=tuple(observed),
            ))
        arrivals = []
        now = end
        step += 1
        if fast:
            cohort.absorb(running, step)

    step_log = log.freeze(cfg.usable_blocks)
    clock = TokenClock(step_log.end_time)  # the same floats as each step's `end`
    cohort.heap.clear()
    timelines = _timelines(states, clock)
    return SimResult(policy, cost_model.name, cfg, tuple(steps), timelines, tuple(preemptions),
                     step_log, record)


def _timelines(states: list[RequestState], clock: TokenClock) -> Timelines:
    """The requests' timelines as columns, in workload order; each state goes as its row is read (a million
    requests never hold both)."""
    order = sorted(range(len(states)), key=lambda i: states[i].index)
    nan = float("nan")
    ids, cols, lengths, runs = [], {name: [] for name in (*FLOAT_COLUMNS, *INT_COLUMNS)}, [], []
    arrival, first, finish, preempted = (cols[c] for c in FLOAT_COLUMNS)
    prompt, output, priority, num_preemptions, chunks = (cols[c] for c in INT_COLUMNS)
    for i in order:
        s, states[i] = states[i], None
        r = s.request
        ids.append(r.request_id)
        arrival.append(r.arrival_time)
        first.append(nan if s.first_scheduled_time is None else s.first_scheduled_time)
        finish.append(nan if s.finish_time is None else s.finish_time)
        preempted.append(s.time_preempted)
        prompt.append(r.prompt_len)
        output.append(r.output_len)
        priority.append(r.priority)
        num_preemptions.append(s.num_preemptions)
        chunks.append(s.num_prefill_chunks)
        lengths.append(len(s.token_runs))
        runs += s.token_runs
    return Timelines.from_lists(ids, cols, lengths, runs, clock)


def _cohort_entries(members: list[RequestState], contexts: list[int], block_size: int,
                    grows: bool) -> list[ScheduledEntry]:
    """The records' entries of the cohort's one-token decodes in a step (members before it, `contexts` each)."""
    return [ScheduledEntry(s.request_id, 1, Kind.DECODE, c, c + 1, False, True,
                           -(-(c + 1) // block_size) if grows else s.num_blocks)
            for s, c in zip(members, contexts)]


def _advance(plan: Stretch, sched, cohort: DecodeCohort, first_step: int, arrivals: tuple[str, ...], record: str,
             emit: Callable[[StepRecord], None], log: StepLog, contexts: list[int] | None) -> int:
    """Apply a stretch: the cohort alone decodes for k steps; returns how many finished in its last step."""
    k, n, kv = plan.k, cohort.n, sched.kv
    num_waiting = len(sched.waiting) + len(sched.swapped)
    free_after = plan.free_after
    if free_after is None:
        free_after = [-1] * k
    else:
        kv.free_blocks = free_after[-1]  # nobody frees blocks before the last step's finishes
    last = first_step + k - 1
    if record != "summary":
        members = sched.running[:n]
        ctx = contexts or cohort.contexts(sched.running, first_step)
        _stretch_records(plan, sched, members, ctx, cohort, first_step, arrivals, emit, free_after, num_waiting)
    done = cohort.finishing(last) if cohort.heap[0][0] <= last else ()
    end = plan.end
    for s in done:
        s.finish_time = end
        sched.finish(s)
    log.extend(plan.times, plan.durations, n, free_after, n - len(done), num_waiting)
    return len(done)


def _stretch_records(plan: Stretch, sched, members: list[RequestState], contexts: list[int], cohort: DecodeCohort,
                     first_step: int, arrivals: tuple[str, ...], emit: Callable[[StepRecord], None],
                     free_after: list[int], num_waiting: int) -> None:
    """The step records a step-by-step run would have written for the stretch."""
    k, n, bs = plan.k, len(members), cohort.block_size
    unlimited = sched.kv.free_blocks is None
    ids = [s.request_id for s in members]
    last = [s.request.output_len - s.num_output_tokens - (first_step - s.decoding_since) == k for s in members]
    waiting = ()
    for j in range(k):
        entries = tuple(_cohort_entries(members, [c + j for c in contexts], bs, cohort.grows))
        fin = tuple(ids[i] for i in range(n) if last[i]) if j == k - 1 else ()
        freed = sum(e.num_blocks for e, done in zip(entries, last) if done) if fin else 0
        free = None if unlimited else free_after[j]
        emit(StepRecord(
            step=first_step + j, start_time=plan.times[j], duration=plan.durations[j],
            arrivals=arrivals if j == 0 else (), scheduled=entries, preempted=(), finished=fin, waiting=waiting,
            num_running_after=n - len(fin), num_waiting_after=num_waiting,
            free_blocks_after_schedule=free, free_blocks_after_step=None if free is None else free + freed,
            token_budget=sched.config.max_num_batched_tokens,
        ))


def _check(sched, states: list[RequestState], out, cfg: EngineConfig) -> None:
    """Invariants after every step (used by the property tests): budget, KV books, queue membership."""
    assert sum(out.scheduled.values()) <= cfg.max_num_batched_tokens, "token budget exceeded"
    assert len(sched.running) <= cfg.max_num_seqs, "more running than max_num_seqs"
    held = sum(s.num_blocks for s in states)
    if sched.kv.usable_blocks is not None:
        assert 0 <= sched.kv.free_blocks <= sched.kv.usable_blocks, "KV over-allocated"
        assert sched.kv.free_blocks + held == sched.kv.usable_blocks, "free + held != usable"
    for s in states:
        assert 0 <= s.num_computed_tokens <= s.num_tokens, f"{s.request_id}: computed beyond known tokens"
        assert s.num_output_tokens <= s.request.output_len, f"{s.request_id}: too many outputs"
        if s.status is not RequestStatus.RUNNING and s.status is not RequestStatus.FINISHED:
            assert s.num_blocks == 0, f"{s.request_id}: holds GPU blocks while not running"
