"""Iteration-level batching without chunking (Orca, OSDI '22): the lesson's continuous batching."""

from __future__ import annotations

from servesim.engines.vllm.scheduler import VLLMScheduler


class ContinuousScheduler(VLLMScheduler):
    """Iteration-level batching without chunking (Orca-style): every running request decodes each step and
    waiting prompts are admitted whole. It is vLLM's scheduler with `enable_chunked_prefill=False`, so the token
    budget defaults to `max_model_len`, as vLLM requires."""

    name = "continuous"
    chunked = False
    unread = {"speculative_config": "the lesson's continuous batching has no speculative decoding (--policy vllm "
                                    "has)"}
