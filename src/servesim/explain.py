"""Plain sentences built from the step records: what happened and why."""

from __future__ import annotations

from collections import Counter

from servesim.metrics import longest_prompt, prefill_chunks, worst_gap
from servesim.records import Kind, Reason
from servesim.result import SimResult


def ms(seconds: float) -> str:
    text = f"{seconds * 1000:.4g}"
    return f"{text if 'e' not in text else f'{seconds * 1000:.0f}'} ms"  # 12345 ms, not 1.234e+04 ms


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def gap_cause(result: SimResult, g) -> str:
    """Why a token gap (`metrics.TokenGap`) lasted: the step that ended it, or why it spanned several steps."""
    if g.first_step == g.last_step:
        return f"step {g.last_step}: {step_cause(result, g.last_step, victim=g.request_id)}"
    p = next((p for p in result.preemptions if p.id == g.request_id and g.first_step <= p.step <= g.last_step), None)
    if p is not None:
        return f"{g.request_id} was preempted in step {p.step} and ran again in step {g.last_step}"
    longest = max(range(g.first_step, g.last_step + 1), key=lambda i: result.steps[i].duration)
    return (f"steps {g.first_step}-{g.last_step}; the longest, step {longest}: "
            f"{step_cause(result, longest, victim=g.request_id)}")


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


# -- run-level and request-level explanations (issue 6) ---------------------------------------------------------

_BOUND_TEXT = {
    "nothing": "nothing (every request present got all the tokens it asked for)",
    "token_budget": "the token budget (max_num_batched_tokens {budget})",
    "max_num_seqs": "max_num_seqs ({seqs} running)",
    "kv_blocks": "KV blocks (waits for blocks, preemptions)",
    "long_prefill_token_threshold": "long_prefill_token_threshold ({threshold})",
    "batch_closed": "a closed batch (static batching admits nothing until the batch drains)",
}


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _steps_text(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def step_cause(result: SimResult, step: int, victim: str | None = None) -> str:
    """What a step carried, e.g. "252 prefill tokens of L beside 4 decodes"."""
    s = result.steps[step]
    chunks = [(e.id, e.num_scheduled_tokens) for e in s.scheduled if e.kind is Kind.PREFILL and e.id != victim]
    decodes = f"{s.num_decodes} decode{'s' if s.num_decodes != 1 else ''}"
    if not chunks:
        return decodes
    chunks.sort(key=lambda c: -c[1])
    who = _join([f"{n} of {rid}" for rid, n in chunks[:3]] + ([f"{len(chunks) - 3} more"] if len(chunks) > 3 else []))
    total = sum(n for _, n in chunks)
    head = f"{total} prefill tokens ({who})" if len(chunks) > 1 else f"{total} prefill tokens of {chunks[0][0]}"
    return f"{head} beside {decodes}"


def bound_sentence(result: SimResult) -> str:
    from servesim.breakdown import bound_by

    counts = Counter(bound_by(s).value for s in result.steps)
    cfg = result.config
    fill = {"budget": cfg.max_num_batched_tokens, "seqs": cfg.max_num_seqs,
            "threshold": cfg.long_prefill_token_threshold}
    parts = [f"{n} by {_BOUND_TEXT[b].format(**fill)}" for b, n in counts.most_common()]
    return f"Of {len(result.steps)} steps, {_join(parts)}."


def _wait_text(result: SimResult, rid: str) -> str:
    r = result.request(rid)
    if r.first_scheduled_time is None:
        return f"{rid} arrived at {ms(r.arrival_time)} and was never scheduled."
    first = next(s for s in result.steps if any(e.id == rid for e in s.scheduled))
    queued = r.first_scheduled_time - r.arrival_time
    head = f"{rid} arrived at {ms(r.arrival_time)} and was first scheduled in step {first.step} " \
           f"({ms(r.first_scheduled_time)})"
    if queued <= 0:
        return head + ", without waiting."
    held: dict[str, list[float]] = {}
    for s in result.steps[: first.step]:
        for w in s.waiting:
            if w.id == rid:
                held.setdefault(w.reason.value.replace("_", " "), []).append(s.duration)
    held_s = sum(sum(v) for v in held.values())
    parts = [f"{len(v)} step{'s' if len(v) > 1 else ''} ({ms(sum(v))}) held by {reason}"
             for reason, v in sorted(held.items(), key=lambda kv: -sum(kv[1]))]
    if queued - held_s > 1e-12:  # the rest: the step already running when it arrived (or idle time)
        parts.insert(0, f"{ms(queued - held_s)} for the step in flight when it arrived to end")
    return f"{head}: it waited {ms(queued)}: {_join(parts)}."


def explain_request(result: SimResult, request_id: str, gaps: int = 3) -> list[str]:
    """Sentences on one request: its wait and why, its prefill chunks, its preemptions, its largest token gaps."""
    from servesim.metrics import token_gaps

    r = result.request(request_id)
    out = [_wait_text(result, request_id)]
    chunk_steps = [s.step for s in result.steps for e in s.scheduled if e.id == request_id and e.kind is Kind.PREFILL]
    chunks = prefill_chunks(result, request_id)
    if chunks and r.token_times:
        extra = sum(chunks) - r.prompt_len
        redo = f", {extra} of them recomputed after preemption" if extra > 0 else ""
        queued = (r.first_scheduled_time or r.arrival_time) - r.arrival_time
        where = f"(step {chunk_steps[0]})" if len(chunks) == 1 else \
            f"over {_steps_text(chunk_steps[0], chunk_steps[-1])}"
        out.append(
            f"Its {r.prompt_len}-token prompt was prefilled {_chunks_text(chunks)} {where}, "
            f"{sum(chunks)} prompt tokens processed{redo}; "
            f"first token at {ms(r.token_times[0])}: TTFT {ms(r.ttft)} = {ms(queued)} queued + "
            f"{ms(r.token_times[0] - (r.first_scheduled_time or r.arrival_time))} from first scheduled to first "
            "token.")
    for p in (p for p in result.preemptions if p.id == request_id):
        resumed = next((s for s in result.steps[p.step + 1:] for e in s.scheduled if e.id == request_id), None)
        cost = f"discarded {p.tokens_discarded} computed tokens" if p.tokens_discarded else \
            f"copied {p.bytes_moved} bytes to host ({ms(p.swap_time)})"
        back = f"resumed in step {resumed.step} after {ms(resumed.start_time - result.steps[p.step].start_time)}" \
            if resumed else "never resumed"
        out.append(f"Preempted in step {p.step} ({p.mode}{', again' if p.repeat else ''}): {cost} and freed "
                   f"{_plural(p.blocks_freed, 'KV block')}; {back}.")
    if r.finish_time is not None and r.output_len > 1:
        tpot = (r.finish_time - r.token_times[0]) / (r.output_len - 1)
        out.append(f"Then {r.output_len - 1} more tokens, TPOT {ms(tpot)}; finished at {ms(r.finish_time)} "
                   f"(E2EL {ms(r.e2el)}).")
    found = token_gaps(result, request_id)
    if found:
        items = []
        for g in found[:gaps]:
            items.append(f"{ms(g.seconds)} before token {g.token} ({gap_cause(result, g)})")
        near = sum(abs(g.seconds - found[0].seconds) <= 1e-9 for g in found)
        tail = f"; {near} of its {len(found)} gaps were {ms(found[0].seconds)}" if near > gaps else ""
        out.append(f"Largest gaps between its tokens: {'; '.join(items)}{tail}.")
    return out


def explain_run(result: SimResult, unchunked: SimResult | None = None) -> list[str]:
    """Sentences on a run: what bound the schedule, where tail latency came from, preemptions and their cost,
    overload; with `unchunked` (the same workload with chunked prefill off), what chunking changed."""
    from servesim.benchmark import benchmark_metrics
    from servesim.breakdown import request_breakdown
    from servesim.metrics import token_gaps
    from servesim.overload import detect_overload

    out = [bound_sentence(result)]
    done = [r for r in result.requests if r.ttft is not None]
    if not done:
        return out
    m = benchmark_metrics(result)
    worst = max(done, key=lambda r: r.ttft)
    out.append(f"The highest TTFT was {worst.id}'s {ms(worst.ttft)} (mean {m['ttft'].mean:.4g} ms, median "
               f"{m['ttft'].median:.4g} ms). " + explain_request(result, worst.id)[1 if len(done) else 0])
    gaps = [g for r in done for g in token_gaps(result, r.id)[:1]]
    if gaps:
        g = max(gaps, key=lambda g: (round(g.seconds, 12), -g.last_step))
        dur = [s.duration for s in result.steps]
        with_prefill = [s.duration for s in result.steps if s.prefill_tokens]
        decode_only = [s.duration for s in result.steps if not s.prefill_tokens]
        text = (f"The largest gap between two tokens was {ms(g.seconds)}, before {g.request_id}'s token {g.token} "
                f"({gap_cause(result, g)}).")
        if with_prefill and decode_only:
            text += (f" Steps carrying prefill ({len(with_prefill)} of {len(dur)}) lasted up to "
                     f"{ms(max(with_prefill))}; decode-only steps at most {ms(max(decode_only))}.")
        out.append(text)
    e2e = max(done, key=lambda r: r.e2el or 0.0)
    out.append(f"The highest E2EL was {e2e.id}'s {ms(e2e.e2el)} ({e2e.output_len} output tokens).")
    if result.preemptions:
        rb = request_breakdown(result)
        hit = [(rid, t, k) for rid, t, k in zip(rb.ids, rb.preempted, rb.num_preemptions) if k]
        rid, t, k = max(hit, key=lambda x: (x[1], x[2]))
        out.append(f"{_plural(len(result.preemptions), 'preemption')} of {_plural(len(hit), 'request')} discarded "
                   f"{result.recomputed_tokens} computed tokens, recomputed later: a recompute tax of "
                   f"{result.recompute_tax:.1%} of the {result.tokens_processed} tokens processed; preempted "
                   f"requests spent {ms(float(rb.preempted.sum()))} out of the running set (most: {rid}, "
                   f"{_plural(int(k), 'time')}, {ms(float(t))}).")
    else:
        out.append("No request was preempted.")
    out.append(detect_overload(result).sentence())
    out += chunking_sentences(result, unchunked)
    return out


def chunking_sentences(chunked: SimResult, unchunked: SimResult | None = None) -> list[str]:
    """The lesson's question, answered from the records: did splitting the longest prompt save any work?"""
    rid = longest_prompt(chunked)
    chunks = prefill_chunks(chunked, rid)
    if len(chunks) < 2:
        return []
    text = (f"{rid}'s {chunked.request(rid).prompt_len}-token prompt was prefilled {_chunks_text(chunks)}: "
            f"{sum(chunks)} of its prompt tokens were processed, as many as in one piece; splitting does not "
            "remove the work on earlier context, each chunk attends to all the tokens before it.")
    if unchunked is None:
        return [text]
    whole = prefill_chunks(unchunked, rid)
    a, b = chunked.request(rid), unchunked.request(rid)
    ga, gb = worst_gap(chunked), worst_gap(unchunked)
    text += (f" Unchunked, {rid} was prefilled {_chunks_text(whole)} ({sum(whole)} tokens): {sum(chunks)} prompt "
             f"tokens processed either way. Chunked, the prompt finished later (first token at "
             f"{ms(a.token_times[0])} instead of {ms(b.token_times[0])}, TTFT {ms(a.ttft)} instead of {ms(b.ttft)})")
    if ga and gb:
        text += (f" and decode steps stayed short (worst gap between tokens {ms(ga.seconds)} instead of "
                 f"{ms(gb.seconds)})")
    return [text + "."]
