"""The sglang package's declaration in the registry (`servesim.engines.registry`)."""

from servesim.engines.registry import EngineSpec
from servesim.engines.sglang.config import bound_text, from_vllm_sizes, resolve, unchunked_config, unspeculative_config

ENGINE = EngineSpec(name="sglang", display="SGLang", version="0.5.23",
                    policies={"sglang": "servesim.engines.sglang.scheduler:SGLangScheduler"}, resolve=resolve,
                    section="sglang", flags="servesim.engines.sglang.flags",
                    host_preset="sglang", conformance="servesim.engines.sglang.conformance",
                    own_names={"max_num_seqs": "max_running_requests",
                               "max_num_batched_tokens": "chunked_prefill_size"},
                    from_shared_sizes=from_vllm_sizes, preemption_word="retractions",
                    sizes_caveat=" (SGLang's chunk counts prompt tokens only; vLLM's budget counts decodes too)",
                    unchunked=unchunked_config, unspeculative=unspeculative_config,
                    bound_text=bound_text, pd_decode=("sglang",))
