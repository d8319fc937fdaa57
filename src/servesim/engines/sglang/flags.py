"""SGLang's server flags (pinned: SGLang 0.5.23, `python -m sglang.launch_server`'s names), as
`cli.options.SimOptions` takes them: `EngineConfig.sglang`'s fields, each None when not given.

Annotations stay objects (no `from __future__ import annotations`): typer reads them on every start.
"""

from dataclasses import dataclass
from typing import Annotated

from servesim.flags import opt as _opt


@dataclass
class SGLangFlags:
    """SGLang's scheduler and memory options, under SGLang's names (`--max-total-tokens` sets
    `max_total_num_tokens`, as in SGLang)."""

    chunked_prefill_size: Annotated[int | None, _opt("--chunked-prefill-size", help="SGLang: prompt tokens per "
                                                     "chunk (-1: off). Default 8192.")] = None
    max_prefill_tokens: Annotated[int | None, _opt("--max-prefill-tokens", help="SGLang: prompt tokens per "
                                                   "prefill batch. Default 16384.")] = None
    max_running_requests: Annotated[int | None, _opt("--max-running-requests", help="SGLang: requests running at "
                                                     "once. Default 1024.")] = None
    schedule_policy: Annotated[str | None, _opt("--schedule-policy", help="SGLang: fcfs | lpm | lof | random | "
                                                "dfs-weight. Default fcfs.")] = None
    random_seed: Annotated[int | None, _opt("--random-seed", help="SGLang: the random policy's seed. "
                                            "Default 0.")] = None
    schedule_conservativeness: Annotated[float | None, _opt("--schedule-conservativeness", help="SGLang: the "
                                                            "new-token ratio's scale. Default 1.0.")] = None
    enable_mixed_chunk: Annotated[bool, _opt("--enable-mixed-chunk", help="SGLang: decodes ride in a prefill "
                                             "chunk's batch.")] = False
    max_total_tokens: Annotated[int | None, _opt("--max-total-tokens", help="SGLang: the token pool's size. "
                                                 "Default: from GPU memory (roofline), else unlimited.")] = None
    mem_fraction_static: Annotated[float | None, _opt("--mem-fraction-static", help="SGLang: (weights + KV "
                                                      "pool) / GPU memory. Default: SGLang's for the GPU.")] = None
    page_size: Annotated[int | None, _opt("--page-size", help="SGLang: tokens per KV page. Default 1.")] = None
    disable_radix_cache: Annotated[bool, _opt("--disable-radix-cache", help="SGLang: no prefix (radix) "
                                              "cache.")] = False
    enable_priority_scheduling: Annotated[bool, _opt("--enable-priority-scheduling", help="SGLang: the queue by "
                                                     "each request's priority; a request refused a row preempts "
                                                     "lower ones.")] = False
    priority_scheduling_preemption_threshold: Annotated[int | None, _opt(
        "--priority-scheduling-preemption-threshold", help="SGLang: preempt only requests more than this far "
        "below. Default 10.")] = None
    schedule_low_priority_values_first: Annotated[bool, _opt("--schedule-low-priority-values-first", help="SGLang:"
                                                             " smaller priority values run first (default: "
                                                             "larger).")] = False
    retraction_policy: Annotated[str | None, _opt("--retraction-policy", help="SGLang: length (the only one "
                                                  "modelled). Default length.")] = None
    disable_overlap_schedule: Annotated[bool, _opt("--disable-overlap-schedule", help="SGLang: the normal event "
                                                   "loop (each result processed before the next batch is "
                                                   "scheduled; host work in series with the GPU's).")] = False
    speculative_algorithm: Annotated[str | None, _opt("--speculative-algorithm", help="SGLang: speculative "
                                                      "decoding: EAGLE | EAGLE3 | NEXTN | STANDALONE (chains; "
                                                      "docs/speculative.md). Needs --acceptance-rate.")] = None
    speculative_num_steps: Annotated[int | None, _opt("--speculative-num-steps", help="SGLang: drafts per "
                                                      "verify step (the chain's length).")] = None
    speculative_eagle_topk: Annotated[int | None, _opt("--speculative-eagle-topk", help="SGLang: 1 (a chain; "
                                                       "trees are not modelled).")] = None
    speculative_num_draft_tokens: Annotated[int | None, _opt("--speculative-num-draft-tokens", help="SGLang: the "
                                                             "verify width (topk 1: num_steps + 1, as SGLang sets "
                                                             "it).")] = None
    speculative_draft_model_path: Annotated[str | None, _opt("--speculative-draft-model-path", help="SGLang: the "
                                                             "draft model (STANDALONE: a servesim model the "
                                                             "roofline prices).")] = None


FLAGS = SGLangFlags
FLAG_OF = {"max_total_num_tokens": "--max-total-tokens"}  # SGLangConfig fields whose flag is not --field-name


def given(opts: SGLangFlags) -> dict[str, object]:
    """The flags given, as `SGLangConfig`'s fields (SGLang's -1 for chunking off as None)."""
    flags = {"chunked_prefill_size": opts.chunked_prefill_size, "max_prefill_tokens": opts.max_prefill_tokens,
             "max_running_requests": opts.max_running_requests, "schedule_policy": opts.schedule_policy,
             "schedule_conservativeness": opts.schedule_conservativeness,
             "enable_mixed_chunk": opts.enable_mixed_chunk or None, "max_total_num_tokens": opts.max_total_tokens,
             "page_size": opts.page_size, "disable_radix_cache": opts.disable_radix_cache or None,
             "mem_fraction_static": opts.mem_fraction_static, "random_seed": opts.random_seed,
             "enable_priority_scheduling": opts.enable_priority_scheduling or None,
             "priority_scheduling_preemption_threshold": opts.priority_scheduling_preemption_threshold,
             "schedule_low_priority_values_first": opts.schedule_low_priority_values_first or None,
             "retraction_policy": opts.retraction_policy,
             "disable_overlap_schedule": opts.disable_overlap_schedule or None,
             "speculative_algorithm": opts.speculative_algorithm,
             "speculative_num_steps": opts.speculative_num_steps,
             "speculative_eagle_topk": opts.speculative_eagle_topk,
             "speculative_num_draft_tokens": opts.speculative_num_draft_tokens,
             "speculative_draft_model_path": opts.speculative_draft_model_path}
    out = {k: v for k, v in flags.items() if v is not None}
    if out.get("chunked_prefill_size") == -1:  # SGLang's -1: chunking off
        out["chunked_prefill_size"] = None
    return out


def host_in_series(opts: SGLangFlags) -> bool:
    """Whether the roofline's host work runs in series with the GPU's: SGLang's normal event loop."""
    return bool(opts.disable_overlap_schedule)
