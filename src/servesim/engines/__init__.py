"""The engines servesim reproduces, one package each, every one declared in `registry`:

- `lesson/`: the lesson's `static` (request-level) and `continuous` (iteration-level, Orca-style) batching;
- `vllm/`: vLLM 0.33's v1 scheduler (`vllm`) and v0's (`vllm-v0`), its KV cache manager and block pool with
  prefix caching, its defaults per GPU, flags and conformance format;
- `sglang/`: SGLang 0.5.23's scheduler, schedule policies and PrefillAdder, token pool and radix cache, server
  arguments, flags and conformance format.

`config` holds `EngineConfig`: the knobs every engine shares, under vLLM's names, and one section per engine with
server arguments of its own. What a new engine must provide: docs/engines.md.
"""
