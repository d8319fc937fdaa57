"""The vllm package's declaration in the registry (`servesim.engines.registry`)."""

from servesim.engines.registry import EngineSpec
from servesim.engines.vllm.config import resolve

ENGINE = EngineSpec(name="vllm", display="vLLM", version="0.33.0",
                    policies={"vllm": "servesim.engines.vllm.scheduler:VLLMScheduler",
                              "vllm-v0": "servesim.engines.vllm.scheduler_v0:VLLMv0Scheduler"}, resolve=resolve,
                    flags="servesim.engines.vllm.flags",
                    conformance="servesim.engines.vllm.conformance", pd_decode=("vllm",))
