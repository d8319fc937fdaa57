"""The frozen per-step record and the per-request timeline.

Everything downstream (metrics, explanations, exports, timelines) reads only these. Field names are those of
the conformance traces recorded from vLLM v1 (`../shared/conformance/traces/`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np


class Kind(str, enum.Enum):
    PREFILL = "prefill"  # the request has not sampled since its last admission
    DECODE = "decode"


class Reason(str, enum.Enum):
    """Why a request that could have run got nothing in a step."""

    TOKEN_BUDGET = "token_budget"  # max_num_batched_tokens spent
    MAX_NUM_SEQS = "max_num_seqs"  # the running set is full
    KV_BLOCKS = "kv_blocks"  # not enough free KV blocks
    ADMISSION_FROZEN = "admission_frozen"  # a preemption this step stops all admissions (vLLM)
    BLOCKED_BEHIND_HEAD = "blocked_behind_head"  # the head of the queue could not be admitted; no skipping
    BATCH_CLOSED = "batch_closed"  # static batching: nothing joins a running batch
    PREEMPTED = "preempted"  # was preempted in this step
    PREFILL_INTERVAL = "prefill_schedule_interval"  # vLLM 0.33: a decode step between prefill steps
    # SGLang's (policy sglang)
    NO_TOKEN = "no_token"  # memory after the running requests' reserve (new_token_ratio x outputs left) too small
    CHUNK_BUDGET = "chunk_budget"  # chunked_prefill_size / max_prefill_tokens spent on requests ahead
    MAX_RUNNING_REQUESTS = "max_running_requests"  # no request row left (the chunked request holds one)
    BATCH_FULL = "batch_is_full"  # the running batch was marked full: no prefill is tried until it shrinks
    PREFILL_FIRST = "prefill_first"  # a running request's decode waits while a prefill batch runs
    # TensorRT-LLM's (policy trtllm)
    LIFETIME_KV = "lifetime_kv"  # GUARANTEED_NO_EVICT: its whole lifetime of KV does not fit beside the reservations
    REUSE_SKIP = "reuse_skip"  # beneficialToSkip: it waits a step to reuse a block another request computes now


@dataclass(frozen=True, slots=True)
class ScheduledEntry:
    id: str
    num_scheduled_tokens: int
    kind: Kind
    num_computed_tokens_before: int
    num_tokens_before: int  # prompt + outputs so far
    resumed: bool  # first step after a preemption
    samples_token: bool  # the chunk reaches num_tokens, so one token is sampled
    num_blocks: int  # KV blocks held after this step's allocation
    num_cached_tokens: int = 0  # prefix-cache hit tokens this (re)admission started with (not counted above)
    # speculative decoding: drafts among num_scheduled_tokens (verified this step), of them accepted, the drafts
    # the request held before schedule(), and whether the scheduler padded them in (vLLM: never accepted)
    num_spec_tokens: int = 0
    num_accepted: int = 0
    drafts_before: int = 0
    spec_padded: bool = False


@dataclass(frozen=True, slots=True)
class Waiting:
    """A request that got nothing this step, and why. `detail` carries numbers (e.g. blocks needed vs free)."""

    id: str
    reason: Reason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Preemption:
    """One preemption event, as the ledger keeps it."""

    step: int
    id: str
    mode: str  # "recompute" | "swap" | "recompute (swap pool full)" | "drop (last token in flight)" (async)
    tokens_discarded: int  # computed tokens thrown away (recompute), else 0
    bytes_moved: int  # KV bytes copied to host (swap), else 0
    blocks_freed: int
    swap_time: float  # seconds added to the step for the copy out (swap)
    repeat: bool  # the victim had been preempted before (thrash)


class Scheduled(Sequence[ScheduledEntry]):
    """A step's scheduled entries: the decode cohort's one-token decodes first, then what `schedule()` chose.

    Most steps of a long run are the cohort's decodes, and one `ScheduledEntry` object per decode costs ~2.5 us
    and ~100 bytes (a one-hour trace at record="full": ~12 M of them). The cohort's part is kept as the ids and
    contexts shared by every step of a stretch plus the step's offset, and an entry is made only when read. A
    read-only sequence equal to the tuple of its entries; the reads that scan every step (`has`, `prefill`,
    `rest`, the token counts) never make the cohort's entries.
    """

    __slots__ = ("ids", "contexts", "offset", "blocks", "block_size", "rest")

    def __init__(self, rest: tuple[ScheduledEntry, ...] = (), ids: tuple[str, ...] = (),
                 contexts: tuple[int, ...] = (), offset: int = 0, blocks: tuple[int, ...] | None = None,
                 block_size: int = 16) -> None:
        self.rest = rest  # what schedule() chose, in order
        self.ids = ids  # the cohort's members, in running order
        self.contexts = contexts  # each member's num_computed_tokens `offset` steps before this one
        self.offset = offset
        self.blocks = blocks  # members' blocks when they do not grow (lifetime reservation), else None
        self.block_size = block_size

    def decode(self, i: int) -> ScheduledEntry:
        c = self.contexts[i] + self.offset
        blocks = -(-(c + 1) // self.block_size) if self.blocks is None else self.blocks[i]
        return ScheduledEntry(self.ids[i], 1, Kind.DECODE, c, c + 1, False, True, blocks)

    def __len__(self) -> int:
        return len(self.ids) + len(self.rest)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return tuple(self)[i]
        n = len(self.ids)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("Scheduled index out of range")
        return self.decode(i) if i < n else self.rest[i - n]

    def __iter__(self) -> Iterator[ScheduledEntry]:
        for i in range(len(self.ids)):
            yield self.decode(i)
        yield from self.rest

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Scheduled | tuple | list):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Scheduled({tuple(self)!r})"

    # -- reads that scan every step without making the cohort's entries -------------------------------------------
    def has(self, request_id: str) -> bool:
        return request_id in self.ids or any(e.id == request_id for e in self.rest)

    def prefill(self) -> list[ScheduledEntry]:
        """The prompt chunks (the cohort's entries are all decodes)."""
        return [e for e in self.rest if e.kind is Kind.PREFILL]

    @property
    def total_tokens(self) -> int:
        return len(self.ids) + sum(e.num_scheduled_tokens for e in self.rest)

    @property
    def num_decodes(self) -> int:
        return len(self.ids) + sum(e.kind is Kind.DECODE for e in self.rest)

    @property
    def prefill_tokens(self) -> int:
        return sum(e.num_scheduled_tokens for e in self.rest if e.kind is Kind.PREFILL)


def as_scheduled(entries: Sequence[ScheduledEntry]) -> Scheduled:
    return entries if isinstance(entries, Scheduled) else Scheduled(tuple(entries))


@dataclass(frozen=True, slots=True)
class StepRecord:
    step: int
    start_time: float  # seconds
    duration: float  # seconds, cost model plus swap traffic
    arrivals: tuple[str, ...]
    scheduled: Scheduled  # a sequence of ScheduledEntry (a tuple given here is taken as one)
    preempted: tuple[str, ...]
    finished: tuple[str, ...]  # produced their last token in this step
    waiting: tuple[Waiting, ...]  # requests present that got nothing, with why
    num_running_after: int
    num_waiting_after: int
    free_blocks_after_schedule: int | None  # None when KV is unlimited
    free_blocks_after_step: int | None
    token_budget: int
    swap_in_blocks: int = 0
    swap_out_blocks: int = 0
    finished_observed: tuple[str, ...] = ()  # async scheduling: finishes whose blocks come back this step
    # prefix caching: free blocks that still hold cached KV (evictable; counted in free_blocks_after_schedule)
    cached_free_blocks_after_schedule: int | None = None
    # policy sglang: the forward mode ("prefill" | "decode" | "mixed"), the new_token_ratio in force at schedule,
    # the chunked request after schedule (else None for every policy)
    forward_mode: str | None = None
    new_token_ratio: float | None = None
    chunked_request: str | None = None
    # vLLM's speculative decoding: the drafter proposes nothing after this step (nobody could use the drafts)
    skip_drafts: bool = False

    def __post_init__(self) -> None:
        if type(self.scheduled) is not Scheduled:
            object.__setattr__(self, "scheduled", as_scheduled(self.scheduled))

    @property
    def end_time(self) -> float:
        return self.start_time + self.duration

    @property
    def total_scheduled_tokens(self) -> int:
        return self.scheduled.total_tokens

    @property
    def num_decodes(self) -> int:
        return self.scheduled.num_decodes

    @property
    def prefill_tokens(self) -> int:
        return self.scheduled.prefill_tokens


class TokenClock:
    """The end time of every step of a run, shared by all its timelines: a token sampled in step i came at
    `ends[i]`. Timelines keep step indices, in runs, instead of a float per token (a million requests' tokens
    would not fit in memory as Python floats). `skip`: the steps in which nobody decoded, which a timeline's runs
    step over (`servesim.engine.token_runs`); None: runs are of consecutive steps."""

    __slots__ = ("ends", "skip")

    def __init__(self, ends: np.ndarray, skip: np.ndarray | None = None) -> None:
        self.ends = ends
        self.skip = skip if skip is not None and skip.any() else None

    def times(self, runs: tuple[int, ...]) -> tuple[float, ...]:
        """The token times of runs of consecutive steps (a `RequestTimeline`'s `token_steps`)."""
        out: list[float] = []
        ends = self.ends
        for i in range(0, len(runs), 2):
            out.extend(ends[runs[i]:runs[i] + runs[i + 1]].tolist())
        return tuple(out)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenClock) and (self is other or (
            np.array_equal(self.ends, other.ends) and (self.skip is None) == (other.skip is None)
            and (self.skip is None or np.array_equal(self.skip, other.skip))))

    __hash__ = None


@dataclass(frozen=True, slots=True)
class RequestTimeline:
    """One request's life in seconds: arrival, first scheduled, every token, finish.

    Tokens are kept as runs of consecutive steps (`token_steps` = (first step, count, first step, count, ...)):
    a decoding request samples in every step, so one run per admission. `token_times` expands them.
    """

    id: str
    arrival_time: float
    prompt_len: int
    output_len: int
    first_scheduled_time: float | None
    token_steps: tuple[int, ...]
    finish_time: float | None
    num_preemptions: int
    priority: int = 0
    num_prefill_chunks: int = 0  # prompt chunks, recomputation after a preemption included
    time_preempted: float = 0.0  # seconds spent preempted (preemption step start to resuming step start)
    clock: TokenClock | None = None
    num_cached_tokens: int = 0  # vLLM's: the prefix-cache hit tokens of its first admission
    cached_from: str | None = None  # the request whose cached blocks served those hits (the last hit block's)
    # the tokens it produced, when a step can bring several (speculative decoding: `token_steps` then holds the
    # steps that brought tokens, as a client sees its streamed chunks); None: one token per token step
    num_output_tokens: int | None = None

    @property
    def token_times(self) -> tuple[float, ...]:
        """When each output token was sampled (the end of its step), in seconds."""
        return self.clock.times(self.token_steps) if self.token_steps else ()

    @property
    def num_tokens(self) -> int:
        if self.num_output_tokens is not None:
            return self.num_output_tokens
        return sum(self.token_steps[1::2])

    @property
    def first_token_time(self) -> float | None:
        return float(self.clock.ends[self.token_steps[0]]) if self.token_steps else None

    @property
    def ttft(self) -> float | None:
        first = self.first_token_time
        return None if first is None else first - self.arrival_time

    @property
    def e2el(self) -> float | None:
        return None if self.finish_time is None else self.finish_time - self.arrival_time

