"""SGLang's PrefillAdder (pinned: SGLang 0.5.23, `srt/managers/schedule_policy.py`) for one prefill batch (S2-S4):
the token, chunk and memory budgets; the usual admission (`add_one`) and the ignore_eos one with the radix cache
off (`add_one_ignore_eos`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.records import Reason
from servesim.engine.request import RequestState, RequestStatus
from servesim.engines.sglang.server_args import CLIP_MAX_NEW_TOKENS, IGNORE_EOS_RESERVE_TOKENS
from servesim.errors import EngineOutOfMemory

if TYPE_CHECKING:
    from servesim.engines.sglang.scheduler import SGLangScheduler


class Adder:
    """SGLang's PrefillAdder for one prefill batch: the three budgets, and the memory left after the offset."""

    __slots__ = ("sched", "rem_total_offset", "cur_rem_offset", "rem_input", "rem_chunk", "new_chunked", "why",
                 "rows", "states", "preempted", "forced")

    def __init__(self, sched: SGLangScheduler, mixed_rows: int) -> None:
        sg, ratio = sched.sg, sched.ratio
        self.sched = sched
        # every running request may still need min(max_new - outputs, 4096) x new_token_ratio tokens (against an
        # unlimited pool the reserve changes nothing: not summed, so the fast path's cohort is not read)
        self.rem_total_offset = mixed_rows
        if sched.kv.free_blocks is not None:
            reserve = sched.pending_reserve
            self.rem_total_offset += reserve if reserve is not None else sched.reserve(ratio, sched.member_clock)
        self.cur_rem_offset = mixed_rows
        self.rem_input = sg.max_prefill_tokens - mixed_rows
        self.rem_chunk = None if sg.chunked_prefill_size is None else sg.chunked_prefill_size - mixed_rows
        self.new_chunked: RequestState | None = None
        self.why = ""
        self.rows: list[tuple[RequestState, int]] = []  # (request, pages): allocated once the batch is built
        self.states: list[tuple[float, int]] | None = None  # ignore_eos admission: (tokens left, held), sorted
        self.preempted: list[RequestState] = []  # priority preemption's victims (preempt_list), queued after
        self.forced: RequestState | None = None  # the chunked request, added whatever memory says

    @property
    def rem_total(self) -> float:
        return self.sched.kv.available - self.rem_total_offset

    def add_chunked(self, s: RequestState) -> None:
        """The chunked request goes first with min(chunk budget, what it has left): the full chunk even when
        memory says 0, so it always progresses."""
        left = s.num_tokens - s.num_computed_tokens
        n = left if self.rem_chunk is None else min(self.rem_chunk, left)
        last = n == left
        self.forced = s
        self._commit(s, n, min(s.request.output_len, CLIP_MAX_NEW_TOKENS) if last else 0)

    def add_one(self, s: RequestState) -> Reason | None:
        """add_one_req: None to go on scanning, else why the scan stops (`s` admitted or not: see `out`)."""
        sched, ps = self.sched, self.sched.sg.page_size
        if s.request.ignore_eos and sched.radix is None:
            return self.add_one_ignore_eos(s)
        cached = sched.match(s)
        max_new = min(max(s.request.output_len - s.num_output_tokens, 0), CLIP_MAX_NEW_TOKENS)
        extend = sched.extend_input_len[s] = s.num_tokens - cached  # init_next_round_input
        # rule F: the extend, one page more (per_req_token_overhead) and the output must be left; the charge
        # (`_commit`) is in whole pages
        total = extend + max_new + ps
        if total >= self.rem_total:
            self.why = f"needs {total} tokens, {max(0, int(self.rem_total))} left after the running requests' reserve"
            return self._reject(s, Reason.NO_TOKEN)
        pages = -(-extend // ps) * ps
        if self.rem_chunk is None and sched.out.scheduled and pages >= self.rem_input:
            self.why = f"needs {pages} tokens, {self.rem_input} of max_prefill_tokens left"
            return self._reject(s, Reason.CHUNK_BUDGET)
        n, reserve = extend, min(s.request.output_len, CLIP_MAX_NEW_TOKENS)
        if self.rem_chunk is not None and pages > self.rem_chunk:
            n = (cached + self.rem_chunk // ps * ps) // ps * ps - cached
            if n <= 0:
                self.why = "the chunk budget is spent"
                return self._reject(s, Reason.CHUNK_BUDGET)
            self.new_chunked, reserve = s, 0
            sched.extend_input_len[s] = n
        return self._admit(s, cached, n, reserve)

    def add_one_ignore_eos(self, s: RequestState) -> Reason | None:
        """add_one_req_ignore_eos (the radix cache off): `s` must fit now, and the pool must last if every
        request (running, in the batch, and `s`) ran to the end, the ones with least left finishing first and
        giving back what they hold: left = max_new x ratio - outputs (ratio 1 for ignore_eos requests)."""
        sched, ps = self.sched, self.sched.sg.page_size
        extend = sched.extend_input_len[s] = s.num_tokens
        pages = -(-extend // ps) * ps
        avail = sched.kv.available
        if pages > min(avail - self.cur_rem_offset, avail - self.rem_total_offset):
            self.why = f"needs {pages} tokens now, {max(0, int(avail - self.rem_total_offset))} left"
            return Reason.NO_TOKEN
        state = sched.ignore_eos_state
        if self.states is None:
            states = [state(r) for r in (s, *sched.running, *sched.finishing, *(r for r, _ in self.rows))]
            self.states = sorted((x for x in states if x[0] > 0), key=lambda x: x[0])
        elif (x := state(s))[0] > 0:
            i = 0
            for i in range(len(self.states)):  # (past the end it goes before the last one, as SGLang's loop does)
                if x[0] <= self.states[i][0]:
                    break
            self.states.insert(i, x)
        cur, freed, states = avail - self.cur_rem_offset - pages, 0, self.states
        for i, (left, held) in enumerate(states):
            bs = len(states) - i
            if cur + freed - left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
                self.why = f"would run out if the {bs} with most left all ran to the end"
                return Reason.NO_TOKEN
            freed += held
        n, reserve = extend, min(s.request.output_len, CLIP_MAX_NEW_TOKENS)
        if self.rem_chunk is not None and extend > self.rem_chunk:
            if self.rem_chunk <= 0:
                self.why = "the chunk budget is spent"
                return Reason.CHUNK_BUDGET
            n, reserve = self.rem_chunk, 0
            self.new_chunked = s
            sched.extend_input_len[s] = n
        return self._admit(s, 0, n, reserve)

    def preempt_to_schedule(self, s: RequestState) -> bool:
        """Priority preemption (P3, `PrefillAdder.preempt_to_schedule`, schedule_policy.py 1727-1759): running
        requests, lowest priority first and the latest to join the queue first among equals, each more than
        `priority_scheduling_preemption_threshold` below `s`, taken until their reserve covers what `s` lacks:
        its extend_input_len (as its last admission attempt left it, 0 if none) + max_new - the memory left. True
        when they were released (rows and memory freed for `s`)."""
        sched = self.sched
        sg = sched.sg
        sign = sg.priority_sign
        if self._over_input_budget(s):
            # NOTE: SGLang 0.5.23 preempts first and then refuses a candidate its input budget cannot take (chunked
            # prefill off, a batch already started): the freed row goes to the next, which the candidate preempts at
            # the next attempt, and so on, no request ever decoding (a livelock Hypothesis found); servesim does not
            # preempt for a candidate add_one_req would refuse whatever the memory
            return False
        # (NOTE: not a request finished with its result in flight, as in a retraction: `SGLangScheduler._victim`)
        order = sorted((r for r in sched.running if r not in self.preempted and r not in sched.zombies),
                       key=lambda r: (r.request.priority * -sign, -sched.entry.get(r, 0)))
        need = (sched.extend_input_len.get(s, 0) + min(s.request.output_len, CLIP_MAX_NEW_TOKENS)
                - self.rem_total)
        victims = []
        for r in order:
            if (s.request.priority - r.request.priority) * -sign <= sg.priority_scheduling_preemption_threshold:
                break
            victims.append(r)
            need -= sched.running_reserve(r)
            if need <= 0:
                break
        if not victims or need > 0:
            return False
        chosen = set(victims)
        for r in [r for r in sched.running if r in chosen]:  # released in running-batch order
            self.rem_total_offset -= sched.running_reserve(r)
            sched.preempt(r, len(sched.running) - 1)
        # NOTE: SGLang extends preempt_list from a set (its order is the objects' hashes); in victim order here
        self.preempted += victims
        return True

    def _over_input_budget(self, s: RequestState) -> bool:
        """add_one_req would refuse `s` for max_prefill_tokens (chunked prefill off, the batch started): its extend,
        past what the tree holds of it, in whole pages, at least what is left."""
        sched, ps = self.sched, self.sched.sg.page_size
        if self.rem_chunk is not None or not sched.out.scheduled:
            return False
        cached = 0
        if sched.radix is not None and not sched.private(s):
            cached = sched.radix.peek(sched.full_key(s), s.num_tokens - 1)[0]
        return -(-(s.num_tokens - cached) // ps) * ps >= self.rem_input

    def _admit(self, s: RequestState, cached: int, n: int, reserve: int) -> Reason | None:
        """`s` goes in with its `cached` tokens (whole pages) and n to compute; then is there room for more?"""
        s.num_computed_tokens = s.num_cached_tokens = cached
        s.num_blocks = cached // self.sched.sg.page_size
        if s.first_cached_tokens < 0:
            s.first_cached_tokens = cached
        if s.num_preemptions:
            self.sched.out.resumed.add(s)
        self._commit(s, n, reserve)
        return self._state()

    def _reject(self, s: RequestState, why: Reason) -> Reason:
        self.sched._unlock(s)
        return why

    def _commit(self, s: RequestState, n: int, reserve: int) -> None:
        """`s` takes n tokens from its num_computed_tokens: the budgets are charged n in whole pages and one page
        more (rule F: `_update_prefill_budget`, prefill_budget.py 156-168), the total its reserve too, the pool the
        pages past the ones it holds (`alloc_extend`: a chunk that ends inside a page, as a mixed batch's chunk
        can, leaves room in it for the next)."""
        sched, ps = self.sched, self.sched.sg.page_size
        start = s.num_computed_tokens
        self.rows.append((s, -(-(start + n) // ps) - -(-start // ps)))
        s.status = RequestStatus.RUNNING
        sched.out.scheduled[s] = n
        tokens = -(-n // ps) * ps
        self.rem_total_offset += tokens + reserve + ps
        self.cur_rem_offset += tokens + ps
        self.rem_input -= tokens
        if self.rem_chunk is not None:
            self.rem_chunk -= tokens

    def allocate(self) -> None:
        """prepare_for_extend: the batch's slots, in batch order, evicting the tree as needed; paged, for the
        extend and one page per row more (rule G: alloc_paged_token_slots_extend, allocation.py 186-201)."""
        sched = self.sched
        ps = sched.sg.page_size
        if ps > 1:
            sched.kv.evict_for(sum(sched.out.scheduled[s] for s, _ in self.rows) + len(self.rows) * ps)
        for s, pages in self.rows:
            if not self.sched.kv.grow(s, pages):
                self._out_of_memory(s, pages)

    def _out_of_memory(self, s: RequestState, pages: int) -> None:
        """SGLang adds the chunked request whatever memory says (`add_chunked_req`) and its alloc_extend then
        raises "Prefill out of memory. Try to lower your batch size." (allocation.py); so does servesim. Any other
        row was checked against the pool: its failing is servesim's bug."""
        sched = self.sched
        if s is not self.forced:
            raise RuntimeError(f"{s.request_id}: no KV for a prefill SGLang admitted (a servesim bug)")
        ps = sched.sg.page_size
        raise EngineOutOfMemory(
            f"sglang: Prefill out of memory, as SGLang 0.5.23 stops: its chunked request "
            f"{s.request_id} needs {pages * ps} more token slots and {sched.kv.available} are free (the running "
            f"requests' slots, drafts' included, took the rest); raise max_total_num_tokens or lower "
            f"max_running_requests")

    def _state(self) -> Reason | None:
        if self.new_chunked is not None:
            # NOTE: SGLang 0.5.23's budget_state goes on scanning while a page-aligned truncation leaves chunk budget
            # (page_size > 1), and a second truncated row would replace its new_chunked_req, leaving the first with
            # half a prompt; one chunked request per batch, as its scheduler keeps one chunked_req
            self.why = "a chunked request takes the rest of the chunk budget"
            return Reason.CHUNK_BUDGET
        return self.budget_state()

    def spent(self) -> bool:
        """budget_state() is CHUNK_BUDGET (SGLang's OTHER): the scan stops before it reads the next candidate."""
        return (self.rem_input <= 0 or self.rem_chunk is not None and self.rem_chunk <= 0) and \
            self.budget_state() is Reason.CHUNK_BUDGET

    def budget_state(self) -> Reason | None:
        """NO_TOKEN when memory is spent, else CHUNK_BUDGET (SGLang's OTHER) when the token or chunk budget is."""
        avail = self.sched.kv.available
        if avail - self.rem_total_offset <= 0 or avail - self.cur_rem_offset <= 0:
            self.why = "memory left after the running requests' reserve is spent"
            return Reason.NO_TOKEN
        if self.rem_input <= 0 or (self.rem_chunk is not None and self.rem_chunk <= 0):
            self.why = "the prefill token budget is spent"
            return Reason.CHUNK_BUDGET
        return None
