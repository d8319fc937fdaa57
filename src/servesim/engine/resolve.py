"""Before a run: the engine resolves its configuration (`EngineSpec.resolve`, in its package); the checks every
engine shares are made here (request ids, closed-loop order, block identities, requests the KV pool can never
hold), as an engine validates at start-up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from servesim.cost import CostModel
from servesim.engine.kv import blocks_for
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.engines.registry import engine_for
from servesim.errors import ConfigError


def resolve_config(
    config: EngineConfig, policy: str, requests: Sequence[Request], cost: CostModel | None = None
) -> EngineConfig:
    """Fill the defaults and reject what cannot work, before simulating (as vLLM validates at start-up).

    The engine of `policy` fills its defaults for the cost model's GPU and model (vLLM's: `vllm serve`'s budget
    and seats, `max_model_len` from the model, the KV pool from GPU memory; SGLang's: its token pool from
    `mem_fraction_static`). A config section of another engine is refused. Requests longer than `max_model_len`
    are not refused here: they fail when they arrive (`too_long`), as vLLM rejects them.
    """
    _check_ids(requests)
    _check_after(requests)
    spec = engine_for(policy)
    for section in config.sections_given():
        if section != spec.section:
            raise ConfigError(f"the {section} section of the config has no meaning under policy {policy}")
    scheduler = spec.scheduler(policy)
    _check_unread(config, scheduler, policy)
    cfg = spec.resolve(config, scheduler, requests, cost)
    _check_hash_ids(cfg, requests)
    _check_fits(cfg, requests)
    return cfg


def _check_unread(config: EngineConfig, scheduler, policy: str) -> None:
    """A shared knob the policy never reads is refused when given, with the reason (`Scheduler.unread`)."""
    base = type(config)()
    for knob, why in scheduler.unread.items():
        if getattr(config, knob) != getattr(base, knob):
            raise ConfigError(f"{knob} {getattr(config, knob)!r} has no effect under policy {policy}: {why}; "
                              "drop it")


def _check_ids(requests: Sequence[Request]) -> None:
    if len({r.request_id for r in requests}) != len(requests):
        seen: dict[str, int] = {}
        for i, r in enumerate(requests):
            if r.request_id in seen:
                raise ConfigError(f"request_id {r.request_id!r}: used by requests {seen[r.request_id]} and {i} "
                                  "(counting from 0); expected every request id once")
            seen[r.request_id] = i


def _check_hash_ids(cfg: EngineConfig, requests: Sequence[Request]) -> None:
    """Block identities (`hash_ids`) that the KV blocks can be cut from."""
    if cfg.enable_prefix_caching:
        for r in requests:
            if r.hash_ids is None:
                continue
            hbs = r.hash_block_size or cfg.block_size
            if hbs % cfg.block_size and cfg.block_size % hbs:
                raise ConfigError(f"request {r.request_id}: hash_ids of {hbs}-token blocks cannot be split into "
                                  f"or grouped as block_size {cfg.block_size}; expected a multiple or a divisor")
            if len(r.hash_ids) != blocks_for(r.hashed_len, hbs):
                what = "prompt" if r.hash_scope == "prompt" else "prompt and output"
                raise ConfigError(f"request {r.request_id}: {len(r.hash_ids)} hash_ids for a {r.hashed_len}-token "
                                  f"{what}; expected one per {hbs}-token block ({blocks_for(r.hashed_len, hbs)})")


def _check_fits(cfg: EngineConfig, requests: Sequence[Request]) -> None:
    """Every request allowed (not longer than max_model_len) fits in the whole KV pool."""
    longest = max((r.prompt_len + r.output_len for r in requests), default=1)
    allowed = min(longest, cfg.max_model_len)
    extra = cfg.kv_blocks_per_request  # (a hybrid model's sliding-window blocks: `servesim.engine.kv`)
    if cfg.usable_blocks is None or blocks_for(allowed - 1, cfg.block_size) + extra <= cfg.usable_blocks:
        return  # the longest request allowed fits in the pool, so every one does
    for r in requests:
        r = fit_to_max_model_len(r, cfg.max_model_len)
        if r is None:
            continue  # fails on arrival
        # the last output token is never fed back, so the cache holds at most prompt + output - 1 tokens
        need = blocks_for(r.prompt_len + r.output_len - 1, cfg.block_size) + extra
        if need > cfg.usable_blocks:
            raise ConfigError(
                f"request {r.request_id} needs {need} KV blocks of {cfg.block_size} tokens but the whole pool "
                f"has {cfg.usable_blocks} usable (num_gpu_blocks {cfg.num_gpu_blocks} minus vLLM's null block)"
            )


def too_long(requests: Sequence[Request], max_model_len: int) -> tuple[list[int], list[int]]:
    """The requests beyond `max_model_len`, as vLLM 0.33's front end treats them (`fit_to_max_model_len`):
    (indices rejected, indices whose output is clamped)."""
    rejected, clamped = [], []
    for i, r in enumerate(requests):
        if r.prompt_len + r.output_len > max_model_len:
            (rejected if fit_to_max_model_len(r, max_model_len) is None else clamped).append(i)
    return rejected, clamped


def fit_to_max_model_len(r: Request, max_model_len: int) -> Request | None:
    """The request as vLLM 0.33 runs it under `max_model_len`, or None where it is rejected on arrival. Rejected: a
    prompt of max_model_len tokens or more (`_validate_prompt_len`: no room for one output token), or, when the
    client sends max_tokens (`Request.sends_max_tokens`, as `vllm bench serve` does), prompt + max_tokens beyond
    it ("'max_tokens' ... is too large"; the client counts it as failed). Clamped: a request without max_tokens
    runs with max_model_len - prompt_len output tokens (`get_max_tokens`; offline, `check_stop` stops it there)."""
    if r.prompt_len + r.output_len <= max_model_len:
        return r
    if r.sends_max_tokens or r.prompt_len >= max_model_len:
        return None
    return replace(r, output_len=max_model_len - r.prompt_len)


def _check_after(requests: Sequence[Request]) -> None:
    """A closed-loop request is sent after an earlier request of the workload (a conversation's previous turn)."""
    if not any(r.after is not None for r in requests):
        return
    seen: set[str] = set()
    for i, r in enumerate(requests):
        if r.after is not None and r.after not in seen:
            raise ConfigError(f"request {r.request_id!r} (request {i}, counting from 0): after={r.after!r} names no "
                              "earlier request; expected the id of a request before it in the workload")
        seen.add(r.request_id)
