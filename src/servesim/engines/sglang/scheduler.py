"""SGLang's scheduler (pinned: SGLang 0.5.23; its overlap event loop by default, the normal one with
`disable_overlap_schedule`): prefill first, in separate batches.

Each iteration first tries to build a prefill batch (`PrefillAdder`: the chunked request first, then the waiting
queue in policy order, against a token budget, a chunk budget and memory minus what the running requests are
expected to still need, `new_token_ratio` x their remaining outputs); only when none is built do all running
requests decode one token. With `enable_mixed_chunk` the decodes ride in the prefill's forward. A decode that
does not fit retracts requests (fewest outputs first) to the back of the queue. Rules S1-S10 of
../shared/conformance/sglang/README.md and round 2's A-I, P1-P3 and O1-O5 (`round2/README.md`), read in SGLang's
`managers/scheduler.py`, `schedule_policy.py`, `schedule_batch.py` and `mem_cache/radix_cache.py`; see
docs/sglang.md. Under the overlap loop the next batch is scheduled before the last one's result is processed.
"""

from __future__ import annotations

import random

from servesim.engine.records import Preemption, Reason
from servesim.engine.request import RequestState, RequestStatus
from servesim.engine.scheduler import Scheduler, SchedulerOutput
from servesim.engines.config import EngineConfig
from servesim.engines.sglang.decode_server import prefilled_remotely, take_prebuilt
from servesim.engines.sglang.memory_pool import TokenPool
from servesim.engines.sglang.prefill_adder import Adder
from servesim.engines.sglang.radix_cache import RadixCache, TokenRun
from servesim.engines.sglang.ratio import decay_path, decayed
from servesim.engines.sglang.schedule_policy import order_waiting
from servesim.engines.sglang.server_args import CLIP_MAX_NEW_TOKENS, SGLangConfig
from servesim.engines.sglang.speculative import SGLangSpec

OUTPUT_TOKEN = 7  # the token every output is taken to be (the recorded fixtures' `sampled_token_id`)
RETRACT = "retract (decode memory)"  # the preemption ledger's mode for a decode retraction
PRIORITY = "preempt (priority)"  # the ledger's mode for a priority preemption (PrefillAdder.preempt_to_schedule)


class SGLangScheduler(Scheduler):
    # Its own state in slots, the base's in the instance dict: CPython 3.11 specializes attribute and method access
    # (`self.x`, `self.f()`) only on objects whose dict holds fewer than 30 names, and this scheduler has 40 (as one
    # dict, every access in its loop took the slow path: 2 % of the Azure run's instructions)
    __slots__ = ("sg", "radix", "stretches", "entry", "entries", "extend_input_len", "chunked_req", "batch_is_full",
                 "ratio", "decay_path", "last_step", "locks", "keys", "extended", "stash", "rng", "prefix_refreshes",
                 "member_clock", "pending_reserve", "overlap", "_inflight", "_inflight_all", "finishing", "landed",
                 "deferred", "spec", "zombies", "landed_zombies", "released")
    name = "sglang"
    prefix_caching = False  # its radix cache is its own (`servesim.engines.sglang.radix_cache`), not vLLM's block cache
    decode_evicts = True  # a decode step evicts the radix cache for its slots (update_running_batch)
    decodes_ahead = False  # a prefill step runs no decode: the fast path steps aside while anyone waits
    cohort_whole = True  # the fast path takes the decode cohort only when it is the whole running batch

    def __init__(self, config: EngineConfig, explain: bool = True) -> None:
        super().__init__(config, explain)
        self.sg = sg = config.sglang or SGLangConfig()
        self.radix = None if sg.disable_radix_cache else RadixCache(sg.page_size)
        # paged with the radix cache, every decode and prefill evicts a page per row ahead (rules C, G), which the
        # fast path's decode cohort does not model: those runs go step by step
        self.stretches = self.radix is None or sg.page_size == 1
        self.kv = TokenPool(sg.page_size, sg.max_total_num_tokens, self.radix)
        self.waiting = WaitingQueue()
        # priority scheduling: each request's wait_queue_entry_time (an order: set whenever it joins the queue) and
        # extend_input_len (0 until an admission attempt sets it, and again after a retraction or preemption)
        self.entry: dict[RequestState, int] = {}
        self.entries = 0
        self.extend_input_len: dict[RequestState, int] = {}
        self.chunked_req: RequestState | None = None
        self.batch_is_full = False  # SGLang's running_batch.batch_is_full: no prefill is tried until it shrinks
        self.ratio = sg.ratio_init
        self.decay_path = decay_path(sg)  # new_token_ratio's way down, one decode step apart (S5)
        self.last_step = -1  # the last step schedule() decided (the steps between were the fast path's decodes)
        self.locks: dict[RequestState, tuple] = {}  # radix: each holder's locked (node, prefix length)
        self.keys: dict[RequestState, tuple] = {}  # radix: each request's prompt tokens
        self.extended: list[RequestState] = []  # this step's prefill rows, inserted into the tree after it
        self.stash: list[RequestState] = []  # the last step's chunk, inserted at the next schedule (rule E)
        self.rng = random.Random(sg.random_seed)  # schedule_policy random
        self.prefix_refreshes = 0  # attempts that could refresh the waiting prefixes (rule H)
        # the fast path's decode cohort: its clock in a prefill step it sits out (members' outputs are behind:
        # num_output_tokens + clock - decoding_since), set by cohort_step for the next schedule() only
        self.member_clock: int | None = None
        self.pending_reserve: float | None = None  # the reserve cohort_step summed for that schedule()
        # the overlap loop (O1-O5): the last forward's result is processed after the next batch is scheduled.
        # `inflight`: the requests that sampled a token in it (their output_ids do not hold it yet); `finishing`:
        # those the token ends, out of the decode batch (O2) but holding their KV, a row and a reserve of one
        # token until it is processed; `landed`: this step's finishes; `deferred`: the last step's complete
        # prefill rows, inserted into the radix tree when its result is processed
        self.overlap = not sg.disable_overlap_schedule
        self._inflight: set[RequestState] = set()
        self._inflight_all = False  # (after the fast path's stretch: every running and finishing request)
        self.finishing: list[RequestState] = []
        self.landed: list[RequestState] = []
        self.deferred: list[tuple[RequestState, int]] = []  # (each with the tokens its prefill computed)
        # speculative decoding (`servesim.engines.sglang.speculative`): every step through schedule(); under the
        # overlap loop `zombies` finished with several tokens in flight, still in the running batch until their
        # result is processed (G6), `landed_zombies` this step's; `released`: the last step's finishes (the
        # finishing ones and the zombies), in the order they finished, as its result's processing releases them
        self.spec = None
        if sg.speculative_algorithm is not None:
            self.spec = SGLangSpec(sg, config.acceptance_rate, config.acceptance_seed)
            self.stretches = False
        self.zombies: list[RequestState] = []
        self.landed_zombies: list[RequestState] = []
        self.released: list[RequestState] = []
        self.remote = False  # a P/D decode pool's: requests arrive with their KV (`decode_server`)

    @property
    def spec_decoding(self):
        return self.spec.stats if self.spec is not None else None

    def add_request(self, s: RequestState) -> None:
        self.remote = self.remote or prefilled_remotely(s)
        self.enqueue(s)

    def enqueue(self, s: RequestState) -> None:
        """_add_request_to_queue: `s` joins the back of the queue, its entry time now (read by priority scheduling
        only)."""
        if self.sg.enable_priority_scheduling:
            self.entries += 1
            self.entry[s] = self.entries
        self.waiting.add(s)

    # -- the iteration ------------------------------------------------------------------------------------------
    def schedule(self, num_decoding_ahead: int = 0) -> SchedulerOutput:
        if num_decoding_ahead:
            raise RuntimeError("the sglang policy takes no decodes ahead (a servesim bug)")
        self.out = out = SchedulerOutput()
        if self.spec is not None:
            out.spec = self.spec.begin()
        if self.stash:
            self._insert(self.stash)
            self.stash = []
        self._decay(self.step_index - self.last_step - 1)  # the fast path's decode steps, each decayed
        self.last_step = self.step_index
        if self.remote:  # a P/D decode pool's server: transferred requests join the running batch first
            take_prebuilt(self)
        if self._prefill():
            out.forward_mode = "mixed" if any(s.sampled_since_admission for s in out.scheduled) else "prefill"
            if self.explain:
                for s in self.running:
                    if s not in out.scheduled:
                        self.note(s, Reason.PREFILL_FIRST, "a prefill batch runs first")
        elif self.running and self._decode():
            out.forward_mode = "decode"
        elif not self.running and not self.finishing:
            self.ratio = self.sg.ratio_init  # fully idle: the ratio starts over
        if out.forward_mode is None and self.unprocessed:
            # the overlap loop with no batch to run: the iteration only processes the last result (O3)
            self._process()
            self.idle_iterations += 1
            out.processed_only = True
        if self.spec is not None and out.forward_mode is not None:
            self.spec.finish_schedule(out)
        out.new_token_ratio = self.ratio  # after this step's decay (or retraction)
        out.chunked_request = self.chunked_req.request_id if self.chunked_req is not None else None
        self.pending_reserve = None
        if self.member_clock is not None:
            self.member_clock = None
            if out.forward_mode != "prefill":
                raise RuntimeError("sglang: a prefill step the fast path was told of built no batch (a servesim bug)")
        return out

    def _prefill(self) -> bool:
        """SGLang's get_new_batch_prefill: True when a prefill batch was built (its rows are in `out`)."""
        waiting, running, chunked, sg = self.waiting, self.running, self.chunked_req, self.sg
        preempting = sg.enable_priority_scheduling  # (SGLang's enable_priority_preemption)
        if not running or preempting:
            # an empty running batch is never full (update_running_batch); with priority preemption every attempt
            # starts afresh (P2: scheduler.py 4090-4092)
            self.batch_is_full = False
        if (self.batch_is_full or not waiting) and chunked is None:
            self.note_rest(waiting, Reason.BATCH_FULL, "the running batch is full until it shrinks", True)
            return False
        rows = len(running) + len(self.finishing)  # (requests finishing in flight keep their rows)
        allocatable = sg.max_running_requests - rows
        if allocatable <= 0 and chunked is None and not preempting:
            self.batch_is_full = True
            self.note_rest(waiting, Reason.MAX_RUNNING_REQUESTS, f"{rows} running", True)
            return False
        self._order()
        adder = Adder(self, len(running) if sg.enable_mixed_chunk else 0)
        batch: list[RequestState] = []
        if chunked is not None:
            adder.add_chunked(chunked)
            batch.append(chunked)
            self.chunked_req = chunked if chunked.num_computed_tokens + self.out.scheduled[chunked] < \
                chunked.num_tokens else None
        admitted = 0
        # a spent budget admits no one, the first candidate included: the chunked request or the mixed decodes can
        # spend it (scheduler.py 4202-4205); nobody is matched against the tree. (After an admission add_one says
        # so itself: the scan stops whenever it returns a reason.)
        spent = waiting and adder.spent()
        if spent:
            self._note_from(0, Reason.CHUNK_BUDGET, adder.why)
        for s in () if spent else waiting:
            # (rows read again each time: a priority preemption frees some)
            if len(batch) >= sg.max_running_requests - len(running) - len(self.finishing):
                self.batch_is_full = True
            if self.batch_is_full and not (preempting and adder.preempt_to_schedule(s)):
                # P2: only a candidate refused for a free row preempts (scheduler.py 4224-4237)
                self._note_from(admitted, Reason.MAX_RUNNING_REQUESTS, f"{rows} running + {len(batch)} "
                                f"in the batch = max_running_requests")
                break
            res = adder.add_one(s)
            if res is Reason.NO_TOKEN or res is Reason.CHUNK_BUDGET:
                if res is Reason.NO_TOKEN:
                    self.batch_is_full = True
                if s not in self.out.scheduled:
                    self._note_from(admitted, res, adder.why)
                    break
            batch.append(s)
            admitted += 1
            if s is adder.new_chunked:
                self.chunked_req = s
            if res is not None:
                self._note_from(admitted, res, adder.why)
                break
        del waiting[:admitted]
        self._requeue(adder.preempted)  # (after the batch is built, admitted or not: scheduler.py 4306-4322)
        if not batch:
            return False
        adder.allocate()
        if self.spec is not None:  # (G3: prepare_for_extend sets each row's committed and allocated lengths)
            for s in batch:
                self.spec.extended(s, s.num_computed_tokens + self.out.scheduled[s])
        complete = [s for s in batch if s is not self.chunked_req]
        self.extended = batch
        decodes = self._mix() if sg.enable_mixed_chunk and running else []
        # the prefill batch joins the running batch (merged at the next iteration, in admission order); a mixed
        # batch puts its prefill rows before the decodes
        if decodes:
            running[:] = complete + decodes
            # rule I: the next iteration adopts the mixed batch as the running batch, whose batch_is_full is
            # false (scheduler.py 4408, 3958): a head refused for memory is tried again at once
            self.batch_is_full = False
        else:
            running += complete
        return True

    # -- what the engine's fast path may ask (servesim.engine.fastpath) ----------------------------------------
    def cohort_step(self, step: int, clock: int) -> str | None:
        """What the next schedule() does with the running batch, when it can tell without reading the running
        requests (the fast path keeps them as a decode cohort whose fields are behind): "decode" when no prefill
        batch can be tried (everyone decodes, if their slots fit), "prefill" when one is sure to be built and the
        running requests sit it out (not mixed; an unlimited pool, so no admission reads their reserve, and
        page_size 1, so a chunk always has room), else None."""
        sg = self.sg
        if self.remote and self.waiting:
            return None  # a decode server: transferred requests join the running batch (`decode_server`)
        if sg.enable_priority_scheduling and self.waiting:
            return None  # a prefill is tried, and may preempt the running requests it reads
        if self.chunked_req is None:
            if self.batch_is_full or not self.waiting:
                return "decode"
            if sg.max_running_requests - len(self.running) - len(self.finishing) <= 0:
                self.batch_is_full = True  # as _prefill sets it
                return "decode"
        if sg.enable_mixed_chunk or sg.page_size != 1:
            return None
        if self.kv.free_blocks is not None and not self._sure_to_admit(step, clock):
            return None
        self.member_clock = clock
        return "prefill"

    def _sure_to_admit(self, step: int, clock: int) -> bool:
        """A bounded pool: the next prefill batch is sure to be built. The chunked request always goes in; else
        the head of the queue (fcfs or lof: an order that reads neither the tree nor the generator) must pass
        add_one's memory check, computed without touching the tree, at the ratio schedule() will have."""
        if self.chunked_req is not None:
            return True
        policy = self.sg.schedule_policy
        if policy == "random" or (self.radix is not None and policy not in ("fcfs", "lof")):
            return False
        waiting = self.waiting
        head = max(waiting, key=lambda s: s.request.output_len) if policy == "lof" else waiting[0]
        if head.request.ignore_eos and self.radix is None:  # (its own admission: schedule() decides)
            return False
        cached = unlocked = 0
        if self.radix is not None and not self.private(head):
            cached, unlocked = self.radix.peek(self.full_key(head), head.num_tokens - 1)
        max_new = min(max(head.request.output_len - head.num_output_tokens, 0), CLIP_MAX_NEW_TOKENS)
        total = head.num_tokens - cached + max_new + self.sg.page_size
        ratio = decayed(self.ratio, step - self.last_step - 1, self.decay_path)
        self.pending_reserve = self.reserve(ratio, clock)  # the same sum the batch's Adder takes next
        return total < (self.kv.available - unlocked) - (0 + self.pending_reserve)

    def outputs(self, s: RequestState) -> int:
        """`s`'s outputs so far (a decode cohort member's read at the cohort's clock in a step it sits out)."""
        c = self.member_clock
        # the overlap loop: its last tokens are still in flight (O1)
        return s.num_output_tokens - self.lag(s) + (c - s.decoding_since if c is not None and s.decoding_since >= 0
                                                     else 0)

    def lag(self, s: RequestState) -> int:
        """The tokens `s` gained in the last step whose result is not processed yet (the overlap loop): one, or
        under speculation what its verification gained (G6)."""
        if s not in self.inflight:
            return 0
        return 1 if self.spec is None else self.spec.gained(s)

    def ignore_eos_state(self, s: RequestState) -> tuple[float, int]:
        """add_one_req_ignore_eos's (tokens left, tokens held) of a request."""
        outputs = self.outputs(s)
        ratio = 1.0 if s.request.ignore_eos else self.ratio
        return s.request.output_len * ratio - outputs, s.request.prompt_len + outputs

    def reserve(self, ratio: float, clock: int | None = None) -> float:
        """What the running requests may still need: min(max_new - outputs, 4096) x new_token_ratio each, an
        ignore_eos request's at ratio 1.0 (round 2's rule D: `_get_running_request_total_token_offset`,
        schedule_policy.py 785-794), summed in running order (the decode cohort's members read at `clock`)."""
        # (a request finishing in flight: its last token, one)
        finishing = sum(1.0 if s.request.ignore_eos else ratio for s in self.finishing) if self.finishing else 0
        # the overlap loop: an in-flight token is not in output_ids yet (after the fast path's stretch everyone's is)
        every, inflight, spec = self._inflight_all, self._inflight, self.spec
        total = 0  # (summed in running order, then the finishing ones: as SGLang adds them)
        for s in self.running:
            r = s.request
            lag = every or s in inflight
            if lag and spec is not None:
                lag = spec.gained(s)
            left = r.output_len - s.num_output_tokens + lag
            if clock is not None and s.decoding_since >= 0:
                left -= clock - s.decoding_since
            total += min(left, CLIP_MAX_NEW_TOKENS) * (1.0 if r.ignore_eos else ratio)
        return total + finishing

    def decode_ratios(self, step: int, k: int) -> list[float]:
        """new_token_ratio in force at steps step .. step+k-1, decode steps the fast path runs without schedule()
        (which decays the ratio for them when it next runs: `last_step`)."""
        ratio, out = decayed(self.ratio, step - self.last_step - 1, self.decay_path), []
        for _ in range(k):
            ratio = decayed(ratio, 1, self.decay_path)
            out.append(ratio)
        return out

    def _note_from(self, i: int, reason: Reason, detail: str) -> None:
        if self.explain:
            self.note_rest(self.waiting[i:], reason, detail, reason is Reason.MAX_RUNNING_REQUESTS)

    def _mix(self) -> list[RequestState]:
        """Mixed chunk: the running requests decode in the prefill's forward, if their slots fit (else they sit
        out this step; a mixed step never retracts)."""
        running, kv = self.running, self.kv
        need = self._decode_pages(running)
        if not kv.make_room(need):
            return []
        if self.spec is not None:  # (G3: its slots as a decode's; its decodes one token each, no drafts)
            self.spec.allocate(running, kv)
            for s in running:
                self.out.scheduled[s] = 1
            return list(running)
        kv.evict_for(len(running) * self.sg.page_size)  # rule C, as in a decode step
        for s in running:
            self._take_decode(s)
        return list(running)

    def _decode(self) -> bool:
        """update_running_batch: one slot per running request (evicting the tree); else retract until it fits.
        Under the overlap loop the requests finishing in flight are not in it (O2: `_reqs_finishing_inflight`,
        scheduler.py 4444-4464; also not in a mixed batch, 4386-4389), and no decode runs (False) when the slots
        do not fit while some are: their KV comes back first (O3, scheduler.py 4470-4474)."""
        running, kv = self.running, self.kv
        if not kv.make_room(self._decode_pages(running)):
            if self.finishing:
                return False
            self._retract()
            if self.spec is not None and not kv.make_room(self._decode_pages(running)):
                return False  # (only requests finished in flight left to retract: their KV comes back first)
        else:
            self._decay()
        if self.spec is not None:  # G2, G3: each verifies its drafts in slots allocated ahead
            self.spec.allocate(running, kv)
            for s in running:
                self.spec.verify(s, self.out, s in self.zombies)
            return True
        # rule C: alloc_paged_token_slots_decode evicts for a new page per request, needed or not
        # (mem_cache/allocation.py 583-585)
        kv.evict_for(len(running) * self.sg.page_size)
        for s in running:
            self._take_decode(s)
        return True

    def _decay(self, times: int = 1) -> None:
        self.ratio = decayed(self.ratio, times, self.decay_path)

    def _decode_pages(self, reqs) -> int:
        if self.spec is not None:
            return self.spec.decode_pages(reqs)  # G4
        ps = self.sg.page_size
        return len(reqs) if ps == 1 else sum(1 for s in reqs if s.num_computed_tokens % ps == 0)

    def _take_decode(self, s: RequestState) -> None:
        if s.num_computed_tokens % self.sg.page_size == 0:
            self.kv.grow(s, 1)
        self.out.scheduled[s] = 1

    def _retract(self) -> None:
        """retract_decode: sort by (outputs, -prompt) descending, stably; retract from the end until the rest
        fit, at least one, never the last; the ratio becomes the survivors' observed share of their outputs."""
        running, kv, sg = self.running, self.kv, self.sg
        order = sorted(running, key=lambda s: (self.outputs(s), -s.request.prompt_len), reverse=True)
        first = True
        while first or not kv.make_room(self._decode_pages(order)):
            victim = self._victim(order)
            if victim is None:
                break
            first = False
            order.remove(victim)
            self._retract_one(victim)
            # rule B: release_req then evicts the tree until retract_decode_steps tokens per request left are
            # free (schedule_batch.py 2389-2392)
            kv.evict_for(sg.retract_decode_steps * len(order))
        running[:] = order  # filter_batch(keep_indices=sorted_indices): survivors keep the retraction order
        decoded = sum(self.outputs(s) for s in running)  # (O5: output_ids, the in-flight tokens not in them)
        max_new = sum(s.request.output_len for s in running)
        self.ratio = min(1.0, (decoded + sg.retract_decode_steps * len(running)) / (max_new + 1))
        self.batch_is_full = False

    def _victim(self, order: list[RequestState]) -> RequestState | None:
        """The last in retraction order, never the last one left. NOTE: a request finished with its result in flight
        (G6) is passed over: SGLang would retract it too and skip its result, re-running it, which servesim does
        not model (it can happen only when every other request is retracted first)."""
        if len(order) == 1:
            return None
        return next((s for s in reversed(order) if s not in self.zombies), None)

    def preempt(self, victim: RequestState, remaining: int) -> None:
        """P3: a priority preemption releases `victim` as a retraction does (release_req, rule B's eviction for the
        `remaining` requests) and leaves it off the running batch; it is queued again after the batch is built."""
        self.running.remove(victim)
        self._retract_one(victim, PRIORITY, queue=False)
        self.kv.evict_for(self.sg.retract_decode_steps * remaining)

    def _requeue(self, victims: list[RequestState]) -> None:
        for v in victims:
            self.enqueue(v)

    def running_reserve(self, s: RequestState) -> float:
        """_get_running_request_total_token_offset: what a running request may still need."""
        left = min(s.request.output_len - self.outputs(s), CLIP_MAX_NEW_TOKENS)
        return left * (1.0 if s.request.ignore_eos else self.ratio)

    def _retract_one(self, victim: RequestState, mode: str = RETRACT, queue: bool = True) -> None:
        """The victim frees all its KV, keeps its outputs and goes to the back of the queue (re-prefills prompt
        and outputs)."""
        blocks, discarded = victim.num_blocks, victim.num_computed_tokens
        repeat = victim.num_preemptions > 0
        if victim in self.inflight:  # O4: its in-flight tokens are dropped (batch_result_processor.py 1022-1026)
            victim.unsample(self.lag(victim))
            self.inflight.discard(victim)
        if self.spec is not None:
            self.spec.forget(victim)
        victim.num_preemptions += 1
        self.kv.give_back(victim, victim.num_blocks - self.prefix_len(victim) // self.sg.page_size)
        victim.num_blocks = 0
        self._unlock(victim)
        victim.num_computed_tokens = 0
        victim.sampled_since_admission = False
        victim.status = RequestStatus.WAITING
        self.extend_input_len.pop(victim, None)  # reset_for_retract
        if queue:
            self.enqueue(victim)
        self.out.preempted.append(victim)
        self.out.preemptions.append(Preemption(self.step_index, victim.request_id, mode, discarded, 0, blocks,
                                               0.0, repeat))

    # -- the waiting queue's order (SchedulePolicy.calc_priority) ----------------------------------------------
    def _order(self) -> None:
        order_waiting(self)

    # -- the radix cache --------------------------------------------------------------------------------------
    def key(self, s: RequestState, n: int) -> tuple:
        """The first n tokens of `s`'s prompt and outputs: its hash_ids as token ids (one per token), else a token
        no other request has; outputs are OUTPUT_TOKEN."""
        full = self.full_key(s)
        if n <= len(full):
            return full[:n]
        return tuple(full) + (OUTPUT_TOKEN,) * (n - len(full))

    def full_key(self, s: RequestState) -> tuple:
        """`s`'s prompt and all its outputs, built once: the tree reads its first n tokens (`end=n`) without a
        copy of them."""
        full = self.keys.get(s)
        if full is None:
            r = s.request
            if r.hash_ids is not None and (r.hash_block_size or 1) == 1:
                prompt = tuple(r.hash_ids[:r.prompt_len])
            elif r.hash_ids is not None:
                prompt = tuple((h, j) for h in r.hash_ids for j in range(r.hash_block_size))[:r.prompt_len]
            else:  # its own token, then its outputs: a run, not a tuple of a token per token
                full = self.keys[s] = TokenRun(("unique", s.index), r.prompt_len, OUTPUT_TOKEN, r.output_len)
                return full
            # (hash_ids shorter than the prompt: the rest are OUTPUT_TOKEN, as key() always spelled them)
            full = self.keys[s] = prompt + (OUTPUT_TOKEN,) * (r.prompt_len + r.output_len - len(prompt))
        return full

    def private(self, s: RequestState) -> bool:
        """`s`'s tokens need no tree: a request with no token ids (its key is its own: nobody else can hit it) in
        an unlimited pool (nothing is evicted, and nobody is retracted, so it never matches itself either), with
        no priority preemption (whose victims would)."""
        return s.request.hash_ids is None and self.kv.free_blocks is None and not self.sg.enable_priority_scheduling

    def match(self, s: RequestState) -> int:
        """Lock the longest cached prefix of `s` (never its last token); returns its length."""
        if self.radix is None or self.private(s):
            return 0
        n, node = self.radix.match(self.full_key(s), s.num_tokens - 1)
        self.radix.lock(node)
        self.locks[s] = (node, n)
        return n

    def prefix_len(self, s: RequestState) -> int:
        """Tokens `s` holds in the tree (locked); its `num_blocks` counts them too, so the decode cohort sees a
        request holding exactly its tokens (`servesim.engine.cohort`)."""
        held = self.locks.get(s)
        return held[1] if held is not None else 0

    def blocks_held(self, states: list[RequestState]) -> int:
        """The radix cache holds finished requests' tokens: requests' own pages plus the tree's (a shared prefix
        counted once; the tree holds whole pages)."""
        if self.radix is None:
            return super().blocks_held(states)
        return self.own_pages() + self.radix.size // self.kv.block_size

    def own_pages(self) -> int:
        """Pages requests hold outside the tree (the engine's KV invariant)."""
        # (each once: a request finished with its result in flight is in the running batch too, G6)
        holders = dict.fromkeys([*self.running, *self.finishing, *self.landed,
                                 *([self.chunked_req] if self.chunked_req is not None else [])])
        ps = self.sg.page_size
        return sum(s.num_blocks - self.prefix_len(s) // ps for s in holders)

    def _unlock(self, s: RequestState) -> None:
        held = self.locks.pop(s, None)
        if held is not None:
            self.radix.unlock(held[0])

    def _cache(self, s: RequestState, n: int | None = None, finished: bool | None = None) -> None:
        """Insert `s`'s computed tokens (its first n: what its prefill computed, when inserted a step later, then
        as unfinished: cache_unfinished_req; under speculation a finished request's owned tokens) into the tree:
        its own copies of what was there already are freed, the rest moves into the tree; it keeps the whole as
        its locked prefix unless it finished."""
        if finished is None:
            finished = n is None and s.status is RequestStatus.FINISHED
        n = s.num_computed_tokens if n is None else n
        ps = self.sg.page_size
        pages = -(-n // ps)  # what it holds: its locked prefix's pages, then its own
        if self.private(s):  # (the tree would hold them, out of anyone's reach, for ever)
            if finished:
                s.num_blocks = 0
            return
        held = self.locks.get(s)  # (its locked prefix: the walk down may start there)
        key, prefix, whole = self.full_key(s), held[1] if held is not None else 0, n // ps * ps  # (whole pages)
        # rule H: the leaf is split at the prompt's end, the prompt's path touched again after it
        # (checkpoint_into_tree, unified_radix_cache.py 1255-1283): the outputs can go first
        prompt = s.request.prompt_len // ps * ps
        split = 0 < prompt < whole
        if finished:
            existing = self.radix.insert_split(key, whole, prompt, held)[0] if split else \
                self.radix.insert(key, whole, held)
        else:  # (the match touches the path only: the pool and the locks in between do not enter it)
            existing, node = self.radix.insert_and_match(key, whole, held)
            if split:
                self.radix.touch_prefix(node, whole, prompt)
        # its own copies of cached pages are freed; its num_blocks stays: its whole pages are now its locked prefix
        # in the tree, a part page (and, inserted a step later, what it took since) stays its own
        self.kv.give_back(s, max(0, min(existing, whole) - prefix) // ps)
        self._unlock(s)
        if finished:
            self.kv.give_back(s, pages - whole // ps)  # (the part page: freed, as SGLang frees the unaligned tail)
            s.num_blocks = 0
        else:
            self.radix.lock(node)
            self.locks[s] = (node, whole)

    def end_step(self) -> None:
        """After a prefill step: its rows' tokens enter the tree (a chunk's at the next iteration, the same).
        Under the overlap loop the last step's result is processed now, after this one was scheduled and ran
        (O1): its finishes free their KV, its complete prefill rows enter the tree; this step's wait for the next."""
        chunked = self.chunked_req
        # rule E: a chunk's tokens enter the tree at the next schedule (stash_chunked_request, scheduler.py
        # 3911-3919), after this step's free tokens are read
        self.stash = [s for s in self.extended if s is chunked] if self.radix is not None else []
        if self.spec is not None:
            self.spec.ran(self.out.spec)
        if not self.overlap:
            self._insert([s for s in self.extended if s is not chunked])
            if self.spec is not None:
                self.spec.process()
        else:
            self._process(keep=1)
            self.deferred = [(s, s.num_computed_tokens) for s in self.extended if s is not chunked] \
                if self.radix is not None else []
            self.inflight = {s for s in self.out.scheduled
                             if s.sampled_since_admission and s.num_computed_tokens == s.num_tokens - 1}
            self._land()
        self.extended = []

    def _insert(self, rows: list[RequestState]) -> None:
        if self.radix is not None:
            for s in rows:
                if s.status is not RequestStatus.FINISHED:
                    self._cache(s)

    @property
    def unprocessed(self) -> bool:
        return bool(self._inflight_all or self._inflight or self.released or self.deferred)

    @property
    def holds_finished(self) -> bool:
        """The last step's finishes (or prefill rows) are still to process, at the next step's end."""
        return bool(self.released or self.deferred)

    def release_held(self) -> int:
        """The fast path's stretch of decodes begins with the last result unprocessed: process it now (in its
        first step nothing reads what it frees but the pool); returns the pages it freed."""
        before = self.kv.free_blocks
        self._process()
        return 0 if before is None else self.kv.free_blocks - before

    def after_stretch(self) -> None:
        """The fast path's decode steps ran: under the overlap loop the last one's result is unprocessed: every
        member sampled in it, its finishers hold their KV."""
        if self.overlap:
            self._land()
            self._inflight_all = True  # (the set is built if read: `inflight`)

    @property
    def inflight(self) -> set[RequestState]:
        if self._inflight_all:
            self._inflight, self._inflight_all = {*self.running, *self.finishing}, False
        return self._inflight

    @inflight.setter
    def inflight(self, value: set[RequestState]) -> None:
        self._inflight, self._inflight_all = value, False

    def _process(self, keep: int = 0) -> None:
        """The overlap loop's process_batch_result of the last step: its finishes and its prefill rows (and under
        speculation its commits, `keep` the results still in flight after it)."""
        if self._inflight or self._inflight_all:
            self._inflight, self._inflight_all = set(), False
        if self.spec is not None:
            self.spec.process(keep)
        if not self.released and not self.deferred:
            return
        finishing, zombies = self.released, self.zombies
        self.released, self.finishing, self.zombies = [], [], []
        for s in finishing:
            if zombies and s in zombies:  # (G6: it left the running batch only now)
                self.running.remove(s)
            self._finish_now(s)
        # (a request retracted since is skipped, as SGLang skips it, and one its prefill's token finished is
        # cached as finished)
        for s, n in self.deferred:
            if s.status is not RequestStatus.WAITING and s not in finishing:
                self._cache(s, n)
        self.deferred = []

    def finish(self, s: RequestState) -> None:
        s.status = RequestStatus.FINISHED
        if self.overlap and self.spec is not None and not self.spec.finishing_by_length(s):
            self.landed_zombies.append(s)  # G6: SGLang cannot tell yet; it stays in the running batch
        else:
            self.running.remove(s)
        if self.overlap:  # (its token is in flight: the next iteration's processing frees its KV)
            self.landed.append(s)
        else:
            self._finish_now(s)

    def _land(self) -> None:
        """This step's finishes are the last step's now: out of the decode batch but holding their KV until its
        result is processed (O2), or under speculation still in it (G6: the zombies)."""
        self.released, self.landed = self.landed, []
        self.zombies, self.landed_zombies = self.landed_zombies, []
        self.finishing = [s for s in self.released if s not in self.zombies] if self.zombies else list(self.released)

    def _finish_now(self, s: RequestState) -> None:
        owned = self.spec.release(s, self.kv) if self.spec is not None else None  # G5
        if self.radix is not None:
            self._cache(s, owned, finished=True)
            self.keys.pop(s, None)  # its prompt's key lives on in the tree only
        else:
            self.kv.give_back(s, s.num_blocks)
            s.num_blocks = 0
        self.entry.pop(s, None)
        self.extend_input_len.pop(s, None)
        self.batch_is_full = False  # the running batch shrank
        if self.on_finish is not None:
            self.on_finish(s)


class WaitingQueue(list):
    """SGLang's waiting_queue: a list in arrival order, re-sorted by the policy; retracted requests go last."""

    __slots__ = ()
    add = list.append
