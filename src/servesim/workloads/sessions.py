"""Multi-turn sessions: each turn's prompt extends the conversation so far (earlier prompts and answers).

A conversation is one token stream; turn k's prompt is the stream's first p_k tokens and its answer the next o_k.
Block j of the stream (16 tokens) has one identity, `(session, j)`, whichever turn computes it, so a turn's prompt
hits the blocks of the previous turns' prompts *and answers* (`Request.hash_scope` "sequence": the ids cover
prompt and outputs). A common prefix shared by every conversation (a system prompt) has ids of its own, shared by
all.

Two sources:
- `conversations`: generated, closed loop, as vLLM's multi-turn benchmark (`benchmarks/multi_turn`) drives a
  server: turn k+1 is sent `think_time` seconds after turn k's last token (`Request.after`); the first turns
  arrive at `--request-rate` (all at 0 by default). Turn k's prompt: the common prefix, then k earlier (message,
  answer) pairs, then its own message.
- `session_requests`: a trace's session ids (BurstGPT's `Session ID`, servesim's `session_id`): the rows of one
  session, in arrival order, are its turns, sent at their own timestamps (the trace is what was measured: open
  loop). servesim assumes each turn's prompt begins with the conversation so far; where a prompt is shorter than
  the previous turn's prompt and answer, it shares that many tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servesim.engine.kv import IdView
from servesim.engine.request import Request
from servesim.errors import WorkloadError

SESSION_BLOCK = 16  # tokens per id; split or grouped into any vLLM block size


class StreamIds(IdView):
    """The ids of a conversation's first `num_tokens` tokens, one per 16: blocks wholly inside the common prefix
    are shared by every conversation, the rest are the conversation's own. A view (O(1) memory: a trace of
    millions of turns holds no tuple per block)."""

    __slots__ = ("session", "n", "shared")

    def __init__(self, session: object, num_tokens: int, common_prefix: int = 0) -> None:
        self.session, self.n, self.shared = session, -(-num_tokens // SESSION_BLOCK), common_prefix // SESSION_BLOCK

    def item(self, j: int) -> object:
        return ("common", j) if j < self.shared else ("session", self.session, j)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StreamIds):
            return (self.session, self.n, self.shared) == (other.session, other.n, other.shared)
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash((self.session, self.n, self.shared))

    def __repr__(self) -> str:
        return f"StreamIds({self.session!r}, {self.n} blocks, {self.shared} shared)"


def stream_ids(session: object, num_tokens: int, common_prefix: int = 0) -> StreamIds:
    return StreamIds(session, num_tokens, common_prefix)


def conversations(num_conversations: int, num_turns: int, input_len: int, output_len: int, common_prefix: int = 0,
                  think_time: float = 0.0, request_rate: float = math.inf, seed: int = 0) -> list[Request]:
    """`num_conversations` conversations of `num_turns` turns (see the module's docstring); ids `c{i}-t{k}`."""
    from servesim.workloads.synthetic import arrival_times

    for name, value, low in (("--num-conversations", num_conversations, 1), ("--num-turns", num_turns, 1),
                             ("--turn-input-len", input_len, 1), ("--turn-output-len", output_len, 1),
                             ("--common-prefix-len", common_prefix, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise WorkloadError(f"{name}: got {value!r}; expected an integer >= {low}")
    if not (isinstance(think_time, int | float) and 0 <= think_time < math.inf):
        raise WorkloadError(f"--think-time: got {think_time!r}; expected a finite number of seconds >= 0")
    starts = arrival_times(num_conversations, request_rate, 1.0, np.random.default_rng(seed))
    out = []
    for c in range(num_conversations):
        for k in range(num_turns):
            prompt = common_prefix + k * (input_len + output_len) + input_len
            out.append(Request(
                f"c{c}-t{k}", float(starts[c]), prompt, output_len,
                hash_ids=stream_ids(c, prompt + output_len, common_prefix), hash_block_size=SESSION_BLOCK,
                hash_scope="sequence", after=f"c{c}-t{k - 1}" if k else None, think_time=think_time if k else 0.0,
            ))
    out.sort(key=lambda r: r.arrival_time)  # stable: a conversation's turns stay in order
    return out


def session_requests(requests: list[Request], session_ids: np.ndarray) -> list[Request]:
    """A trace's requests with their sessions' stream ids (see the module's docstring); requests in arrival
    order, `session_ids` one per request. A row that carries its own hash_ids keeps them: they are its prompt's
    identity as the trace gives it."""
    from dataclasses import replace

    if len(session_ids) != len(requests):
        raise ValueError(f"{len(session_ids)} session ids for {len(requests)} requests")
    return [r if r.hash_ids else replace(r, hash_ids=stream_ids(int(sid), r.prompt_len + r.output_len),
                                         hash_block_size=SESSION_BLOCK, hash_scope="sequence")
            for r, sid in zip(requests, session_ids.tolist(), strict=True)]
