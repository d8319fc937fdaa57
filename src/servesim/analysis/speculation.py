"""What speculative decoding did in a run, in sentences: how many drafts were accepted and wasted, what it changed
against the same run without it, and the batch size past which verifying drafts stopped paying.

The crossover compares decode-only steps of each batch size in the two runs: a request gains the run's acceptance
length (tokens per verification) in a speculative step and one token in a plain one, so speculation pays at batch
size b while acceptance length / mean step time with it exceeds 1 / mean step time without it. As the batch grows
the verify steps (1 + K tokens per request) become compute-bound and their time grows faster than the plain
steps', and the gain falls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from servesim.analysis.words import ms
from servesim.engine.result import SimResult
from servesim.engines.config import EngineConfig


def speculation_sentences(result: SimResult, plain: SimResult | None = None) -> list[str]:
    spec = result.spec_decoding
    if spec is None or not spec.num_drafts:
        return []
    k = spec.num_spec_tokens
    cfg = result.config.speculative_config
    method = cfg.method if cfg is not None else result.config.sglang.speculative_algorithm  # (SGLang's flag)
    out = [f"Speculation ({method}, K = {k}) accepted {spec.acceptance_length - 1:.2f} of {k} drafts per "
           f"verification ({spec.acceptance_rate:.1%} of {spec.num_draft_tokens:,} drafted tokens; "
           f"{spec.acceptance_length:.2f} tokens a step per request); {spec.num_wasted_tokens:,} drafted tokens were "
           "rejected, computed for nothing."]
    if plain is None:
        return out
    from servesim.analysis.benchmark import benchmark_metrics

    a, b = benchmark_metrics(plain), benchmark_metrics(result)
    out.append(f"Against the same run without it: TPOT {a['tpot'].mean:.1f} -> {b['tpot'].mean:.1f} ms, ITL (per "
               f"streamed chunk) {a['itl'].mean:.1f} -> {b['itl'].mean:.1f} ms, output throughput "
               f"{a.output_throughput:,.0f} -> {b.output_throughput:,.0f} tok/s.")
    cross = crossover(result, plain)
    if cross:
        out.append(cross)
    return out


def speculates(result: Any) -> bool:
    """Whether a run (a `SimResult`; a cluster's is not compared) drafted anything."""
    spec = getattr(result, "spec_decoding", None)
    return spec is not None and bool(spec.num_drafts)


def plain_config(config: EngineConfig, policy: str) -> EngineConfig | None:
    """A resolved speculative run's config without speculative decoding, on the same KV pool (speculation's effect
    on time alone): the engine's own (SGLang's flags) or vLLM's `speculative_config` dropped; None when the run did
    not speculate."""
    from servesim.engines.registry import engine_for

    own = engine_for(policy).unspeculative
    if own is not None:
        return own(config)
    if config.speculative_config is None:
        return None
    return replace(config, speculative_config=None, acceptance_rate=None,
                   kv_bytes_per_token=EngineConfig().kv_bytes_per_token)  # (the target's alone, derived again)


def plain_run(result: SimResult, requests: Sequence[Any], cost: Any) -> SimResult | None:
    """The same requests run again without speculation (`plain_config`), its step log kept; None when `result`
    did not speculate."""
    from servesim.engine import simulate

    cfg = plain_config(result.config, result.policy) if speculates(result) else None
    return None if cfg is None else simulate(requests, cfg, result.policy, cost, record="summary")


def speedup(result: SimResult, plain: SimResult) -> float | None:
    """Mean TPOT without speculation over mean TPOT with it (>1: speculation paid), as vllm bench serve means
    them; None where a run has no TPOT (every output one token)."""
    from servesim.analysis.benchmark import benchmark_metrics

    a, b = benchmark_metrics(plain)["tpot"].mean, benchmark_metrics(result)["tpot"].mean
    return a / b if a and b else None


def decode_step_times(result: SimResult) -> dict[int, float]:
    """Mean duration of the decode-only steps at each batch size (requests decoding)."""
    log = result.step_log
    if log is None:
        return {}
    dec, pre, dur = log.num_decodes, log.prefill_tokens, log.duration
    keep = (pre == 0) & (dec > 0)
    out: dict[int, float] = {}
    for b in np.unique(dec[keep]):
        out[int(b)] = float(dur[keep & (dec == b)].mean())
    return out


def gains(result: SimResult, plain: SimResult) -> dict[int, float]:
    """Per decoding request, a verify step's tokens per second over a plain decode step's, at each batch size both
    runs decoded at alone (no prefill beside): acceptance length x plain step time / verify step time."""
    return _gains(result, decode_step_times(result), decode_step_times(plain))


def _gains(result: SimResult, with_spec: dict[int, float], without: dict[int, float]) -> dict[int, float]:
    length = result.spec_decoding.acceptance_length
    return {b: length * without[b] / with_spec[b] for b in sorted(set(with_spec) & set(without))}


def crossover(result: SimResult, plain: SimResult) -> str | None:
    """The gain per decoding request at the smallest and largest batch both runs decoded at, and the batch size
    past which it falls below 1 (if it does)."""
    with_spec, without = decode_step_times(result), decode_step_times(plain)
    gain = _gains(result, with_spec, without)
    if not gain:
        return None
    sizes = sorted(gain)
    lo, hi = sizes[0], sizes[-1]
    text = (f"Per decoding request, a verify step brought {gain[lo]:.2f}x the tokens per second of a plain one at "
            f"batch size {lo} ({ms(with_spec[lo])} against {ms(without[lo])} a step)")
    if hi != lo:
        text += f" and {gain[hi]:.2f}x at {hi} ({ms(with_spec[hi])} against {ms(without[hi])})"
    losing = [b for b in sizes if gain[b] < 1]
    if losing:
        text += (f"; from batch size {losing[0]} on the verify steps cost more than they saved (the drafts' "
                 "extra tokens are no longer free)")
    return text + "."
