"""Plain sentences built from the step records: what happened and why."""

from __future__ import annotations

from collections import Counter

from servesim.metrics import longest_prompt, prefill_chunks, worst_gap
from servesim.records import Reason
from servesim.result import SimResult


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.4g} ms"


def _chunks_text(chunks: list[int]) -> str:
    if len(chunks) == 1:
        return f"in one {chunks[0]}-token step"
    counts = Counter(chunks)
    parts = [f"{n} x {size}" if n > 1 else f"{size}" for size, n in sorted(counts.items(), key=lambda kv: -kv[0])]
    return f"in {len(chunks)} chunks ({' + '.join(parts)})"


def wait_reason(result: SimResult, request_id: str) -> Reason | None:
    """The reason most often recorded for `request_id` while it waited to be scheduled first."""
    reasons = Counter(w.reason for s in result.steps for w in s.waiting if w.id == request_id)
    return reasons.most_common(1)[0][0] if reasons else None


def policy_sentence(result: SimResult) -> str:
    """One sentence on the longest prompt and the worst decode gap: where the latency went, and why."""
    rid = longest_prompt(result)
    r = result.request(rid)
    chunks = prefill_chunks(result, rid)
    queued = (r.first_scheduled_time or r.arrival_time) - r.arrival_time
    why = wait_reason(result, rid)
    wait = f"waited {ms(queued)} ({why.value.replace('_', ' ')}), then was " if queued > 0 and why else "was "
    text = f"{rid}'s {r.prompt_len}-token prompt {wait}prefilled {_chunks_text(chunks)}; TTFT {ms(r.ttft)}."
    gap = worst_gap(result)
    if gap is not None and gap.step is not None:
        step = result.steps[gap.step]
        prefill = step.prefill_tokens
        cause = f"a step carrying {prefill} prefill tokens beside {step.num_decodes} decodes" if prefill else \
            f"a step of {step.num_decodes} decodes"
        text += f" The worst gap between two tokens was {ms(gap.seconds)} ({gap.request_id}, step {gap.step}: {cause})."
    return text
