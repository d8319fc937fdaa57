"""The same workload under several policies or several values of one knob: one table, and sentences that
attribute each difference to what changed in the step records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from servesim.analysis.benchmark import benchmark_metrics
from servesim.analysis.breakdown import bound_by
from servesim.analysis.explain import _token_gap, gap_cause, ms
from servesim.analysis.metrics import (
    longest_prompt,
    prefill_chunks,
    prompt_tokens_processed,
    slot_utilization,
    worst_gap,
)
from servesim.analysis.overload import detect_overload
from servesim.cost import CostModel
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engine.result import SimResult
from servesim.engines.config import EngineConfig
from servesim.engines.registry import by_section, engine_for, policy_class, sections
from servesim.errors import ConfigError


def run_policies(requests: Sequence[Request], policies: Sequence[str], config: EngineConfig,
                 cost: CostModel | str) -> tuple[dict[str, SimResult], list[str]]:
    """Each policy on the same workload. A token budget applies to chunking policies only (static and continuous
    never chunk, so vLLM would reject a budget below max_model_len): the others get vLLM's default without
    chunking, max(max_model_len, 2048), and a note."""
    configs, notes, skipped = policy_configs(policies, config)
    results = {name: simulate(requests, cfg, name, cost) for name, cfg in configs.items()}
    if skipped:
        budget = results[skipped[0]].config.max_num_batched_tokens
        notes.append(f"max_num_batched_tokens {config.max_num_batched_tokens} applies to the chunking policies only; "
                     f"{', '.join(skipped)} never chunk, so their budget is vLLM's default without chunking, "
                     f"max(max_model_len, 2048) = {budget}.")
    return results, notes


def policy_configs(policies: Sequence[str], config: EngineConfig
                   ) -> tuple[dict[str, EngineConfig], list[str], list[str]]:
    """Each policy's config for a side-by-side run of one config (`compare`, `report`): an engine's section for its
    own runs only; an engine with its own knobs gets the shared sizes carried over (said); a policy that never
    chunks runs without the budget (listed last: `skipped`); the knobs a policy never reads left out (said)."""
    configs, notes, skipped = {}, [], []
    for name in policies:
        spec = engine_for(name)
        # an engine's section is for its own runs only
        cfg = replace(config, **{s: None for s in config.sections_given() if s != spec.section})
        if spec.from_shared_sizes is not None:  # an engine with its own knobs: the shared sizes carried over
            cfg, moved = spec.from_shared_sizes(cfg)
            if moved:
                notes.append(f"{name}: {', '.join(moved)}{spec.sizes_caveat}")
        else:
            if not policy_class(name).chunked and config.max_num_batched_tokens is not None:
                cfg, _ = replace(cfg, max_num_batched_tokens=None), skipped.append(name)
        base = EngineConfig()
        unread = {k: getattr(cfg, k) for k in policy_class(name).unread if getattr(cfg, k) != getattr(base, k)}
        if unread:  # what the policy never reads is left out of its run, and said
            cfg = replace(cfg, **{k: getattr(base, k) for k in unread})
            notes.append(f"{name}: " + ", ".join(f"{k} {v!r}" for k, v in unread.items())
                         + f" left out ({policy_class(name).unread[next(iter(unread))]})")
        configs[name] = cfg
    return configs, notes, skipped


def parse_value(text: str) -> object:
    """A knob's value as written after `--set KNOB=`: none/null, true/false, an int, a float, else the text."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def parse_set(spec: str) -> tuple[str, list[object]]:
    """`max_num_batched_tokens=256,512,2048` -> ("max_num_batched_tokens", [256, 512, 2048])."""
    knob, sep, values = spec.partition("=")
    knob = knob.strip().replace("-", "_")
    if not sep or not values.strip():
        raise ConfigError(f"--set {spec!r}: expected KNOB=V1,V2,... e.g. max_num_batched_tokens=256,512,2048")
    if knob not in EngineConfig.knob_names():
        valid = ", ".join(EngineConfig.knob_names())
        own = [s for s in sections() if f"{s}.{knob}" in EngineConfig.knob_names()]
        hint = "".join(f" ({by_section(s).display}'s: {s}.{knob})" for s in own)
        raise ConfigError(f"--set {spec!r}: unknown knob {knob!r}{hint}; valid: {valid}")
    from servesim.lists import split_items

    return knob, [parse_value(v) for v in split_items(values, f"--set {knob}")]


def run_sweep(requests: Sequence[Request], policy: str, config: EngineConfig, cost: CostModel | str,
              knob: str, values: Sequence[object]) -> dict[str, SimResult]:
    return {f"{knob}={v}": simulate(requests, config.with_knobs({knob: v}), policy, cost) for v in values}


def compare_rows(results: dict[str, SimResult]) -> list[tuple[str, list[str]]]:
    """Rows of the side-by-side table: one value per result, formatted."""
    ms2 = "{:.2f}".format
    bms = {k: benchmark_metrics(r) for k, r in results.items()}
    lp = longest_prompt(next(iter(results.values())))
    rows: list[tuple[str, list[str]]] = []

    def row(label, f):
        rows.append((label, [f(k, r) for k, r in results.items()]))

    for metric, short in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        row(f"Mean {short} (ms)", lambda k, r, m=metric: ms2(bms[k][m].mean))
        row(f"P99 {short} (ms)", lambda k, r, m=metric: ms2(bms[k][m].percentile(99.0)))
    row("Worst gap between tokens (ms)", lambda k, r: ms2(g.seconds * 1000) if (g := worst_gap(r)) else "-")
    # the first run's longest prompt, in each run that served it (a cluster's replicas serve different requests)
    has = {k: lp in r.timelines.ids for k, r in results.items()}
    row(f"TTFT of {lp}, longest prompt (ms)",
        lambda k, r: "-" if not has[k] or r.request(lp).ttft is None else ms2(r.request(lp).ttft * 1000))
    row(f"Prefill chunks of {lp}", lambda k, r: str(len(prefill_chunks(r, lp))) if has[k] else "-")
    row("Request throughput (req/s)", lambda k, r: ms2(bms[k].request_throughput))
    row("Output token throughput (tok/s)", lambda k, r: ms2(bms[k].output_throughput))
    row("Prompt tokens processed", lambda k, r: str(prompt_tokens_processed(r)))
    row("Tokens processed", lambda k, r: str(r.tokens_processed))
    row("Steps", lambda k, r: str(len(r.step_log) if r.step_log is not None else len(r.steps)))
    row("Makespan (ms)", lambda k, r: ms2(r.makespan * 1000))
    row("Slot utilization (%)", lambda k, r: ms2(slot_utilization(r) * 100))
    row("Preemptions", lambda k, r: str(len(r.preemptions)))
    row("Recompute tax (%)", lambda k, r: ms2(r.recompute_tax * 100))
    if any(r.prefix_cache is not None for r in results.values()):
        row("Prefix cache hit rate (%)",
            lambda k, r: "off" if r.prefix_cache is None else ms2(r.prefix_cache.hit_rate * 100))
    row("Most steps bound by", lambda k, r: _most_bound(r))
    row("Overloaded", lambda k, r: "OVERLOADED" if detect_overload(r).overloaded else "no")
    return rows


def _most_bound(r: SimResult) -> str:
    from servesim.analysis.breakdown import reasons_recorded

    if not reasons_recorded(r):
        return "not recorded (record='full')"
    counts: dict[str, int] = {}
    for s in r.steps:
        b = bound_by(s).value
        counts[b] = counts.get(b, 0) + 1
    return max(counts, key=counts.get) if counts else "-"


def _cause(a: SimResult, b: SimResult, label_b: str, lp: str) -> str:
    from servesim.analysis.explain import prefill_phases

    # the first prefill only: recomputation after a preemption is not chunking
    ca, cb = ([c for _, c in prefill_phases(r, lp)[0]] for r in (a, b))
    first = [_runs_prefill_first(r) for r in (a, b)]
    if first[0] != first[1]:  # SGLang holds the decodes back while a prefill batch runs (without mixed chunks)
        return "running prefill first" if first[1] else "running the decodes beside the prefill"
    if len(ca) == 1 and len(cb) > 1:
        return "chunked prefill"
    if len(ca) > 1 and len(cb) == 1:
        return "prefilling whole"
    if len(ca) > 1 and max(ca) != max(cb):
        return f"chunks of up to {max(cb)} tokens instead of {max(ca)}"
    if a.policy == "static" and b.policy != "static":
        return "continuous admission"
    return label_b


def _runs_prefill_first(r: SimResult) -> bool:
    """Whether some running decode waited for a prefill batch (SGLang's `prefill_first` reason)."""
    from servesim.engine.records import Reason

    return any(w.reason is Reason.PREFILL_FIRST for s in r.steps for w in s.waiting)


def _stall(r: SimResult, g) -> bool:
    """Whether a token gap (`metrics.TokenGap`) spans a preemption of its request."""
    return g is not None and any(p.id == g.request_id and g.first_step <= p.step <= g.last_step
                                 for p in r.preemptions)


def _moved(x: float, y: float, up: str, down: str) -> str:
    return up if y > x + 1e-12 else down if y < x - 1e-12 else "kept"


def compare_sentences(results: dict[str, SimResult]) -> list[str]:
    """One sentence per neighbouring pair of columns: what changed, and the cause found in the records."""
    items = list(results.items())
    out = []
    for (na, a), (nb, b) in zip(items, items[1:]):
        lp = longest_prompt(a)
        ga, gb = worst_gap(a), worst_gap(b)
        parts = []
        if ga and gb:
            verb = _moved(ga.seconds, gb.seconds, "raised", "cut")
            ta, tb = (_token_gap(r, g) if r.steps and g.step is not None else None for r, g in ((a, ga), (b, gb)))
            if _stall(a, ta) or _stall(b, tb):  # a preemption, not the step mix, made the worst gap
                text = f"the worst gap between tokens went from {ms(ga.seconds)} to {ms(gb.seconds)}"
                text += f" ({gap_cause(b, tb)})" if tb is not None else ""
            elif verb == "kept":
                text = f"the worst gap between tokens stayed at {ms(gb.seconds)}"
            else:
                text = (f"{_cause(a, b, nb, lp)} {verb} the worst gap between tokens from {ms(ga.seconds)} to "
                        f"{ms(gb.seconds)}")
                if tb is not None and verb == "raised":
                    text += f" ({gap_cause(b, tb)})"
            parts.append(text)
        ra, rb = a.request(lp), b.request(lp)
        if ra.ttft is not None and rb.ttft is not None:  # both served it (a request can fail on arrival)
            moved = _moved(ra.ttft, rb.ttft, 'rose', 'fell')
            text = (f"the long prompt's TTFT stayed at {ms(rb.ttft)}" if moved == "kept" else
                    f"the long prompt's TTFT {moved} from {ms(ra.ttft)} to {ms(rb.ttft)}")
            qa = (ra.first_scheduled_time or ra.arrival_time) - ra.arrival_time
            qb = (rb.first_scheduled_time or rb.arrival_time) - rb.arrival_time
            if abs(qa - qb) > 1e-9:
                text += f" ({lp} queued {ms(qb)} instead of {ms(qa)})"
            parts.append(text)
        pa, pb = prompt_tokens_processed(a), prompt_tokens_processed(b)
        la, lb = sum(prefill_chunks(a, lp)), sum(prefill_chunks(b, lp))
        if pa == pb:
            parts.append(f"prompt tokens processed are the same ({pa}, {la} of them {lp}'s)")
        else:
            parts.append(f"prompt tokens processed went from {pa} to {pb} ({lp}'s: {la} and {lb}; recomputed after "
                         f"preemption: {a.recomputed_tokens} and {b.recomputed_tokens})")
        out.append(f"{nb} vs {na}: " + "; ".join(parts) + ".")
    return out
