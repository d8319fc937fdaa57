"""vLLM's `--speculative-config` (pinned: vLLM 0.33.0, `vllm/config/speculative.py` and `config/vllm.py`), under
vLLM's names: the keys a JSON object may carry, checked as vLLM checks them, and what each method makes the
scheduler read (docs/speculative.md).

| method | lookahead KV slots | input slots per request for drafting |
|---|---|---|
| ngram | 0 | 0 |
| eagle / eagle3 / mtp | K | 0 (parallel_drafting: K - 1) |
| draft_model | K | 1 (parallel_drafting: K) |

`num_lookahead_tokens` is `VllmConfig.num_lookahead_tokens` (`config/vllm.py` 626-675), `max_num_new_slots_for_drafting`
is `SpeculativeConfig.max_num_new_slots_for_drafting` (`config/speculative.py` 2058-2098). `mtp` is a single MTP
module run K times (DeepSeek-V3's), an eagle-family drafter for the scheduler; multi-module MTP, `suffix`, `dflash`,
`dspark` and `ngram_gpu` are not modelled and are refused, as is every key vLLM 0.33 does not have.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from servesim.errors import ConfigError

METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model")
EAGLE_METHODS = ("eagle", "eagle3", "mtp")  # vLLM's use_eagle(): a drafter with its own forward pass over KV slots
NOT_MODELLED_METHODS = ("suffix", "custom_class", "ngram_gpu", "dflash", "dspark", "extract_hidden_states")
# vLLM 0.33's SpeculativeConfig fields that name the drafter or shape which drafts it proposes, never how many the
# scheduler schedules (the acceptance is given apart, `servesim.engine.acceptance`): accepted, and recorded
DESCRIPTIVE = ("model", "draft_tensor_parallel_size", "prompt_lookup_max", "prompt_lookup_min")
# vLLM 0.33's fields with an effect servesim does not model: refused, naming the field
UNMODELLED = ("quantization", "revision", "code_revision", "enforce_eager", "max_model_len",
              "disable_padded_drafter_batch", "disable_eagle_block_drop", "disable_lookahead_block_hashes",
              "num_speculative_tokens_per_batch_size", "rejection_sample_method", "synthetic_acceptance_rates",
              "synthetic_acceptance_length", "enable_adaptive_verification", "use_heterogeneous_vocab",
              "draft_lm_head_quantization", "use_local_argmax_reduction", "moe_backend", "attention_backend",
              "kv_cache_dtype", "index_share_for_mtp_iteration", "draft_load_config", "tensor_parallel_size",
              "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
              "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob")
KEYS = ("method", "num_speculative_tokens", "parallel_drafting", *DESCRIPTIVE)


@dataclass(frozen=True, slots=True, repr=False)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int
    parallel_drafting: bool = False  # all K drafts in one pass (P-EAGLE, PARD): more input slots, the same KV
    model: str | None = None  # the draft model or EAGLE head (its weights are not read)
    draft_tensor_parallel_size: int | None = None
    prompt_lookup_max: int | None = None  # ngram's window: which drafts are proposed, not how many are scheduled
    prompt_lookup_min: int | None = None

    def __post_init__(self) -> None:
        if self.method in NOT_MODELLED_METHODS:
            raise ConfigError(f"speculative_config.method {self.method!r}: not modelled yet; expected one of "
                              f"{', '.join(METHODS)}")
        if self.method not in METHODS:
            raise ConfigError(f"speculative_config.method {self.method!r}: expected one of {', '.join(METHODS)}")
        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
            raise ConfigError(f"speculative_config.num_speculative_tokens must be an integer from 1 to 64, got {k!r}")
        if not isinstance(self.parallel_drafting, bool):
            raise ConfigError(f"speculative_config.parallel_drafting must be true or false, got "
                              f"{self.parallel_drafting!r}")
        if self.parallel_drafting and self.method not in ("eagle", "eagle3", "draft_model"):
            raise ConfigError("speculative_config.parallel_drafting: vLLM allows it only with eagle, eagle3 and "
                              f"draft_model, not {self.method}")
        for name in ("draft_tensor_parallel_size", "prompt_lookup_max", "prompt_lookup_min"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"speculative_config.{name} must be an integer >= 1, got {v!r}")
        if self.model is not None and not isinstance(self.model, str):
            raise ConfigError(f"speculative_config.model must be a string, got {self.model!r}")

    @property
    def use_eagle(self) -> bool:
        return self.method in EAGLE_METHODS

    @property
    def num_lookahead_tokens(self) -> int:
        """KV slots past the scheduled tokens, for the drafter's own forward pass (`VllmConfig.num_lookahead_tokens`):
        K for eagle-family and draft-model drafters, none for n-gram."""
        return self.num_speculative_tokens if self.use_eagle or self.method == "draft_model" else 0

    @property
    def max_num_new_slots_for_drafting(self) -> int:
        """Input slots each scheduled request costs beyond its tokens (`max_num_new_slots_for_drafting`)."""
        k = self.num_speculative_tokens
        if self.parallel_drafting:
            return k if self.method == "draft_model" else k - 1
        return 1 if self.method == "draft_model" else 0

    @property
    def num_prefill_lookahead_tokens(self) -> int:
        """Prefill tokens past the computed range the drafter reads: 1 for eagle-family drafters (the single-module
        MTP included), else 0. A chunk never ends within it of the prompt's end, which for 1 changes nothing."""
        return 1 if self.use_eagle else 0

    def __repr__(self) -> str:  # (as the flag takes it: messages name the config the user gave)
        return json.dumps(self.as_dict())

    def as_dict(self) -> dict[str, Any]:
        """The keys given (vLLM's names), for messages and records."""
        out: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.parallel_drafting:
            out["parallel_drafting"] = True
        out.update({k: getattr(self, k) for k in DESCRIPTIVE if getattr(self, k) is not None})
        return out


def speculative_config(value: Any, where: str = "speculative_config") -> SpeculativeConfig:
    """A `SpeculativeConfig` from a JSON object (a dict, or its text as `--speculative-config` takes it); keys vLLM
    0.33 does not have, and those whose effect is not modelled, refused naming the key."""
    if isinstance(value, SpeculativeConfig):
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc.msg} at character {exc.pos}); expected an object such as "
                              '\'{"method": "eagle3", "num_speculative_tokens": 3}\'') from None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a JSON object with method and num_speculative_tokens, got {value!r}")
    for key in value:
        if key in UNMODELLED:
            raise ConfigError(f"{where}.{key}: a vLLM 0.33 option whose effect servesim does not model; drop it")
        if key not in KEYS:
            raise ConfigError(f"{where}.{key}: not an option of vLLM 0.33's speculative config; expected "
                              f"{', '.join(KEYS)}")
    for key in ("method", "num_speculative_tokens"):
        if key not in value:
            raise ConfigError(f"{where}.{key}: missing (servesim reads no draft model's config to default it)")
    try:
        return SpeculativeConfig(**value)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("speculative_config", where, 1)) from None
