"""The lesson package's declaration in the registry (`servesim.engines.registry`)."""

from servesim.engines.registry import EngineSpec
from servesim.engines.vllm.config import resolve

ENGINE = EngineSpec(name="lesson", display="the lesson's", version="lesson.txt",
                    policies={"static": "servesim.engines.lesson.static:StaticScheduler",
                              "continuous": "servesim.engines.lesson.continuous:ContinuousScheduler"}, resolve=resolve,
                    rejected_by="vLLM")
