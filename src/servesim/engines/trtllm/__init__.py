"""TensorRT-LLM's scheduler (pinned: TensorRT-LLM 1.2): capacity policies, the micro-batch scheduler, the paged KV
cache with block reuse; see docs/trtllm.md."""
