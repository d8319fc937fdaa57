"""Plain sentences built from the step records: what happened and why."""

from __future__ import annotations

from collections import Counter

from servesim.analysis.metrics import longest_prompt, worst_gap
from servesim.analysis.speculation import speculation_sentences
from servesim.analysis.words import ms, number
from servesim.analysis.words import plural as _plural
from servesim.engine.records import Reason
from servesim.engine.result import SimResult
from servesim.engines.registry import engine_for


def gap_cause(result: SimResult, g) -> str:
    """Why a token gap (`metrics.TokenGap`) lasted: the step that ended it, or why it spanned several steps."""
    if g.first_step >= g.last_step:  # zero-length steps (a zero-cost step clock) can put first past last
        return f"step {g.last_step}: {step_cause(result, g.last_step, victim=g.request_id)}"
    p = next((p for p in result.preemptions if p.id == g.request_id and g.first_step <= p.step <= g.last_step), None)
    if p is not None:
        back = _resumed_step(result, g.request_id, p.step)
        redo = f", recomputed its context over steps {back}-{g.last_step}" if back is not None and \
            back < g.last_step else ""
        return f"{g.request_id} was preempted in step {p.step} and resumed in step {back}{redo}"
    held = _prefill_first(result, g.request_id, g.first_step, g.last_step)
    if held:
        return held
    longest = max(range(g.first_step, g.last_step + 1), key=lambda i: result.steps[i].duration)
    return (f"steps {g.first_step}-{g.last_step}; the longest, step {longest}: "
            f"{step_cause(result, longest, victim=g.request_id)}")


def _prefill_first(result: SimResult, rid: str, first: int, last: int) -> str | None:
    """SGLang: the steps in first..last in which `rid`'s decode waited for a prefill batch, and whose prompts ran
    (None when it never waited so)."""
    held = [s for s in result.steps[first:last + 1] if any(w.id == rid and w.reason is Reason.PREFILL_FIRST
                                                            for w in s.waiting)]
    if not held:
        return None
    who = list(dict.fromkeys(e.id for s in held for e in s.scheduled.prefill()))
    return (f"its decode waited {_plural(len(held), 'step')} ({ms(sum(s.duration for s in held))}) while "
            f"{_join(who) or 'prompts'} prefilled: SGLang runs prefill first")


def _held_back(result: SimResult, rid: str, step: int) -> str | None:
    """SGLang: the run of steps just before `step` in which `rid`'s decode waited for a prefill batch."""
    first = step
    while first > 0 and any(w.id == rid and w.reason is Reason.PREFILL_FIRST for w in result.steps[first - 1].waiting):
        first -= 1
    return _prefill_first(result, rid, first, step - 1) if first < step else None


def _resumed_step(result: SimResult, rid: str, preempted_in: int) -> int | None:
    return next((s.step for s in result.steps[preempted_in + 1:] if s.scheduled.has(rid)), None)


def prefill_phases(result: SimResult, rid: str) -> list[list[tuple[int, int]]]:
    """(step, tokens) of each prompt chunk, one list per admission: [0] the first prefill, [i] the recomputation
    after the i-th preemption (empty after a swap, which recomputes nothing)."""
    from bisect import bisect_right

    cuts = sorted(p.step for p in result.preemptions if p.id == rid)
    phases: list[list[tuple[int, int]]] = [[] for _ in range(len(cuts) + 1)]
    for s in result.steps:
        for e in s.scheduled.prefill():
            if e.id == rid:
                phases[bisect_right(cuts, s.step)].append((s.step, e.num_scheduled_tokens))
    return phases


def cached_admissions(result: SimResult, rid: str) -> list[tuple[int, int, int]]:
    """(step, cached tokens, tokens then) of each (re)admission of `rid` that started with prefix-cache hits."""
    return [(s.step, e.num_cached_tokens, e.num_tokens_before) for s in result.steps for e in s.scheduled.prefill()
            if e.id == rid and e.num_cached_tokens]


def _need_records(result: SimResult, what: str) -> None:
    if not result.steps:
        from servesim.errors import ServesimError

        raise ServesimError(f"{what} reads the step records, and this result kept none (record='summary'); "
                            "simulate with record='full' (servesim run --record full)")


def _chunks_text(chunks: list[int]) -> str:
    if len(chunks) == 1:
        return f"in one {chunks[0]}-token step"
    counts = Counter(chunks)
    parts = [f"{n} x {size}" if n > 1 else f"{size}" for size, n in sorted(counts.items(), key=lambda kv: -kv[0])]
    return f"in {len(chunks)} chunks ({' + '.join(parts)})"


def wait_reason(result: SimResult, request_id: str, before_step: int | None = None) -> Reason | None:
    """The reason recorded for `request_id` in the most steps before `before_step` (all steps if None)."""
    steps = result.steps if before_step is None else result.steps[:before_step]
    reasons = Counter(w.reason for s in steps for w in s.waiting if w.id == request_id)
    return reasons.most_common(1)[0][0] if reasons else None


def records_complete(result: SimResult) -> bool:
    """Whether the run kept a record of every step (not only the first ones, or none)."""
    log = result.step_log
    return bool(result.steps) and (log is None or len(result.steps) == len(log))


def policy_sentence(result: SimResult) -> str:
    """One sentence on the longest prompt and the worst decode gap: where the latency went, and why. Its wait and
    chunks are those before its first token, as `explain --request` tells them; a preemption's recomputation is
    counted apart."""
    rid = longest_prompt(result)
    r = result.request(rid)
    queued = (r.first_scheduled_time or r.arrival_time) - r.arrival_time - _front(result, r)
    redo = ""
    if records_complete(result):
        phases = prefill_phases(result, rid)
        first = phases[0]
        chunks = _chunks_text([c for _, c in first]) if first else "in no step"
        why = wait_reason(result, rid, first[0][0] if first else None)
        reason = why.value.replace("_", " ") if why else "the step in flight when it arrived"
        again = sum(len(p) for p in phases[1:])
        if r.num_preemptions:
            times = "once" if r.num_preemptions == 1 else f"{r.num_preemptions} times"
            redo = (f" It was preempted {times}"
                    + (f" and recomputed in {_plural(again, 'more chunk')}." if again else "."))
    else:  # only the first steps recorded (trace on a large run): the timeline's counts
        chunks = f"in {_plural(r.num_prefill_chunks, 'chunk')}" + (" (recomputation included)"
                                                                   if r.num_preemptions else "")
        reason = None
    wait = f"waited {ms(queued)}{f' ({reason})' if reason else ''}, then was " if queued > 0 else "was "
    ttft = f"TTFT {ms(r.ttft)}" if r.ttft is not None else "no token"
    text = f"{rid}'s {r.prompt_len}-token prompt {wait}prefilled {chunks}; {ttft}.{redo}"
    gap = worst_gap(result)
    if gap is not None and gap.step is not None:
        log = result.step_log
        if log is not None:  # every record level keeps the step log
            prefill, decodes = int(log.prefill_tokens[gap.step]), int(log.num_decodes[gap.step])
        else:
            prefill, decodes = result.steps[gap.step].prefill_tokens, result.steps[gap.step].num_decodes
        cause = f"a step carrying {prefill} prefill tokens beside {_plural(decodes, 'decode')}" if prefill else \
            f"a step of {_plural(decodes, 'decode')}"
        held = _held_back(result, gap.request_id, gap.step) if records_complete(result) else None
        where = f", step {gap.step}: {cause}" if held is None else f": {held}"
        text += f" The worst gap between two tokens was {ms(gap.seconds)} ({gap.request_id}{where})."
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
    chunks = [(e.id, e.num_scheduled_tokens) for e in s.scheduled.prefill() if e.id != victim]
    decodes = f"{s.num_decodes} decode{'s' if s.num_decodes != 1 else ''}"
    if not chunks:
        return decodes
    chunks.sort(key=lambda c: -c[1])
    who = _join([f"{n} of {rid}" for rid, n in chunks[:3]] + ([f"{len(chunks) - 3} more"] if len(chunks) > 3 else []))
    total = sum(n for _, n in chunks)
    head = f"{total} prefill tokens ({who})" if len(chunks) > 1 else f"{total} prefill tokens of {chunks[0][0]}"
    return f"{head} beside {decodes}"


def bound_sentence(result: SimResult) -> str:
    from servesim.analysis.breakdown import bound_by, reasons_recorded

    if not reasons_recorded(result):
        return (f"What bound each of the {len(result.step_log or result.steps)} steps is not known: the run kept no "
                "reasons for waiting (simulate with record='full').")
    counts = Counter(bound_by(s).value for s in result.steps)
    cfg = result.config
    fill = {"budget": cfg.max_num_batched_tokens, "seqs": cfg.max_num_seqs,
            "threshold": cfg.long_prefill_token_threshold}
    own = engine_for(result.policy).bound_text  # the same bounds under the engine's own names
    text = _BOUND_TEXT | (own(cfg) if own is not None else {})
    parts = [f"{n:,} by {text[b].format(**fill)}" for b, n in counts.most_common()]
    return f"Of {len(result.steps):,} steps, {_join(parts)}."


def _held_text(result: SimResult, rid: str, first: int, last: int) -> tuple[float, list[str]]:
    """Seconds and phrases ("28 steps (112 ms) held by kv blocks (needs 126 blocks, 117 free)") of the reasons
    recorded for `rid` in steps first..last-1; the detail is the last one recorded."""
    held: dict[str, list[float]] = {}
    detail: dict[str, list[str]] = {}
    for s in result.steps[first:last]:
        for w in s.waiting:
            if w.id == rid:
                key = w.reason.value.replace("_", " ")
                held.setdefault(key, []).append(s.duration)
                detail.setdefault(key, []).append(w.detail)

    def why(key: str) -> str:
        d = detail[key]
        return "" if not d[-1] else f" ({d[-1]})" if len(set(d)) == 1 else f" (last: {d[-1]})"

    parts = [f"{_plural(len(v), 'step')} ({ms(sum(v))}) held by {reason}{why(reason)}"
             for reason, v in sorted(held.items(), key=lambda kv: -sum(kv[1]))]
    return sum(sum(v) for v in held.values()), parts


def _front(result: SimResult, r) -> float:
    """Seconds from `r`'s send to the engine's queue: the path outside the engine core (0 without one)."""
    from servesim.engine.frontend import delay

    return float(delay(result.config, r.prompt_len))


def _wait_text(result: SimResult, rid: str) -> str:
    from servesim.analysis.breakdown import reasons_recorded

    r = result.request(rid)
    if r.first_scheduled_time is None:
        return f"{rid} arrived at {ms(r.arrival_time)} and was never scheduled."
    first = next(s for s in result.steps if s.scheduled.has(rid))
    front = _front(result, r)
    queued = r.first_scheduled_time - r.arrival_time - front
    sent = f"was sent at {ms(r.arrival_time)}, reached the engine at {ms(r.arrival_time + front)} through the " \
           f"front end ({ms(front)})," if front else f"arrived at {ms(r.arrival_time)}"
    head = f"{rid} {sent} and was first scheduled in step {first.step} ({ms(r.first_scheduled_time)})"
    if queued <= 0:
        return head + ", without waiting."
    if not reasons_recorded(result):
        return f"{head}: it waited {ms(queued)} (why is not known: simulate with record='full')."
    held_s, parts = _held_text(result, rid, 0, first.step)
    if queued - held_s > 1e-12:  # the rest: the step already running when it arrived (or idle time)
        parts.insert(0, f"{ms(queued - held_s)} for the step in flight when it arrived to end")
    return f"{head}: it waited {ms(queued)}: {_join(parts)}."


def _span(result: SimResult, first: int, last: int) -> float:
    return result.steps[last].end_time - result.steps[first].start_time


def _preemption_text(result: SimResult, p, chunks: list[tuple[int, int]], prompt_len: int) -> str:
    """One preemption of a request: why (free blocks), what it cost, how long it waited, what resuming redid."""
    rid = p.id
    free = result.steps[p.step - 1].free_blocks_after_step if p.step > 0 else None
    why = f" with {_plural(free, 'KV block')} free at the step's start" if free is not None else ""
    if p.mode.startswith("drop"):  # async scheduling: its last token was already in flight
        return (f"Preempted in step {p.step}{why} while its last token was in flight: it gave back "
                f"{_plural(p.blocks_freed, 'KV block')} at once and still finished with that token.")
    cost = f"discarded {p.tokens_discarded} computed tokens" if p.tokens_discarded else \
        f"copied {p.bytes_moved} bytes to host ({ms(p.swap_time)})"
    text = f"Preempted in step {p.step} ({p.mode}{', again' if p.repeat else ''}){why}: {cost} and freed " \
           f"{_plural(p.blocks_freed, 'KV block')}"
    back = _resumed_step(result, rid, p.step)
    if back is None:
        return text + "; never resumed."
    out = result.steps[back].start_time - result.steps[p.step].start_time
    text += f". It resumed in step {back}, {ms(out)} later"
    done = result.steps[back - 1].finished
    if done:
        text += f", once {_join(list(done))} finished in step {back - 1}"
    from servesim.analysis.breakdown import reasons_recorded

    if reasons_recorded(result):
        _, parts = _held_text(result, rid, p.step, back)
        if parts:
            text += f"; meanwhile {_join(parts)}"
    if chunks:
        n = sum(c for _, c in chunks)
        what = f"its prompt and {_plural(n - prompt_len, 'output token')}" if n > prompt_len else "its prompt"
        where = f"(step {chunks[0][0]}, {ms(_span(result, chunks[0][0], chunks[0][0]))})" if len(chunks) == 1 else \
            f"over {_steps_text(chunks[0][0], chunks[-1][0])} ({ms(_span(result, chunks[0][0], chunks[-1][0]))})"
        text += f". Resuming recomputed {n} tokens ({what}) {_chunks_text([c for _, c in chunks])} {where}"
    return text + "."


def explain_request(result: SimResult, request_id: str, gaps: int = 3) -> list[str]:
    """Sentences on one request: its wait and why, its prefill chunks, its preemptions, its largest token gaps."""
    from servesim.analysis.metrics import token_gaps

    _need_records(result, "explain_request")
    r = result.request(request_id)
    out = [_wait_text(result, request_id)]
    phases = prefill_phases(result, request_id)
    first = phases[0]
    if first and r.token_times:
        sizes = [c for _, c in first]
        front = _front(result, r)
        queued = (r.first_scheduled_time or r.arrival_time) - r.arrival_time - front
        where = f"(step {first[0][0]})" if len(first) == 1 else f"over {_steps_text(first[0][0], first[-1][0])}"
        hit = next((c for step, c, _ in cached_admissions(result, request_id) if step <= first[0][0]), 0)
        whole = sum(sizes) + hit >= r.prompt_len
        head = f"Its {r.prompt_len}-token prompt was prefilled" if whole and not hit else \
            f"{sum(sizes)} of its {r.prompt_len} prompt tokens were prefilled"
        tail = (f"{sum(sizes)} prompt tokens processed" + (f", {hit} served by the prefix cache" if hit else "")
                if whole else "then it was preempted")
        out.append(
            f"{head} {_chunks_text(sizes)} {where}, {tail}; "
            f"first token at {ms(r.token_times[0])}: TTFT {ms(r.ttft)} = "
            + (f"{ms(front)} front end + " if front else "") + f"{ms(queued)} queued + "
            f"{ms(r.token_times[0] - (r.first_scheduled_time or r.arrival_time))} from first scheduled to first "
            "token.")
    hits = cached_admissions(result, request_id)
    if hits:
        parts = [f"{c:,} of its {n:,} tokens in step {step}" for step, c, n in hits]
        source = getattr(r, "cached_from", None)
        whose = f"from {source}'s blocks" if source and len(hits) == 1 else "blocks cached earlier"
        if source and len(hits) > 1:
            whose = f"at first from {source}'s blocks"
        out.append(f"Prefix cache: {_join(parts)} hit the cache ({whose}) and were not computed again.")
    for i, p in enumerate(p for p in result.preemptions if p.id == request_id):
        out.append(_preemption_text(result, p, phases[i + 1], r.prompt_len))
    if r.finish_time is not None and r.output_len > 1:
        tpot = (r.finish_time - r.token_times[0]) / (r.output_len - 1)
        out.append(f"Then {_plural(r.output_len - 1, 'more token')}, TPOT {ms(tpot)}; finished at {ms(r.finish_time)} "
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


def _token_gap(result: SimResult, gap):
    """The `metrics.TokenGap` behind a `metrics.Gap` (the one ending in the gap's step)."""
    from servesim.analysis.metrics import token_gaps

    found = token_gaps(result, gap.request_id)
    return next((g for g in found if g.last_step == gap.step), found[0])


def explain_run(result: SimResult, unchunked: SimResult | None = None, cost=None,
                plain: SimResult | None = None) -> list[str]:
    """Sentences on a run: what bound the schedule, where tail latency came from, preemptions and their cost,
    overload; with `unchunked` (the same workload with chunked prefill off), what chunking changed; with `cost`
    (the run's cost model, with an engine profile), whether the host bound its decode steps; under speculative
    decoding what it did, and with `plain` (the same run without it) what it changed."""
    from servesim.analysis.benchmark import benchmark_metrics
    from servesim.analysis.breakdown import request_breakdown
    from servesim.analysis.metrics import token_gaps
    from servesim.analysis.overload import detect_overload

    if result.rejected and len(result.rejected) == len(result.requests):
        return [f"No request was served: all {len(result.requests):,} are longer than max_model_len "
                f"{result.config.max_model_len:,} (prompt + output tokens), and vLLM rejects them on arrival."]

    _need_records(result, "explain_run")
    out = [bound_sentence(result)]
    done = [r for r in result.requests if r.ttft is not None]
    if not done:
        return out
    m = benchmark_metrics(result)
    worst = max(done, key=lambda r: r.ttft)
    out.append(f"The highest TTFT was {worst.id}'s {ms(worst.ttft)} (mean {number(m['ttft'].mean)} ms, median "
               f"{number(m['ttft'].median)} ms). " + explain_request(result, worst.id)[1])
    gap = worst_gap(result)
    if gap is not None and gap.step is not None:
        g = _token_gap(result, gap)
        log = result.step_log
        dur, pre = (log.duration, log.prefill_tokens > 0) if log is not None else (
            [s.duration for s in result.steps], [s.prefill_tokens > 0 for s in result.steps])
        with_prefill = [d for d, p in zip(dur, pre) if p]
        decode_only = [d for d, p in zip(dur, pre) if not p]
        text = (f"The largest gap between two tokens was {ms(g.seconds)}, before {g.request_id}'s token {g.token} "
                f"({gap_cause(result, g)}).")
        if with_prefill and decode_only:
            text += (f" Steps carrying prefill ({len(with_prefill)} of {len(dur)}) lasted up to "
                     f"{ms(max(with_prefill))}; decode-only steps at most {ms(max(decode_only))}.")
        out.append(text)
    e2e = max(done, key=lambda r: r.e2el or 0.0)
    text = f"The highest E2EL was {e2e.id}'s {ms(e2e.e2el)}, {_plural(e2e.output_len, 'output token')}"
    if e2e.output_len > 1 and e2e.e2el is not None:
        rest = e2e.e2el - e2e.ttft
        text += f": TTFT {ms(e2e.ttft)}, then {ms(rest)} for the other {e2e.output_len - 1}"
        top = token_gaps(result, e2e.id)[0]
        if top.seconds >= rest / 2:  # one gap explains most of it
            text += f"; {ms(top.seconds)} of it before token {top.token} ({gap_cause(result, top)})"
    out.append(text + ".")
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
    if cost is not None:
        from servesim.analysis.host_bound import host_bound_sentence

        host = host_bound_sentence(result, cost)
        if host:
            out.append(host)
    if result.prefix_cache is not None:
        out.append(prefix_cache_sentence(result))
    out += chunking_sentences(result, unchunked)
    out += speculation_sentences(result, plain)
    return out


def prefix_cache_sentence(result: SimResult) -> str:
    """What the prefix cache saved (vLLM's counters), the largest reuse and whose blocks served it, and what
    eviction cost: admissions whose lookup stopped at a block that had been cached (`PrefixCacheStats`)."""
    stats = result.prefix_cache
    text = (f"The prefix cache served {stats.hit_tokens:,} of the {stats.query_tokens:,} tokens looked up at "
            f"admissions ({stats.hit_rate:.2%})")
    t = result.timelines
    best = int(t.num_cached_tokens.argmax()) if len(t) else 0
    if len(t) and t.num_cached_tokens[best]:
        r = t[best]
        whose = f", from {r.cached_from}'s blocks" if r.cached_from else ""
        text += f"; the largest reuse: {r.id}, {r.num_cached_tokens:,} of its {r.prompt_len:,} prompt tokens{whose}"
    text += f". {_plural(stats.evicted_blocks, 'cached block')} were evicted to make room"
    if stats.lost_tokens:
        text += (f"; {_plural(stats.lost_admissions, 'admission')} then found part of a prefix evicted and computed "
                 f"{stats.lost_tokens:,} tokens again that had been cached")
    elif stats.lost_tokens == 0 and stats.evicted_blocks:
        text += ", and no later lookup wanted them back"
    return text + "."


def _longest_decode_step(result: SimResult) -> float:
    """The longest step that carried at least one decode: how long running requests waited for a token."""
    if result.step_log is not None:
        d = result.step_log.duration[result.step_log.num_decodes > 0]
        return float(d.max()) if d.size else 0.0
    return max((s.duration for s in result.steps if s.num_decodes), default=0.0)


def chunking_sentences(chunked: SimResult, unchunked: SimResult | None = None) -> list[str]:
    """The lesson's question, answered from the records: did splitting the longest prompt save any work? Only the
    first prefill counts here; recomputation after a preemption is explained with the preemption."""
    rid = longest_prompt(chunked)
    chunks = [c for _, c in prefill_phases(chunked, rid)[0]]
    if len(chunks) < 2:
        return []
    prompt = chunked.request(rid).prompt_len
    text = (f"{rid}'s {prompt}-token prompt was prefilled {_chunks_text(chunks)}: {sum(chunks)} of its prompt "
            f"tokens were processed, as many as in one piece; splitting does not remove the work on earlier "
            "context, each chunk attends to all the tokens before it.")
    if unchunked is None:
        return [text]
    whole = [c for _, c in prefill_phases(unchunked, rid)[0]]
    a, b = chunked.request(rid), unchunked.request(rid)
    same = "either way" if sum(whole) == sum(chunks) else f"chunked, {sum(whole)} unchunked"
    t_a, t_b = a.token_times[0], b.token_times[0]
    when = "later" if t_a > t_b + 1e-12 else "earlier" if t_a < t_b - 1e-12 else "at the same time"
    text += (f" Unchunked, {rid} was prefilled {_chunks_text(whole)}: {sum(chunks)} prompt tokens processed "
             f"{same}. Chunked, the prompt finished {when} (first token at "
             f"{ms(a.token_times[0])} instead of {ms(b.token_times[0])}, TTFT {ms(a.ttft)} instead of {ms(b.ttft)})")
    da, db = _longest_decode_step(chunked), _longest_decode_step(unchunked)
    if da and db:
        verb = "stayed short" if da < db else "did not get shorter"
        text += f" and decode steps {verb} (the longest step carrying decodes took {ms(da)} instead of {ms(db)})"
    return [text + "."]
