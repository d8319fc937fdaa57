"""The iteration loop: arrivals in, the policy picks the step's work, the cost model times it, the clock moves.

One clock in seconds. At time `now` every request with `arrival_time <= now` joins the queue; the policy
schedules; the step lasts `cost.step_time(shape)` (plus any swap traffic); a chunk that reaches the end of a
request's known tokens samples one token at the step's end; the step that samples a request's last token
finishes it. When nothing can run, the clock jumps to the next arrival. No randomness, no wall clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from heapq import heappop, heappush

from servesim.cost import CostModel, StepShape, get_cost_model
from servesim.engine.fastpath import FastPath, StepByStep
from servesim.engine.frontend import delay
from servesim.engine.records import Kind, ScheduledEntry, StepRecord, TokenClock
from servesim.engine.request import Request, RequestState, RequestStatus
from servesim.engine.resolve import fit_to_max_model_len, resolve_config, too_long
from servesim.engine.result import PrefixCacheStats, SimResult
from servesim.engine.scheduler import Scheduler, SchedulerOutput
from servesim.engine.speculation import verified
from servesim.engine.steplog import StepLog
from servesim.engine.timelines import timelines_from_states
from servesim.engine.token_runs import LiveSteps
from servesim.engines.config import EngineConfig, speculating
from servesim.engines.registry import DEFAULT_POLICY, make_scheduler, policy_class
from servesim.errors import ConfigError

RECORD_LEVELS = ("full", "steps", "summary")


def simulate(
    requests: Sequence[Request],
    config: EngineConfig | None = None,
    policy: str = DEFAULT_POLICY,
    cost: CostModel | str = "toy",
    record: str = "full",
    check_invariants: bool = False,
    fast: bool = True,
    progress: Callable[[float, int, int, int], None] | None = None,
    sink: Callable[[StepRecord], None] | None = None,
    max_records: int | None = None,
) -> SimResult:
    """Run `requests` through `policy` and return step records, per-request timelines and preemptions.

    `record`: "full" keeps every step record with the reason each waiting request got nothing; "steps" keeps the
    records without reasons; "summary" keeps only compact per-step arrays (`SimResult.step_log`).
    `fast`: advance the decoding requests in aggregate and plan steady stretches of steps at once
    (`servesim.engine.fastpath`); the result is the same as step by step (`fast=False`).
    `progress(now, finished, total, waiting)` is called every few thousand iterations (for a progress bar).
    `sink`: each step record (at record "full" or "steps") goes to it instead of into the result, so a large run
    can stream its records to disk (`servesim.export.parquet.ParquetRecords`) without holding them.
    `max_records`: keep the records of the first N steps only (a trace's first rows), then run as at "summary":
    the step log and timelines still cover every step.
    """
    if record not in RECORD_LEVELS:
        raise ConfigError(f"unknown record level {record!r}; valid: {', '.join(RECORD_LEVELS)}")
    check_requests(requests)
    cost_model = get_cost_model(cost) if isinstance(cost, str) else cost
    if config is not None and speculating(config):  # the drafter priced in (its module imported only then)
        from servesim.cost.speculative import with_drafter

        cost_model = with_drafter(cost_model, config)
    layout = getattr(cost_model, "layout", None)
    if layout is not None and layout.dp > 1:  # data-parallel ranks: one engine each (`servesim.cluster.dp`)
        from servesim.cluster.dp import simulate_dp

        if sink is not None or max_records is not None:  # (a progress bar is not drawn over the ranks)
            raise ConfigError("data-parallel ranks: their step records are each rank's; a trace, a sink or "
                              "max_records over them is not modelled yet (run, report and validate are)")
        return simulate_dp(requests, config or EngineConfig(), policy, cost_model, record, check_invariants, fast)
    cfg = resolve_config(config or EngineConfig(), policy, requests, cost_model)
    if max_records is not None and max_records < 0:
        raise ConfigError(f"max_records must be >= 0, got {max_records}")
    front = cfg.frontend_latency > 0 or cfg.frontend_latency_per_token > 0
    # each request reaches the engine the front end's time after its send (`servesim.engine.frontend`); under a
    # client cap the engine adds it at each send (`Engine.at_client`): the cap counts sends, in the client's order
    if front and cfg.max_concurrency is None:
        requests = [replace(r, arrival_time=r.arrival_time + delay(cfg, r.prompt_len)) for r in requests]
    engine = Engine(requests, cfg, policy, cost_model, record, sink, max_records,
                    fast=fast and not cfg.async_scheduling and not check_invariants, check_invariants=check_invariants)
    engine.run(progress)
    result = engine.result()
    if front:  # every metric counts from the send, as the client measures (a request refused on arrival: sent)
        t = result.timelines
        refused = set(result.rejected) if cfg.max_concurrency is not None else ()
        sent = [i not in refused for i in t.ids] if refused else 1.0
        t.arrival_time = t.arrival_time - delay(cfg, t.prompt_len) * sent
    return result


class Engine:
    """One run's state between iterations: the scheduler and its queues, the clock, the records written so far."""

    __slots__ = ("policy", "config", "cost", "sched", "kv", "running", "record", "keep_records", "reasons", "steps",
                 "emit", "records_left",
                 "log", "live", "fast", "states", "rejected", "clamped", "arriving", "arrival_times", "nxt",
                 "next_arrival", "now",
                 "step", "n_done", "arrivals",
                 "release", "preemptions", "swap_seconds_per_block", "check_invariants", "stall", "_sink", "followers",
                 "pending", "num_served", "until", "max_concurrency", "in_flight", "backlog", "passed", "in_order",
                 "at_client",
                 "free_since",
                 "shift")

    def __init__(self, requests: Sequence[Request], cfg: EngineConfig, policy: str, cost: CostModel, record: str,
                 sink: Callable[[StepRecord], None] | None, max_records: int | None, fast: bool,
                 check_invariants: bool, hashed: bool | None = None) -> None:
        self.policy, self.config, self.cost, self.record = policy, cfg, cost, record
        # prefix caching acts on requests with block identities, in a bounded pool (`hashed`: whether they carry
        # them, for a cluster's replica that starts with no requests and is given them by `inject`)
        hashed = any(r.hash_ids for r in requests) if hashed is None else hashed
        prefix = (cfg.enable_prefix_caching and cfg.num_gpu_blocks is not None and policy_class(policy).prefix_caching
                  and hashed)
        self.sched: Scheduler = make_scheduler(policy, cfg, explain=record == "full", prefix_caching=prefix)
        self.kv, self.running = self.sched.kv, self.sched.running
        self.keep_records = record != "summary"  # step records are being written
        self.reasons = record == "full"  # ... with why each waiting request got nothing
        self.steps: list[StepRecord] = []
        self.emit = self.steps.append if sink is None else sink
        self.records_left = max_records
        if max_records is not None:
            self.emit = self._emit_first
            self._sink = self.steps.append if sink is None else sink
            if max_records == 0:
                self.stop_recording()
        self.log = StepLog(prefix_caching=prefix)
        self.live = LiveSteps()  # the steps someone decoded in: token runs step over the others
        if prefix:
            self.kv.live = self.live
        self.fast = (FastPath(cost, self.kv.block_size, not self.sched.reserves_lifetime_kv,
                              cfg.policy == "priority" or self.sched.cohort_whole, self.sched.decodes_ahead,
                              self.live, self.kv if prefix else None, self.kv.per_request)
                     if fast and self.sched.stretches else StepByStep())
        # requests longer than max_model_len fail at once, as vLLM rejects them (they never reach the queue), or,
        # sent without max_tokens, run with their output cut at max_model_len
        rejected, clamped = ((), ()) if cfg.max_model_len >= _longest(requests) else too_long(requests,
                                                                                              cfg.max_model_len)
        self.clamped = tuple(requests[i].request_id for i in clamped)
        if clamped:
            requests = list(requests)
            for i in clamped:
                requests[i] = fit_to_max_model_len(requests[i], cfg.max_model_len)
        rejected = set(rejected)
        order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_time, i))
        self.states = [RequestState(requests[i], i) for i in order]
        # closed loop: a request sent `after` another waits for its last token (a rejected turn ends its session)
        self.followers: dict[int, list[RequestState]] = {}
        self.pending: list[tuple[float, int, RequestState]] = []  # followers released, by arrival (a heap)
        if any(r.after is not None for r in requests):
            self.followers = followers(requests, self.states, rejected)
            self.sched.on_finish = self.finished
        # vllm bench serve's --max-concurrency: at most C requests in flight; the others wait at the client
        self.max_concurrency, self.in_flight = cfg.max_concurrency, 0
        # a front end under a cap: arrivals are the client's sends, each reaching the engine its front end's time
        # after it took its slot (sent at once, from the client's queue or when a slot came free)
        self.at_client = cfg.max_concurrency is not None and (cfg.frontend_latency > 0
                                                              or cfg.frontend_latency_per_token > 0)
        self.backlog: deque[RequestState] = deque()  # arrived, not yet sent (first come, first served)
        self.passed: set[int] = set()  # sent from the backlog: their slot is taken
        # when each free slot came free (ascending): a request due before its slot freed is sent when it did, not
        # at its due time (a step's end can pass both)
        self.free_since: deque[float] = deque([-math.inf] * (cfg.max_concurrency or 0))
        # AIPerf's --request-rate with --concurrency: the next gap starts at a send, so a send held for a slot
        # holds every later one back, by `shift` seconds in all so far
        self.in_order, self.shift = cfg.client_sends_in_order and cfg.max_concurrency is not None, 0.0
        if self.in_order and self.followers:
            raise ConfigError("client_sends_in_order: paced sends are one stream of requests; a closed loop's "
                              "turns (after=...) are not modelled with it")
        if self.max_concurrency is not None:
            self.sched.on_finish = self.finished
        self.rejected = tuple(requests[i].request_id for i in sorted(rejected))
        self.num_served = len(requests) - len(rejected)
        self.arriving = [s for s in self.states if s.index not in rejected and s.request.after is None]
        self.arrival_times = [s.request.arrival_time for s in self.arriving] + [None]  # None: no more arrivals
        self.nxt = 0  # the next state to arrive
        self.next_arrival: float | None = None
        self.now, self.step, self.n_done = 0.0, 0, 0
        self.arrivals: list[str] = []  # ids arrived since the last step (for its record)
        self.release: list[RequestState] = []  # async scheduling: finished; blocks and seat come back next step
        self.preemptions = []
        self.swap_seconds_per_block = cfg.block_size * cfg.kv_bytes_per_token / cfg.pcie_bandwidth
        self.check_invariants = check_invariants
        self.stall = (0, -1)  # (steps since an output token changed, the outputs then): the invariants' livelock check
        self.until = math.inf  # `run(until=...)`

    def run(self, progress: Callable[[float, int, int, int], None] | None = None, until: float = math.inf) -> None:
        """Iterate until every request has finished: the lesson's story in order, one step at a time.
        `until`: return before the first iteration that starts at or after it (a cluster's replica, advanced to
        its next event, which a finish in this run can bring forward; `servesim.cluster.replicas`)."""
        total, ticks, sched, fast = self.num_served, 0, self.sched, self.fast
        self.until = until
        async_prefix = getattr(self.kv, "async_step", None) is not None
        # async: the last seats come back one step later; SGLang's overlap loop processes the last result after it
        while self.n_done < total or self.release or sched.unprocessed:
            if self.now >= self.until:
                return
            ticks += 1
            if progress is not None and not ticks & 4095:
                progress(self.now, self.n_done, total, self.num_waiting())
            self.add_arrivals()
            if fast.stretch(self):  # the fast path: only decodes run, the steps up to the next event at once
                continue
            decodes_ahead = fast.decodes_ahead(self)  # the fast path's decodes, already scheduled (else 0)
            sched.step_index = self.step
            if async_prefix:
                self.kv.async_step = self.step
            out = sched.schedule(decodes_ahead)
            if not decodes_ahead and self.idle(out):
                continue
            if fast.stretch_blocked(self, out):  # the queue cannot move until a decode finishes or a request arrives
                continue
            self.run_step(out, decodes_ahead)

    def _emit_first(self, record: StepRecord) -> None:
        """`max_records`: the first records go to the sink; then the run goes on without records."""
        if self.records_left > 0:
            self._sink(record)
            self.records_left -= 1
        if self.records_left <= 0 and self.keep_records:
            self.stop_recording()

    def stop_recording(self) -> None:
        self.keep_records = self.reasons = False
        self.sched.explain = False
        self.arrivals = []

    def add_arrivals(self) -> None:
        """Every request with `arrival_time <= now` joins the waiting queue (followers released by their previous
        turn's last token among them, in (arrival, workload) order)."""
        nxt, times, now = self.nxt, self.arrival_times, self.now
        if (self.pending and self.pending[0][0] <= now) or self.max_concurrency is not None:
            self._add_with_followers()
            return
        while times[nxt] is not None and times[nxt] <= now:
            self.sched.add_request(self.arriving[nxt])
            if self.keep_records:
                self.arrivals.append(self.arriving[nxt].request_id)
            nxt += 1
        self.nxt, self.next_arrival = nxt, times[nxt]
        if self.pending and (self.next_arrival is None or self.pending[0][0] < self.next_arrival):
            self.next_arrival = self.pending[0][0]

    def _add_with_followers(self) -> None:
        if self.in_order:
            return self._add_in_order()
        nxt, times, now, pending = self.nxt, self.arrival_times, self.now, self.pending
        come = []
        while times[nxt] is not None and times[nxt] <= now:
            come.append((times[nxt], self.arriving[nxt].index, self.arriving[nxt]))
            nxt += 1
        while pending and pending[0][0] <= now:
            come.append(heappop(pending))
        cap = self.max_concurrency
        for _, _, s in sorted(come, key=lambda c: c[:2]):
            if cap is not None and s.index not in self.passed:
                if self.in_flight >= cap:
                    self.backlog.append(s)
                    continue
                self._take_slot(s)
                if self._reaches_later(s, now):
                    continue
            self._send(s)
        self.nxt = nxt
        self.next_arrival = min((t for t in (times[nxt], pending[0][0] if pending else None) if t is not None),
                                default=None)

    def _add_in_order(self) -> None:
        """`client_sends_in_order`: request i + 1 is due its gap after request i's send, so while one waits for
        a slot no later one is due; each is sent `shift` seconds after its own time."""
        times, now, cap = self.arrival_times, self.now, self.max_concurrency
        while not self.backlog and times[self.nxt] is not None and times[self.nxt] + self.shift <= now:
            s = self.arriving[self.nxt]
            if self.shift:
                s.request = replace(s.request, arrival_time=times[self.nxt] + self.shift)
            self.nxt += 1
            if self.in_flight >= cap:
                self.backlog.append(s)
                break
            self.shift += self._take_slot(s)
            if self._reaches_later(s, now):
                continue
            self._send(s)
        while self.pending and self.pending[0][0] <= now:  # sent from the backlog when a slot freed
            self._send(heappop(self.pending)[2])
        due = None if self.backlog or times[self.nxt] is None else times[self.nxt] + self.shift
        self.next_arrival = min((t for t in (due, self.pending[0][0] if self.pending else None) if t is not None),
                                default=None)

    def _take_slot(self, s: RequestState) -> float:
        """`s` takes the slot free the longest, sent at its own time or when that slot came free if later (the
        seconds it was held, returned)."""
        self.in_flight += 1
        held = self.free_since.popleft() - s.request.arrival_time
        if held <= 0:
            return 0.0
        s.request = replace(s.request, arrival_time=s.request.arrival_time + held)
        return held

    def _reaches_later(self, s: RequestState, now: float) -> bool:
        """A front end under a cap: `s`, sent (its slot taken), reaches the engine its front end's time later;
        True when that is after `now` (it waits in `pending`, its slot taken)."""
        if not self.at_client:
            return False
        s.request = replace(s.request, arrival_time=s.request.arrival_time + delay(self.config, s.request.prompt_len))
        if s.request.arrival_time <= now:
            return False
        self.passed.add(s.index)
        heappush(self.pending, (s.request.arrival_time, s.index, s))
        if self.next_arrival is None or s.request.arrival_time < self.next_arrival:
            self.next_arrival = s.request.arrival_time
        return True

    def _send(self, s: RequestState) -> None:
        """`s` reaches the engine now: the scheduler's waiting queue (and this step's record)."""
        self.sched.add_request(s)
        if self.keep_records:
            self.arrivals.append(s.request_id)

    def inject(self, s: RequestState) -> None:
        """A cluster's router hands this replica `s`, to arrive at its `arrival_time` (as a released follower
        does: through `pending`)."""
        self.states.append(s)
        self.num_served += 1
        heappush(self.pending, (s.request.arrival_time, s.index, s))
        if self.next_arrival is None or s.request.arrival_time < self.next_arrival:
            self.next_arrival = s.request.arrival_time

    def finished(self, s: RequestState) -> None:
        """The scheduler's hook when a request is done: its followers' turns, and under a concurrency cap its
        slot, which the first request waiting at the client takes, sent at `s`'s last token (plus that request's
        think time, for a closed loop of users)."""
        if self.followers:
            self.release_followers(s)
        if self.max_concurrency is None:
            return
        self.in_flight -= 1
        if not self.backlog:
            self.free_since.append(s.finish_time)
        else:
            f = self.backlog.popleft()
            # a closed loop's user thinks before sending it (`workloads.ClosedLoop`; a follower thought already)
            think = f.request.think_time if f.request.after is None else 0.0
            d = delay(self.config, f.request.prompt_len)  # (its arrival a send under a front end: `at_client`)
            t = max(f.request.arrival_time + (d if self.at_client else 0.0), s.finish_time + think + d)
            if self.in_order:
                self.shift += t - f.request.arrival_time
            f.request = replace(f.request, arrival_time=t)
            self.passed.add(f.index)
            self.in_flight += 1
            heappush(self.pending, (t, f.index, f))
            if self.next_arrival is None or t < self.next_arrival:
                self.next_arrival = t

    def release_followers(self, s: RequestState) -> None:
        """`s` is done: the turns sent after it arrive `think_time` after its last token (not before their own
        `arrival_time`)."""
        for f in self.followers.pop(s.index, ()):
            r = f.request
            # (under a cap with a front end, its send: the cap takes it then, and the front end after)
            d = 0.0 if self.at_client else delay(self.config, r.prompt_len)
            t = max(r.arrival_time, s.finish_time + r.think_time + d)
            f.request = replace(r, arrival_time=t)
            heappush(self.pending, (t, f.index, f))
            if self.next_arrival is None or t < self.next_arrival:
                self.next_arrival = t

    def idle(self, out: SchedulerOutput) -> bool:
        """Nothing can run: the clock jumps to the next arrival, and no step is recorded."""
        if out.scheduled or out.preempted or self.release or self.sched.in_flight:
            return False
        if out.processed_only:  # (SGLang's overlap loop: no forward, the last result processed; no time passes)
            return True
        if self.next_arrival is None:
            raise RuntimeError(f"no request can run at t={self.now} and none will arrive (a servesim bug)")
        self.now = max(self.now, self.next_arrival)
        return True

    def run_step(self, out: SchedulerOutput, decodes_ahead: int) -> None:
        """One iteration: the fast path's `decodes_ahead` decodes, then what schedule() chose. Time it, advance
        and sample, finish, record."""
        fast, running, kv, now = self.fast, self.running, self.kv, self.now
        free_after_schedule = kv.free_blocks
        cached_free = kv.cached_free_blocks if self.sched.prefix else None
        items = list(out.scheduled.items())
        rest, num_prefill, num_decodes = step_shape(items)
        swap_time = (out.swap_in_blocks + out.swap_out_blocks) * self.swap_seconds_per_block
        duration = fast.step_time(self.cost, self.step, rest) + swap_time
        end = now + duration
        scheduled = None
        if self.keep_records:
            scheduled = fast.scheduled(running, self.step, tuple(scheduled_entries(items, out)))
        observed = self.release_finished() if self.release else []
        self.live.mark(decodes_ahead + num_decodes > 0)
        finished = fast.finishing(self, end)
        finished += self.advance(items, out, end)
        if self.sched.end_step is not None:
            self.sched.end_step()
        self.preemptions.extend(out.preemptions)
        if self.check_invariants:
            self.stall = assert_invariants(self.sched, self.states, out, self.config, self.stall)
        n, num_waiting = decodes_ahead, self.num_waiting()
        self.log.add(now, duration, n + len(items), n + sum(rest.num_new_tokens), num_prefill, n + num_decodes,
                     free_after_schedule, len(running), num_waiting, len(out.preempted), cached_free)
        if self.keep_records:
            self.emit(StepRecord(
                step=self.step, start_time=now, duration=duration, arrivals=tuple(self.arrivals),
                scheduled=scheduled, preempted=tuple(s.request_id for s in out.preempted),
                finished=tuple(finished), waiting=tuple(out.waiting),
                num_running_after=len(running), num_waiting_after=num_waiting,
                free_blocks_after_schedule=free_after_schedule, free_blocks_after_step=kv.free_blocks,
                token_budget=self.config.max_num_batched_tokens, swap_in_blocks=out.swap_in_blocks,
                swap_out_blocks=out.swap_out_blocks, finished_observed=tuple(observed),
                cached_free_blocks_after_schedule=cached_free, forward_mode=out.forward_mode,
                new_token_ratio=out.new_token_ratio, chunked_request=out.chunked_request,
                skip_drafts=out.spec is not None and out.spec.skip_drafts,
            ))
        self.arrivals = []
        self.now = end
        self.step += 1
        fast.absorb(running, self.step)

    def release_finished(self) -> list[str]:
        """Async scheduling: last step's finishes give back their blocks and seats now."""
        observed = [s.request_id for s in self.release]
        for s in self.release:
            if s.num_blocks:  # else preempted while its last token was in flight: blocks and seat already back
                self.sched.finish(s)
        self.release = []
        return observed

    def advance(self, items: list[tuple[RequestState, int]], out: SchedulerOutput, end: float) -> list[str]:
        """Advance each scheduled request's computed tokens; a chunk that reaches `num_tokens` samples a token at
        the step's end, and the last one finishes the request. Returns the finished ids."""
        now, step, finished = self.now, self.step, []
        for s in out.preempted:
            s.preempted_at = now
        spec = out.spec
        drafts = spec.drafts if spec is not None else None
        for s, k in items:
            if s.status is RequestStatus.FINISHED:  # (async speculative decoding: scheduled once more before its
                continue  # last output was processed; the step's work for it is discarded)
            s.num_cached_tokens = 0  # told in this step's record
            if s.first_scheduled_time is None:
                s.first_scheduled_time = now
            if not s.sampled_since_admission:
                s.num_prefill_chunks += 1
            if s.preempted_at is not None:
                s.time_preempted += now - s.preempted_at
                s.preempted_at = None
            s.num_computed_tokens += k
            d = drafts.get(s, 0) if drafts else 0
            if s.num_computed_tokens - d == s.request.prompt_len + s.num_output_tokens:  # reached num_tokens: sample
                # (speculative decoding: the accepted drafts and one more, past the rejected ones' rollback)
                gained = verified(s, d, spec.accepted[s]) if d else 1
                s.num_output_tokens += gained
                if spec is not None:
                    spec.outputs[s] = gained
                s.sampled(step, 1, self.live)
                s.sampled_since_admission = True
                if s.num_output_tokens == s.request.output_len:
                    s.finish_time = end
                    finished.append(s.request_id)
                    self.n_done += 1
                    if self.config.async_scheduling:
                        s.status = RequestStatus.FINISHED
                        self.release.append(s)
                    else:
                        self.sched.finish(s)
        return finished

    def num_waiting(self) -> int:
        return len(self.sched.waiting) + len(self.sched.swapped)

    def result(self) -> SimResult:
        cfg = self.config
        step_log = self.log.freeze(self.kv.usable_blocks)
        clock = TokenClock(step_log.end_time, self.live.skip())  # the same floats as each step's `end`
        self.fast.close()
        timelines = timelines_from_states(self.states, clock, speculating(cfg))
        kv = self.kv
        prefix = None
        if self.sched.prefix:
            tracked = kv.pool.evicted is not None
            prefix = PrefixCacheStats(kv.query_tokens, kv.hit_tokens, kv.evicted_blocks,
                                      kv.lost_tokens if tracked else None, kv.lost_admissions if tracked else None)
        return SimResult(self.policy, self.cost.name, cfg, tuple(self.steps), timelines, tuple(self.preemptions),
                         step_log, self.record, self.rejected, prefix, self.clamped,
                         self.sched.idle_iterations, self.sched.spec_decoding)


def followers(requests: Sequence[Request], states: list[RequestState], rejected: set[int]
              ) -> dict[int, list[RequestState]]:
    """The requests sent after each request (by index); a follower of a rejected request is rejected too (its
    session ends there). `resolve_config` has checked that each `after` names an earlier request."""
    index = {r.request_id: i for i, r in enumerate(requests)}
    by_index = {s.index: s for s in states}
    out: dict[int, list[RequestState]] = {}
    for i, r in enumerate(requests):
        if r.after is None:
            continue
        before = index[r.after]
        if before in rejected:
            rejected.add(i)
        else:
            out.setdefault(before, []).append(by_index[i])
    return out


def _longest(requests: Sequence[Request]) -> int:
    return max((r.prompt_len + r.output_len for r in requests), default=0)


def step_shape(items: list[tuple[RequestState, int]]) -> tuple[StepShape, int, int]:
    """What schedule() chose as the cost model's `StepShape`, with its prefill tokens and decodes (a decode's new
    tokens include the drafts it verifies)."""
    new_tokens, context, decode = [], [], []
    num_sampled = num_prefill = num_decodes = 0
    for s, k in items:
        new_tokens.append(k)
        context.append(s.num_computed_tokens)
        decode.append(s.sampled_since_admission)
        if s.sampled_since_admission:
            num_decodes += 1
        else:
            num_prefill += k
        if s.num_computed_tokens + k >= s.request.prompt_len + s.num_output_tokens:  # reaches num_tokens
            num_sampled += 1
    return StepShape(tuple(new_tokens), tuple(context), tuple(decode), num_sampled), num_prefill, num_decodes


def scheduled_entries(items: list[tuple[RequestState, int]], out: SchedulerOutput) -> list[ScheduledEntry]:
    """The step record's entries of what schedule() chose, before the step runs."""
    spec = out.spec
    if spec is not None:
        return [_entry(s, k, out, spec.drafts.get(s, 0), spec.accepted.get(s, 0), spec.before.get(s, 0),
                       s in spec.padded) for s, k in items]
    return [_entry(s, k, out) for s, k in items]


def _entry(s: RequestState, k: int, out: SchedulerOutput, *spec) -> ScheduledEntry:
    return ScheduledEntry(
        s.request_id, k, Kind.DECODE if s.sampled_since_admission else Kind.PREFILL,
        s.num_computed_tokens - s.num_cached_tokens, s.num_tokens, s in out.resumed,
        s.num_computed_tokens + k >= s.num_tokens, s.num_blocks, s.num_cached_tokens, *spec,
    )


LIVELOCK_STEPS = 100_000  # steps with no output token gained or lost: a servesim livelock, not a schedule


def assert_invariants(sched, states: list[RequestState], out, cfg: EngineConfig,
                      stall: tuple[int, int] = (0, -1)) -> tuple[int, int]:
    """Invariants after every step (used by the property tests): budget, KV books, queue membership; and that
    some request's output changed within `LIVELOCK_STEPS` steps (`stall`: the steps since, the outputs then), so
    that a livelock fails a test instead of hanging it."""
    assert sum(out.scheduled.values()) <= cfg.max_num_batched_tokens, "token budget exceeded"
    assert len(sched.running) <= cfg.max_num_seqs, "more running than max_num_seqs"
    held = sched.blocks_held(states)
    if sched.kv.usable_blocks is not None:
        assert 0 <= sched.kv.free_blocks <= sched.kv.usable_blocks, "KV over-allocated"
        assert sched.kv.free_blocks + held == sched.kv.usable_blocks, "free + held != usable"
    outputs = 0
    for s in states:
        assert 0 <= s.num_computed_tokens <= s.num_tokens, f"{s.request_id}: computed beyond known tokens"
        assert s.num_output_tokens <= s.request.output_len, f"{s.request_id}: too many outputs"
        if s.status is not RequestStatus.RUNNING and s.status is not RequestStatus.FINISHED:
            assert s.num_blocks == 0, f"{s.request_id}: holds GPU blocks while not running"
        outputs += s.num_output_tokens
    steps, last = stall
    if outputs != last:
        return 0, outputs
    assert steps < LIVELOCK_STEPS, f"no request's output changed in {LIVELOCK_STEPS:,} steps: a livelock"
    return steps + 1, last


def check_requests(requests: Sequence[Request]) -> None:
    """Something to simulate, each a `Request` (a tuple or a dict is refused naming the fields a Request takes)."""
    if isinstance(requests, str | bytes) or not hasattr(requests, "__len__"):
        raise ConfigError(f"requests: got {type(requests).__name__}; expected a list of servesim.Request")
    if not len(requests):
        raise ConfigError("requests: none to simulate; give a non-empty list of servesim.Request (or a workload "
                          "name or file to Run.simulate)")
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            raise ConfigError(f"requests[{i}]: a {type(r).__name__}; expected servesim.Request(request_id, "
                              "arrival_time, prompt_len, output_len)")
