"""The lesson's questions, answered with numbers computed by `servesim.lesson` and the engine."""

from __future__ import annotations

from collections import Counter

from servesim.lesson.functions import (
    chunk_size,
    chunked_iteration_time,
    continuous_slots,
    plan_chunks,
    static_slots,
    tokens_processed,
    utilization,
    worst_stall,
)

BUDGET, DECODES, PROMPT = 256, 4, 2000


def _plan_text(chunks: list[int]) -> str:
    counts = Counter(chunks)
    return " + ".join(f"{n} x {size}" if n > 1 else str(size) for size, n in counts.items())


def lesson_answers() -> list[tuple[str, str]]:
    from servesim.analysis.metrics import prefill_chunks
    from servesim.engine import simulate
    from servesim.engines.config import EngineConfig
    from servesim.workloads import load_workload

    chunk = chunk_size(BUDGET, DECODES)
    plan = plan_chunks(PROMPT, chunk)
    full = chunked_iteration_time(DECODES, chunk)
    stall = worst_stall(DECODES, PROMPT)
    static, cont = static_slots([2, 1, 2], 2), continuous_slots([2, 1, 2], 2)
    run = simulate(load_workload("seed"), EngineConfig(max_num_batched_tokens=BUDGET, max_num_seqs=8), "vllm")
    engine_chunks = prefill_chunks(run, "L")
    return [
        (f"Each iteration may process at most {BUDGET} tokens in total; each of the {DECODES} decoding sequences "
         "uses 1. How many prompt tokens can be prefilled per iteration?",
         f"chunk_size({BUDGET}, {DECODES}) = max(0, {BUDGET} - {DECODES}) = {chunk} prompt tokens."),
        (f"The {PROMPT}-token prompt is split into chunks of {chunk}. How many iterations until its prefill is done?",
         f"plan_chunks({PROMPT}, {chunk}) = {_plan_text(plan)}: {len(plan)} iterations. The engine agrees: the "
         f"vllm policy prefilled L in {len(engine_chunks)} steps of {_plan_text(engine_chunks)} tokens."),
        (f"With the toy costs (1 ms per decode, 0.1 ms per prefill token), how many ms for a full-chunk iteration "
         f"({DECODES} decodes + {chunk} prefill tokens)?",
         f"chunked_iteration_time({DECODES}, {chunk}) = {DECODES} x 1 + {chunk} x 0.1 = {full:g} ms, against "
         f"worst_stall({DECODES}, {PROMPT}) = {stall:g} ms if the whole prompt ran in one iteration."),
        ("Does splitting a prompt remove the need to process its earlier context?",
         f"No. tokens_processed(plan_chunks({PROMPT}, {chunk})) = {tokens_processed(plan)} = "
         f"tokens_processed([{PROMPT}]) = {tokens_processed([PROMPT])}: every chunk still attends to the context "
         f"before it, so the same {PROMPT} prompt tokens are processed either way. What changes is granularity: "
         f"the prompt finishes later ({len(plan)} iterations instead of 1) and each decode iteration stays short "
         f"({full:g} ms instead of {stall:g} ms)."),
        ("Two slots serve requests A, B, C with output lengths 2, 1, 2. What is the slot utilization of static "
         "and of continuous batching?",
         f"static {static} uses {utilization(static):.1%} of its slots; continuous {cont} uses "
         f"{utilization(cont):.2%}. Real token costs are not equal, so this is a toy measure."),
    ]
