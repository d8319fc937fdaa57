"""vLLM (pinned: vLLM 0.33.0): `scheduler` (v1: one token budget, chunked prefill, preemption), `scheduler_v0`
(v0: prompts or decodes), `kv_cache_manager` and `block_pool` (paged KV with prefix caching), `config` (defaults
per GPU, the KV pool from GPU memory), `flags` (vllm serve's options), `conformance` (the recorded traces'
format). See docs/vllm-fidelity.md."""
