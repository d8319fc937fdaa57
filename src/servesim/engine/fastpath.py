"""The fast path, behind the small interface the iteration loop calls: plan a stretch, apply a stretch, and the
decode cohort's part of an ordinary step.

Most steps of a serving engine are mostly decodes: every running request that has sampled its last known token
gets one more token, in running order, ahead of anything else. `FastPath` keeps the longest prefix of the running
list made of such decoders as a cohort (`servesim.engine.cohort`) and does not touch them step by step:

- `schedule(num_decoding_ahead=n)` is told the first n running requests are already scheduled for one token each
  and starts its scan after them, so admissions, chunks and reasons still come from the policy's own code;
- with nobody waiting (or the queue blocked) and everyone in the cohort, nothing can change until an arrival, a
  member's last token or the KV pool running dry, so the whole stretch of steps is planned at once
  (`servesim.engine.stretch`) and applied with the records a step-by-step run would have written.

`StepByStep` has the same interface and does nothing: the loop then runs every step through `schedule()`.
Under prefix caching (`pool` given) the cohort's decodes also take their new blocks off the free queue and
register the blocks they fill, step by step in running order (`_pool_steps`): evictions and hits then come out as
a step-by-step run has them, while everything else stays aggregate.

Exactness is tested against it (tests/test_fastpath.py, Hypothesis over every policy and both preemption modes):
the same token times (to float tolerance) and, with records kept in full, the same records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from servesim.cost import CostModel, StepShape
from servesim.engine.cohort import DecodeCohort
from servesim.engine.kv import KVCache
from servesim.engine.records import Scheduled, ScheduledEntry, StepRecord
from servesim.engine.request import RequestState
from servesim.engine.steplog import StepLog
from servesim.engine.stretch import Stretch, plan_stretch, step_duration
from servesim.engine.token_runs import LiveSteps
from servesim.engines.config import EngineConfig

if TYPE_CHECKING:
    from servesim.engine.scheduler import SchedulerOutput


class Engine(Protocol):
    """What the fast path reads and moves of the iteration loop's state (`servesim.engine.loop.Engine`)."""

    config: EngineConfig
    cost: CostModel
    sched: Any  # the policy's Scheduler: running, waiting, swapped, finish()
    kv: KVCache
    running: list[RequestState]
    step: int  # the next step's index
    now: float  # the clock: the next step's start
    next_arrival: float | None
    arrivals: list[str]  # ids arrived since the last step
    n_done: int
    log: StepLog
    emit: Callable[[StepRecord], None]
    keep_records: bool
    reasons: bool

    def num_waiting(self) -> int: ...


class StepByStep:
    """No fast path: every step goes through `schedule()` with nobody scheduled ahead."""

    __slots__ = ()

    def stretch(self, engine: Engine) -> bool:
        return False

    def decodes_ahead(self, engine: Engine) -> int:
        return 0

    def stretch_blocked(self, engine: Engine, out: SchedulerOutput) -> bool:
        return False

    def step_time(self, cost: CostModel, step: int, rest: StepShape) -> float:
        return cost.step_time(rest)

    def scheduled(self, running: list[RequestState], step: int, rest: tuple[ScheduledEntry, ...]) -> Scheduled:
        return Scheduled(rest)

    def finishing(self, engine: Engine, end: float) -> list[str]:
        return []

    def absorb(self, running: list[RequestState], step: int) -> None:
        pass

    def close(self) -> None:
        pass


class FastPath:
    """The decode cohort and the stretches it runs alone (see the module's docstring)."""

    __slots__ = ("cohort", "aggregate", "priority", "decodes_first", "n", "growth", "contexts", "prefix_kv",
                 "released")

    def __init__(self, cost: CostModel, block_size: int, grows: bool, priority: bool,
                 decodes_first: bool, live: LiveSteps, prefix_kv: KVCache | None = None, per_request: int = 0) -> None:
        self.prefix_kv = prefix_kv  # prefix caching: the cohort's blocks are particular blocks of its pool
        self.cohort = DecodeCohort(block_size, live, grows=grows, track=prefix_kv is not None,
                                   per_request=per_request)
        # the cost model prices n decodes from their context sum (else each step gets the members' contexts)
        self.aggregate = hasattr(cost, "step_time_with_decodes") and hasattr(cost, "decode_stretch")
        self.priority = priority  # a priority victim could be a member: schedule() must then see everyone
        # False: a step that admits a prompt runs no decode (vLLM v0), so while someone waits schedule() decides
        self.decodes_first = decodes_first
        self.n = self.growth = 0  # this step's cohort: its size, the blocks it allocates
        self.contexts: list[int] | None = None  # its members' contexts (cost models without aggregates)
        self.released = 0  # blocks the next stretch's first step frees at its end (`Scheduler.release_held`)

    # -- before schedule() --------------------------------------------------------------------------------------
    def stretch(self, engine: Engine) -> bool:
        """Take the cohort into this step. When it alone runs and nobody waits, apply the stretch of steps up to
        the next event and return True. Everyone is brought up to date first when schedule() must see them all
        (the cohort's blocks do not fit, so schedule() picks victims among everyone; a priority victim could be
        a member; or the policy may run a prompt instead of the decodes, as vLLM v0 does, and cannot say which
        without seeing them: `_prefill_first`)."""
        cohort, running, kv = self.cohort, engine.running, engine.kv
        n = cohort.n
        self.n = self.growth = 0
        self.contexts = None
        if not n:
            return False
        clock = engine.step - cohort.paused
        growth = cohort.growth(clock)
        short = kv.free_blocks is not None and growth > kv.free_blocks
        sched = engine.sched
        if (short and self.decodes_first) or (self.priority and n < len(running)):
            cohort.leave_all(running, clock)
            return False
        if not self.decodes_first and (len(sched.waiting) and not sched.swapped or sched.chunked_req is not None):
            if not self._prefill_first(engine, n, clock):
                return False
        # (a prefill-first policy's decode step; one that cannot make room leaves it to schedule(): it retracts,
        # or under SGLang's overlap loop waits for the finished requests still holding KV)
        if short and not self._make_room(engine, growth):
            cohort.leave_all(running, clock)
            return False
        self.n, self.growth = n, growth
        if not self.aggregate:
            self.contexts = cohort.contexts(running, clock)
        if n == len(running) and not sched.swapped and (not len(sched.waiting) or not self.decodes_first):
            self._apply(engine, self._plan(engine), after_schedule=False)
            return True
        return False

    def _prefill_first(self, engine: Engine, n: int, clock: int) -> bool:
        """A policy that may run prompts without the decodes, with someone waiting: it says what its next
        schedule() does (`Scheduler.cohort_step`). "decode": no prompt can start, everyone decodes, and True (a
        stretch, up to the next event). "prefill": a prompt-only step, sure to be built without reading the
        cohort's members, so the cohort pauses for it and keeps them. Else (or with every step's reasons to
        record) the members leave, up to date, for schedule() to see."""
        ask = getattr(engine.sched, "cohort_step", None)
        mode = ask(engine.step, clock) if ask is not None and n == len(engine.running) and not engine.reasons else None
        if mode == "decode":
            return True
        if mode == "prefill":
            self.cohort.pause(engine.step)
        else:
            self.cohort.leave_all(engine.running, clock)
        return False

    @staticmethod
    def _make_room(engine: Engine, growth: int) -> bool:
        """The cohort's decode step does not fit the free pool: a policy whose decode step evicts its prefix
        cache for room (SGLang's `update_running_batch`) makes it now, as that step would; False if it cannot
        (schedule() then retracts, seeing everyone) or the policy does not."""
        return engine.sched.decode_evicts and engine.kv.make_room(growth)

    def decodes_ahead(self, engine: Engine) -> int:
        """The cohort's decodes are this step's first n, their blocks taken from the pool before schedule()."""
        if self.prefix_kv is not None and self.n:
            self._pool_steps(engine.step - self.cohort.paused, 1)
        elif engine.kv.free_blocks is not None:
            engine.kv.free_blocks -= self.growth
        return self.n

    # -- after schedule() -------------------------------------------------------------------------------------
    def stretch_blocked(self, engine: Engine, out: SchedulerOutput) -> bool:
        """schedule() added nothing to the cohort's decodes: the queue is blocked (seats, budget or blocks) and
        stays so until a member finishes or a request arrives, so the steps up to then are a stretch as well.
        Full records go step by step instead, for every waiting request's reason."""
        n, kv = self.n, engine.kv
        if (not n or n != len(engine.running) or out.scheduled or out.preempted or out.swap_in_blocks
                or out.prefill_deferred or engine.reasons):
            return False
        if kv.free_blocks is not None:
            kv.free_blocks += self.growth  # (under prefix caching the step's blocks stay taken: planned from here)
        plan = self._plan(engine)
        if plan is None or plan.k == 1:
            if kv.free_blocks is not None:
                kv.free_blocks -= self.growth
            return False
        self._apply(engine, plan, after_schedule=True)
        return True

    # -- the cohort's part of an ordinary step ----------------------------------------------------------------
    def step_time(self, cost: CostModel, step: int, rest: StepShape) -> float:
        """The step's duration: the cohort's n decodes first, then `rest` (what schedule() chose)."""
        cohort = self.cohort
        return step_duration(cost, self.n, cohort.context_sum(step - cohort.paused), rest, self.contexts)

    def scheduled(self, running: list[RequestState], step: int, rest: tuple[ScheduledEntry, ...]) -> Scheduled:
        """The step record's entries: the cohort's decodes, then `rest`."""
        if not self.n:
            return Scheduled(rest)
        cohort = self.cohort
        return self._decodes(running[:self.n], self.contexts or cohort.contexts(running, step - cohort.paused), 0,
                             rest)

    def _decodes(self, members: list[RequestState], contexts: list[int], offset: int,
                 rest: tuple[ScheduledEntry, ...] = ()) -> Scheduled:
        cohort = self.cohort
        blocks = None if cohort.grows else tuple(s.num_blocks for s in members)
        return Scheduled(rest, tuple(s.request_id for s in members), tuple(contexts), offset, blocks,
                         cohort.block_size)

    def finishing(self, engine: Engine, end: float) -> list[str]:
        """Members that sample their last token this step finish; their ids in running order."""
        cohort = self.cohort
        step = engine.step - cohort.paused
        if not self.n or cohort.heap[0][0] > step:
            return []
        done = cohort.finishing(step)
        ids = []
        if len(done) > 1 and (engine.keep_records or _order_matters(self, engine)):
            done = _running_order(done, engine.running, self.n)
        if done and engine.keep_records:  # in running order, as a step-by-step run lists them
            ids = [s.request_id for s in done]
        for s in done:
            s.finish_time = end
            engine.sched.finish(s)
        engine.n_done += len(done)
        return ids

    def absorb(self, running: list[RequestState], step: int) -> None:
        """After the step: running requests that now decode one token a step join, in running order."""
        self.cohort.absorb(running, step - self.cohort.paused)

    def close(self) -> None:
        self.cohort.heap.clear()  # the states it references go with the timelines

    # -- stretches ------------------------------------------------------------------------------------------------
    def _plan(self, engine: Engine) -> Stretch | None:
        cohort = self.cohort
        # finished requests that hold their KV (and rows) until the next step's end: released now (in that step
        # nothing reads them but the pool, whose count after its schedule is taken without them); with someone
        # waiting the queue may move once they are gone: the stretch is that step
        sched = engine.sched
        held = sched.holds_finished
        self.released = sched.release_held() if held else 0
        limit = 1 if held and (engine.num_waiting() or sched.chunked_req is not None) else None
        return plan_stretch(cohort, engine.kv.free_blocks, engine.cost, engine.step - cohort.paused, engine.now,
                            engine.next_arrival, self.contexts, limit)

    def _apply(self, engine: Engine, plan: Stretch | None, after_schedule: bool) -> None:
        """Apply stretches one after the other while the cohort alone runs, nobody waits or has arrived, and its
        next step's blocks fit (only one after a schedule(): the queue may move once a member finishes)."""
        cohort, running, kv = self.cohort, engine.running, engine.kv
        while plan is not None:
            engine.n_done += self._advance(engine, plan, after_schedule)
            engine.sched.skipped(plan.k - after_schedule, not after_schedule)  # (the first ran schedule())
            engine.step += plan.k
            engine.now = plan.end
            engine.arrivals = []
            n, nxt, clock = cohort.n, engine.next_arrival, engine.step - cohort.paused
            if (after_schedule or not n or n != len(running) or (nxt is not None and nxt <= engine.now)
                    or engine.num_waiting() or (kv.free_blocks is not None and cohort.growth(clock) > kv.free_blocks)):
                return
            self.contexts = None if self.aggregate else cohort.contexts(running, clock)
            plan = self._plan(engine)

    def _advance(self, engine: Engine, plan: Stretch, after_schedule: bool = False) -> int:
        """The cohort alone decodes for the stretch's k steps; returns how many finished in its last step.
        `after_schedule`: the first step's decodes_ahead() has taken its blocks already."""
        cohort, sched, kv = self.cohort, engine.sched, engine.kv
        k, n, first = plan.k, cohort.n, engine.step - cohort.paused  # (first: the cohort's clock)
        num_waiting = engine.num_waiting()
        free_after = plan.free_after
        cached = None  # prefix caching: cached free blocks after each step's schedule
        if free_after is None:
            free_after = [-1] * k
        elif self.prefix_kv is not None:
            cached = [self.prefix_kv.cached_free_blocks] if after_schedule else []
            cached += self._pool_steps(first + after_schedule, k - after_schedule)
        else:
            kv.free_blocks = free_after[-1]  # nobody frees blocks before the last step's finishes
        at_schedule = free_after  # (the first step's: less what it frees at its end, `released`)
        if self.released and plan.free_after is not None:
            at_schedule = [free_after[0] - self.released, *free_after[1:]]
        last, record = first + k - 1, None
        cohort.live.mark_live(k)
        if engine.keep_records:
            members = sched.running[:n]
            contexts = self.contexts or cohort.contexts(sched.running, first)
            record = _stretch_records(engine, plan, members, contexts, self, (at_schedule, free_after), num_waiting,
                                      cached, first)
        done = cohort.finishing(last) if cohort.heap[0][0] <= last else ()
        if len(done) > 1 and _order_matters(self, engine):  # freed in running order: the free queue's order
            done = _running_order(done, sched.running, n)
        for s in done:
            s.finish_time = plan.end
            sched.finish(s)
        if sched.after_stretch is not None:
            sched.after_stretch()
        if record is not None:  # the last step's record, with the pool after its finishes (as the policy freed)
            engine.emit(record if kv.free_blocks is None else replace(record, free_blocks_after_step=kv.free_blocks))
        engine.log.extend(plan.times, plan.durations, n, at_schedule, n - len(done), num_waiting, cached)
        return len(done)

    def _pool_steps(self, first: int, k: int) -> list[int]:
        """Prefix caching: steps first .. first+k-1 of the cohort's decodes on the pool, as a step-by-step run
        makes them: each step, in running order, members starting a block take one off the free queue (evicting
        what it cached), then members filling their last block register it (P5). Returns the cached free
        blocks after each step. The blocks are taken as one run, then registered: the blocks registered are held,
        never taken, and nobody frees a block within the stretch, so the pool ends the same."""
        kv, cohort = self.prefix_kv, self.cohort
        pool, bs = kv.pool, cohort.block_size
        takers = [cohort.allocating(step) for step in range(first, first + k)]
        blocks, cached = pool.allocate_runs([len(members) for members in takers])
        new = iter(blocks)
        for members in takers:
            for s in members:
                s.block_ids.append(next(new))
        for step in range(first, first + k):
            for s in cohort.filling(step):
                if s.request.hash_ids is None:
                    continue
                full = (s.num_computed_tokens + step - s.decoding_since + 1) // bs
                pool.register(s.block_ids[full - 1], kv.hashes(s, full * bs)[full - 1], s.index, full - 1)
                s.num_hashed_blocks = full
        kv.free_blocks = pool.num_free
        return cached


def _stretch_records(engine: Engine, plan: Stretch, members: list[RequestState], contexts: list[int],
                     fast: FastPath, free_after: tuple[list[int], list[int]], num_waiting: int,
                     cached: list[int] | None, clock: int) -> StepRecord | None:
    """The step records a step-by-step run would have written for the stretch (the members' ids and contexts
    shared by all of them; the policy's forward mode and ratio for each step, where it has them; `free_after`:
    the pool after each step's schedule, and at its end). The last one is returned, not emitted: its pool after
    the step is known once its finishers are done."""
    k, n, bs, first = plan.k, len(members), fast.cohort.block_size, engine.step
    unlimited = engine.kv.free_blocks is None
    ids = [s.request_id for s in members]
    last = [s.request.output_len - s.num_output_tokens - (clock - s.decoding_since) == k for s in members]
    ratios = getattr(engine.sched, "decode_ratios", None)
    mode, ratios = ("decode", ratios(first, k)) if ratios is not None else (None, [None] * k)
    arrivals, budget, emit = tuple(engine.arrivals), engine.config.max_num_batched_tokens, engine.emit
    shared = fast._decodes(members, contexts, 0)
    for j in range(k):
        if not engine.keep_records:  # max_records reached in this stretch
            return None
        scheduled = Scheduled((), shared.ids, shared.contexts, j, shared.blocks, bs)
        fin = tuple(ids[i] for i in range(n) if last[i]) if j == k - 1 else ()
        free, free_at_end = (None, None) if unlimited else (free_after[0][j], free_after[1][j])
        record = StepRecord(
            step=first + j, start_time=plan.times[j], duration=plan.durations[j],
            arrivals=arrivals if j == 0 else (), scheduled=scheduled, preempted=(), finished=fin, waiting=(),
            num_running_after=n - len(fin), num_waiting_after=num_waiting,
            free_blocks_after_schedule=free, free_blocks_after_step=free_at_end,
            token_budget=budget, cached_free_blocks_after_schedule=None if cached is None else cached[j],
            forward_mode=mode, new_token_ratio=ratios[j],
        )
        if j == k - 1:
            return record
        emit(record)
    return None


def _order_matters(fast: FastPath, engine: Engine) -> bool:
    """Finishers must go in running order when the pool remembers it (`KVCache.remembers_order`): vLLM's free
    queue under prefix caching, SGLang's radix cache (their order decides what is evicted)."""
    return fast.prefix_kv is not None or engine.kv.remembers_order


def _running_order(done: list[RequestState], running: list[RequestState], n: int) -> list[RequestState]:
    """Finishing cohort members (off the heap in index order) in running order, as a step-by-step run frees
    them: under prefix caching the order their blocks go back is the free queue's."""
    if len(done) * 16 < n:  # a few of many: each one's position, found in C (states compare by identity)
        return sorted(done, key=running.index)
    leaving = {id(s) for s in done}
    return [s for s in running[:n] if id(s) in leaving]
