"""The trtllm package's declaration in the registry (`servesim.engines.registry`)."""

from servesim.engines.registry import EngineSpec
from servesim.engines.trtllm.config import bound_text, from_vllm_sizes, resolve, unchunked_config

ENGINE = EngineSpec(name="trtllm", display="TensorRT-LLM", version="1.2",
                    policies={"trtllm": "servesim.engines.trtllm.scheduler:TrtllmScheduler"}, resolve=resolve,
                    section="trtllm", flags="servesim.engines.trtllm.flags", host_preset="trtllm",
                    own_names={"max_num_seqs": "max_batch_size", "max_num_batched_tokens": "max_num_tokens"},
                    from_shared_sizes=from_vllm_sizes, preemption_word="pauses",
                    sizes_caveat=" (TensorRT-LLM's max_batch_size also caps the active requests)",
                    unchunked=unchunked_config, bound_text=bound_text, pd_decode=("trtllm",))
