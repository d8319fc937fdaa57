"""A request as the workload describes it, and its mutable state inside the engine.

Field names follow vLLM v1 (`num_computed_tokens`, `num_output_tokens`, `num_tokens`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim.engine.token_runs import LiveSteps


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # not yet admitted, or preempted by recompute and back in the queue
    RUNNING = "running"
    SWAPPED = "swapped"  # preempted by swap: its KV sits in the host pool
    FINISHED = "finished"


def _check_count(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")


HASH_SCOPES = ("prompt", "sequence")


@dataclass(frozen=True, slots=True)
class Request:
    """What arrives: an id, an arrival time in seconds, and how many tokens go in and come out."""

    request_id: str
    arrival_time: float
    prompt_len: int
    output_len: int
    priority: int = 0  # lower runs first (vLLM's priority policy)
    # the prompt's content, one id per KV block (Mooncake's convention; equal ids after equal ids = equal tokens),
    # for prefix caching; None: the prompt shares nothing with any other
    hash_ids: tuple | None = None
    hash_block_size: int | None = None  # tokens per hash id (Mooncake: 512); None: the engine's block_size
    # what hash_ids cover: "prompt" (Mooncake: the prompt's blocks; generated tokens are known only as generated)
    # or "sequence" (the blocks of prompt and outputs: a conversation's token stream, so that the next turn's
    # prompt, which extends this turn's prompt and answer, hits this turn's blocks)
    hash_scope: str = "prompt"
    # closed loop (multi-turn sessions): the request (the conversation's previous turn) this one is sent after;
    # it arrives `think_time` seconds after that one's last token, and not before `arrival_time`
    after: str | None = None
    think_time: float = 0.0
    # vLLM's and SGLang's sampling parameter: generate to output_len whatever the model samples. servesim's
    # requests always do; SGLang's admission treats them apart (`servesim.engines.sglang`)
    ignore_eos: bool = False
    # whether the client sends max_tokens = output_len (vllm bench serve, every benchmark client here): then a
    # request with prompt + output beyond max_model_len is refused (HTTP 400). False: no max_tokens (offline
    # generation, or an API call without it): only a prompt of max_model_len tokens or more is refused, and the
    # output is cut at max_model_len - prompt_len (vLLM's check_stop / get_max_tokens)
    sends_max_tokens: bool = True
    # speculative decoding (`servesim.engine.acceptance`): the drafts accepted at its i-th verification step,
    # accept[i % len] (None: the run's acceptance rates decide); and the V1 model runner's variable proposals, the
    # i-th of min(draft_lens[i % len], K) drafts (None: K each, as vLLM 0.33's default V2 runner proposes)
    accept: tuple[int, ...] | None = None
    draft_lens: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        _check_count("prompt_len", self.prompt_len, 1)
        _check_count("output_len", self.output_len, 1)
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TypeError(f"priority must be an integer, got {self.priority!r}")
        t = self.arrival_time
        if isinstance(t, bool) or not isinstance(t, int | float) or not t >= 0 or t == float("inf"):
            raise ValueError(f"arrival_time must be a finite number of seconds >= 0, got {t!r}")
        if self.hash_scope not in HASH_SCOPES:
            raise ValueError(f"hash_scope must be one of {', '.join(HASH_SCOPES)}, got {self.hash_scope!r}")
        w = self.think_time
        if isinstance(w, bool) or not isinstance(w, int | float) or not w >= 0 or w == float("inf"):
            raise ValueError(f"think_time must be a finite number of seconds >= 0, got {w!r}")
        if self.after == self.request_id:
            raise ValueError(f"request {self.request_id!r} cannot be sent after itself")
        for name in ("ignore_eos", "sends_max_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("accept", "draft_lens"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, tuple) or not v or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in v)):
                raise ValueError(f"{name} must be a non-empty tuple of integers >= 0, got {v!r}")

    @property
    def hashed_len(self) -> int:
        """The tokens its hash_ids cover: the prompt, or prompt and outputs."""
        return self.prompt_len + (self.output_len if self.hash_scope == "sequence" else 0)


def unchecked_requests(ids, arrival_time, prompt_len, output_len, priority, hash_ids=None,
                       hash_block_size: int | None = None) -> list[Request]:
    """`Request`s from columns their owner has already checked in bulk (a `RequestTable`): the same objects as
    `Request(...)` builds, without its per-object checks (a million requests: ~2 s of them)."""
    new, put = object.__new__, object.__setattr__
    out = []
    if hash_ids is None:
        hash_ids = [None] * len(ids)
    for rid, t, p, o, q, h in zip(ids, arrival_time, prompt_len, output_len, priority, hash_ids, strict=True):
        r = new(Request)
        put(r, "request_id", rid)
        put(r, "arrival_time", t)
        put(r, "prompt_len", p)
        put(r, "output_len", o)
        put(r, "priority", q)
        put(r, "hash_ids", h)
        put(r, "hash_block_size", hash_block_size if h is not None else None)
        put(r, "hash_scope", "prompt")
        put(r, "after", None)
        put(r, "think_time", 0.0)
        put(r, "ignore_eos", False)
        put(r, "sends_max_tokens", True)
        put(r, "accept", None)
        put(r, "draft_lens", None)
        out.append(r)
    return out


@dataclass(slots=True, eq=False)
class RequestState:
    """The engine's view of one request. Mutated only by the engine's verbs (admit, allocate, preempt, finish)."""

    request: Request
    index: int  # position in the workload, the tie-breaker everywhere
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_blocks: int = 0  # KV blocks held on the GPU
    num_swapped_blocks: int = 0  # KV blocks held in the host pool (swap mode)
    sampled_since_admission: bool = False  # vLLM's prefill/decode distinction for the step record
    resumed: bool = False  # set on (re)admission after a preemption, cleared after the next step
    # vLLM's `is_prefill_chunk`: its last chunk stopped short of its known tokens (a partial prefill, which samples
    # nothing); read by prefill_schedule_interval
    is_prefill_chunk: bool = False
    num_preemptions: int = 0
    num_prefill_chunks: int = 0  # prompt chunks scheduled, recomputation after a preemption included
    preempted_at: float | None = None  # start of the step that preempted it, until it resumes
    time_preempted: float = 0.0  # seconds from each preemption to the start of the step that resumed it
    # timeline (seconds); output tokens as runs of steps: [first step, count, first step, count, ...]
    first_scheduled_time: float | None = None
    token_runs: list[int] = field(default_factory=list)
    finish_time: float | None = None
    decoding_since: int = -1  # >= 0: in the engine's decode cohort since that step, fields not yet advanced
    # prefix caching (`servesim.engines.vllm.kv_cache_manager`): the blocks held, in order; the chained block hashes
    # known so far; the prefix-hit tokens this (re)admission started with (for its step record)
    block_ids: list[int] | None = None  # (None until it holds blocks: a million requests hold no empty lists)
    block_hashes: list | None = None
    num_cached_tokens: int = 0
    num_hashed_blocks: int = 0  # its first blocks registered in the prefix cache
    # vLLM's `num_cached_tokens`: the prefix-hit tokens of its first admission (-1 until first scheduled), and the
    # request whose block served the last of those hits (its index; -1: none)
    first_cached_tokens: int = -1
    cached_from: int = -1
    # speculative decoding (`servesim.engines.vllm.spec_decode`): the drafts it holds for its next step (the length
    # of vLLM's spec_token_ids); verification steps, proposals, drafts verified and accepted so far
    num_spec_token_ids: int = 0
    num_verify_steps: int = 0
    num_proposals: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_tokens(self) -> int:
        """Prompt plus outputs so far: what the KV cache must eventually hold."""
        return self.request.prompt_len + self.num_output_tokens

    @property
    def num_tokens_needed(self) -> int:
        """Tokens to compute before the next sample; 0 once finished (async: waiting for release)."""
        if self.status is RequestStatus.FINISHED:
            return 0
        return self.request.prompt_len + self.num_output_tokens - self.num_computed_tokens

    def sampled(self, step: int, count: int, live: LiveSteps) -> None:
        """Record `count` tokens sampled from `step` on, in it and the next count - 1 live steps
        (`servesim.engine.token_runs`: steps in which nobody decoded do not break a run)."""
        runs = self.token_runs
        if live.extends(runs, step):
            runs[-1] += count
        else:
            runs += (step, count)

    def unsample(self, tokens: int = 1) -> None:
        """Take back its last sampling step, which brought it `tokens` (SGLang's overlap loop drops a retracted
        request's in-flight tokens: one, or a verification's under speculative decoding)."""
        self.num_output_tokens -= tokens
        runs = self.token_runs
        runs[-1] -= 1
        if not runs[-1]:
            del runs[-2:]

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
