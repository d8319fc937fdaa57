"""SGLang 0.5.23's speculative decoding (its spec v2 workers, `srt/speculative/eagle_worker_v2.py`; the flags'
checks in `srt/arg_groups/speculative_hook.py`), chain drafting (`speculative_eagle_topk` 1) only. Source
locations are SGLang 0.5.23's `python/sglang/srt/`; docs/speculative.md lists each rule with its test.

- G1 the flags: `--speculative-algorithm` EAGLE, EAGLE3, NEXTN (SGLang's alias of EAGLE, `spec_registry.py` 183),
  STANDALONE; `_handle_eagle_family` (speculative_hook.py 1072-1283) sets max_running_requests 48 when not given,
  turns mixed chunks off for an algorithm without `supports_mixed_chunk` (STANDALONE; `spec_info.py` 147-160), and
  with topk 1 sets num_draft_tokens = num_steps + 1. Without num_steps it picks the three from the model's
  architecture (`_auto_choose_speculative_params`: (3, 1, 4) for STANDALONE and most models, a (5, 4, 8) tree for
  Llama), which servesim does not read, so only STANDALONE's is taken. The overlap schedule stays on (spec v2).
- G2 the verify batch: every request in a decode batch verifies num_steps drafts: num_draft_tokens = num_steps + 1
  tokens (`EagleVerifyInput.draft_token_num`), whatever it has left; it gains the accepted drafts and one bonus
  token (`_resolve_spec_v2_tokens`, batch_result_processor.py 770-846).
- G3 the KV slots: a prefill sets kv_committed_len = kv_allocated_len = its seq_len (`alloc_for_extend`,
  allocation.py 483-485); each decode step allocates up to ceil_page(kv_committed_len + 2 x alloc_len_per_decode)
  (`eagle_prepare_for_decode`, eagle_utils.py 857-921; `get_alloc_len_per_decode`, allocation_sizing.py 28-70:
  max(num_steps x topk, num_draft_tokens) = num_steps + 1, doubled for the overlap loop's lag);
  kv_committed_len grows by the tokens a verification gains when its result is processed (batch_result_processor.py
  831), by one for a mixed step's decode (378).
- G4 the memory check: a decode batch needs sum(ceil_page(nxt) - ceil_page(allocated)) free
  (`_new_tokens_required_next_decode_spec_v2`, schedule_batch.py 3421-3431), else it retracts as without
  speculation; the prefill adder reads the pool with those slots taken (its own arithmetic is unchanged).
- G5 release: a finished request keeps min(kv_committed_len, prompt + outputs) in the tree (`owned_kv_len`,
  schedule_batch.py 1552-1564) and frees the rest it allocated (`_release_overallocated_kv_indices`,
  mem_cache/common.py 447-476); a retraction frees all it allocated (`release_req`, schedule_batch.py 2360-2395).
- G6 the overlap loop: a batch is scheduled before the last one's result is processed, so the scheduler reads
  output_ids and kv_committed_len without the last step's tokens; only a request whose in-flight result was to
  bring its last token by one is left out of the decode batch (`_reqs_finishing_inflight`, scheduler.py 4444-4457,
  `next_output_finishes_by_length`); one that finished with several tokens in flight is decoded once more and that
  result skipped (batch_result_processor.py 819-822).
- G7 mixed chunks (EAGLE, EAGLE3): the running requests decode one token each in the prefill's forward, no drafts,
  their slots allocated as a decode's (scheduler.py 4375-4410, `mix_with_running`, schedule_batch.py 3267-3365).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.acceptance import Acceptance
from servesim.engine.request import RequestState, RequestStatus
from servesim.engine.speculation import SpecDecodingStats, SpecStep
from servesim.errors import ConfigError

if TYPE_CHECKING:
    from servesim.engine.scheduler import SchedulerOutput
    from servesim.engines.sglang.server_args import SGLangConfig

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
NOT_MODELLED = ("DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP")  # SGLang 0.5.23's other builtins
MIXED_CHUNK = ("EAGLE", "EAGLE3", "NEXTN")  # SpeculativeAlgorithm.supports_mixed_chunk (NEXTN is EAGLE)
FIELDS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
          "speculative_draft_model_path")
SPEC_MAX_RUNNING_REQUESTS = 48  # _handle_eagle_family's default when --max-running-requests is not given
DEFAULT_MAX_RUNNING_REQUESTS = 1024  # servesim's default without speculation
COST_METHOD = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "STANDALONE": "draft_model"}


def check_speculative(sg: SGLangConfig) -> None:
    """The speculative fields' types, and the combinations SGLang 0.5.23 refuses at start-up (G1)."""
    algo = sg.speculative_algorithm
    if algo is None:
        for name in FIELDS:
            if getattr(sg, name) is not None:
                raise ConfigError(f"sglang.{name} has no effect without sglang.speculative_algorithm "
                                  "(--speculative-algorithm); drop it")
        return
    if not isinstance(algo, str):
        raise ConfigError(f"sglang.speculative_algorithm must be a string, got {algo!r}")
    name = algo.upper()
    if name == "NGRAM":
        raise ConfigError("sglang.speculative_algorithm NGRAM: not modelled; SGLang 0.5.23 verifies n-gram drafts as "
                          "a tree (speculative_eagle_topk = speculative_ngram_max_bfs_breadth, 10), and servesim "
                          "models chains; use EAGLE, EAGLE3, NEXTN or STANDALONE")
    if name in NOT_MODELLED:
        raise ConfigError(f"sglang.speculative_algorithm {algo}: not modelled yet; expected one of "
                          f"{', '.join(ALGORITHMS)}")
    if name not in ALGORITHMS:
        raise ConfigError(f"sglang.speculative_algorithm {algo!r}: SGLang 0.5.23 has no such algorithm; expected "
                          f"one of {', '.join(ALGORITHMS)}")
    for field in FIELDS[:3]:
        v = getattr(sg, field)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"sglang.{field} must be an integer >= 1, got {v!r}")
    path = sg.speculative_draft_model_path
    if path is not None and not isinstance(path, str):
        raise ConfigError(f"sglang.speculative_draft_model_path must be a string, got {path!r}")
    steps, topk, tokens = sg.speculative_num_steps, sg.speculative_eagle_topk, sg.speculative_num_draft_tokens
    if steps is None and (topk is not None or tokens is not None):
        given = "speculative_eagle_topk" if topk is not None else "speculative_num_draft_tokens"
        raise ConfigError(f"sglang.{given} without sglang.speculative_num_steps: SGLang 0.5.23 asserts all three "
                          "unset when it chooses them (_handle_eagle_family); give --speculative-num-steps too")
    if steps is None and name != "STANDALONE":
        raise ConfigError(f"sglang.speculative_num_steps: missing; with {name} SGLang 0.5.23 chooses it from the "
                          "model's architecture ((3, 1, 4), or a (5, 4, 8) tree for Llama), which servesim does not "
                          "read; give --speculative-num-steps and --speculative-eagle-topk 1")
    if steps is not None and topk is None:
        raise ConfigError("sglang.speculative_eagle_topk: missing beside speculative_num_steps (SGLang 0.5.23 fails "
                          "at start-up comparing it); give --speculative-eagle-topk 1")
    if topk is not None and topk > 1:
        raise ConfigError(f"sglang.speculative_eagle_topk {topk}: tree drafting is not modelled (its verify tree and "
                          "its per-branch KV); give 1, a chain")
    if name == "STANDALONE" and path is None:
        raise ConfigError("sglang.speculative_draft_model_path: STANDALONE drafts with a model of its own; name it "
                          "(--speculative-draft-model-path)")


def resolved(sg: SGLangConfig) -> dict[str, object]:
    """What SGLang 0.5.23 rewrites at start-up when speculating (G1), as `SGLangConfig` fields."""
    out: dict[str, object] = {"speculative_algorithm": sg.speculative_algorithm.upper()}
    if sg.speculative_num_steps is None:  # STANDALONE's choice (_auto_choose_speculative_params)
        out.update(speculative_num_steps=3, speculative_eagle_topk=1)
    out["speculative_num_draft_tokens"] = out.get("speculative_num_steps", sg.speculative_num_steps) + 1
    if sg.max_running_requests is None:
        out["max_running_requests"] = SPEC_MAX_RUNNING_REQUESTS
    if sg.enable_mixed_chunk and out["speculative_algorithm"] not in MIXED_CHUNK:
        out["enable_mixed_chunk"] = False
    return out


class SGLangSpec:
    """One run's speculative decoding on SGLang's scheduler side: each request's kv_committed_len and
    kv_allocated_len (tokens), the step's verifications, and the results not yet processed (G2-G6)."""

    __slots__ = ("k", "width", "reserve", "ps", "acceptance", "stats", "committed", "allocated", "commits",
                 "step", "last")

    def __init__(self, sg: SGLangConfig, rates: tuple[float, ...] | None, seed: int) -> None:
        self.k = sg.speculative_num_steps
        self.width = sg.speculative_num_draft_tokens  # num_steps + 1: the verify width
        # get_alloc_reserve_per_decode: 2 x get_alloc_len_per_decode = 2 x max(num_steps x topk, width)
        self.reserve = 2 * max(self.k, self.width)
        self.ps = sg.page_size
        self.acceptance = None if rates is None else Acceptance(rates, seed)
        self.stats = SpecDecodingStats(self.k)
        self.committed: dict[RequestState, int] = {}  # kv_committed_len
        self.allocated: dict[RequestState, int] = {}  # kv_allocated_len
        # the tokens each step's result commits (kv_committed_len +=), oldest first, until it is processed
        self.commits: list[dict[RequestState, int]] = []
        self.step = SpecStep()
        self.last: dict[RequestState, int] = {}  # the tokens each request gained in the last step

    # -- a schedule() ------------------------------------------------------------------------------------------
    def begin(self) -> SpecStep:
        self.step = SpecStep()
        return self.step

    def extended(self, s: RequestState, seq_len: int) -> None:
        """G3: a prefill row's slots: committed = allocated = its seq_len."""
        self.committed[s] = self.allocated[s] = seq_len

    def _next(self, s: RequestState) -> int:
        """G3: the length a decode step allocates `s` up to."""
        ps = self.ps
        return max(self.allocated[s], -(-(self.committed[s] + self.reserve) // ps) * ps)

    def decode_pages(self, reqs) -> int:
        """G4: the pages a decode batch of `reqs` needs."""
        ps = self.ps
        return sum(-(-self._next(s) // ps) - -(-self.allocated[s] // ps) for s in reqs)

    def allocate(self, reqs, kv) -> None:
        """G3: alloc_for_spec_decode: evict the tree for the tokens needed (paged: and a page per request,
        alloc_paged_token_slots_extend, allocation.py 186-201), then each request's pages."""
        ps = self.ps
        need = sum(self._next(s) - self.allocated[s] for s in reqs)
        if need > 0:
            kv.evict_for(need + (len(reqs) * ps if ps > 1 else 0))
        for s in reqs:
            nxt = self._next(s)
            pages = -(-nxt // ps) - -(-self.allocated[s] // ps)
            if pages and not kv.grow(s, pages):
                raise RuntimeError(f"{s.request_id}: no KV for a decode SGLang checked (a servesim bug)")
            self.allocated[s] = nxt

    def verify(self, s: RequestState, out: SchedulerOutput, zombie: bool) -> None:
        """G2: `s` verifies num_steps drafts (a request already finished, its result still in flight, is decoded
        too, its work discarded: no verification is counted for it)."""
        out.scheduled[s] = self.width
        if not zombie:
            self.step.drafts[s] = self.width - 1
            self.step.before[s] = self.width - 1

    def finish_schedule(self, out: SchedulerOutput) -> SpecStep:
        """Each verification's acceptance, and what the step's result will commit (G3): a verification its
        accepted drafts and the bonus token, a mixed step's decode one."""
        step = self.step
        step.draw(self.acceptance, self.stats)
        commits = {s: step.accepted[s] + 1 for s in step.drafts}
        for s in out.scheduled:
            if s not in commits and s.sampled_since_admission and s.status is RequestStatus.RUNNING:
                commits[s] = 1  # (a mixed step's decode)
        self.commits.append(commits)
        return step

    # -- results ----------------------------------------------------------------------------------------------
    def ran(self, step: SpecStep) -> None:
        """The step ran: the tokens each request gained (the overlap loop's lag until its result is processed)."""
        self.last = dict(step.outputs)

    def gained(self, s: RequestState) -> int:
        return self.last.get(s, 1)

    def finishing_by_length(self, s: RequestState) -> bool:
        """G6: `s` finished in this step; next_output_finishes_by_length as SGLang will read it at the next
        schedule, this step's tokens in flight: it had one left."""
        return s.request.output_len - (s.num_output_tokens - self.step.outputs.get(s, 1)) <= 1

    def process(self, keep: int = 0) -> None:
        """The results but the last `keep` are processed, oldest first: their requests' kv_committed_len grows
        (one released or retracted since is skipped)."""
        while len(self.commits) > keep:
            for s, n in self.commits.pop(0).items():
                if s in self.committed:
                    self.committed[s] += n

    def release(self, s: RequestState, kv) -> int:
        """G5: `s` finished: its own result's commit applied (processed now), what it keeps for the tree
        (owned_kv_len), its pages past that freed; returns the tokens kept."""
        for commits in self.commits:
            n = commits.pop(s, None)
            if n is not None:
                self.committed[s] += n
                break
        owned = min(self.committed.pop(s), s.request.prompt_len + s.num_output_tokens)
        self.allocated.pop(s)
        keep = -(-owned // self.ps)
        if s.num_blocks > keep:
            kv.give_back(s, s.num_blocks - keep)
            s.num_blocks = keep
        return owned

    def forget(self, s: RequestState) -> None:
        """A retraction frees all `s` allocated (the caller gives its pages back)."""
        self.committed.pop(s, None)
        self.allocated.pop(s, None)


def longest(sg: SGLangConfig) -> int | float:
    """servesim's guard (a request that could never run fails on arrival): under speculation the longest request
    whose last decode's slots fit the whole pool alone, ceil_page(prompt + output - 2 + reserve) <= the pool's
    whole pages (its last decode follows prompt + output - 2 committed tokens at most); else no bound."""
    if sg.speculative_algorithm is None or sg.max_total_num_tokens is None:
        return float("inf")
    ps = sg.page_size
    return sg.max_total_num_tokens // ps * ps + 2 - 2 * max(sg.speculative_num_steps, sg.speculative_num_draft_tokens)


def check_acceptance(cfg, requests) -> None:
    """Speculation needs an acceptance for every request (servesim draws it: `servesim.engine.acceptance`)."""
    if cfg.acceptance_rate is None:
        missing = next((r.request_id for r in requests if r.accept is None), None)
        if missing is not None:
            raise ConfigError(f"sglang.speculative_algorithm: request {missing!r} has no acceptance; give "
                              "acceptance_rate (--acceptance-rate: one rate, or one per draft position) or each "
                              "request's accept list")
