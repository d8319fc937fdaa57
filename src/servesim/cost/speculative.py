"""The cost of a step with speculative decoding (vLLM 0.33's v1 engine, `vllm/v1/spec_decode/`): the target's
verification and the drafter's own forward passes, on the roofline.

Verification. A decode that verifies d drafts is one of the step's rows with 1 + d new tokens against its
context (the engine's `StepShape` already holds it so: the target's GEMMs and attention price it as such). The
rejection sampler reads the target's probabilities at every one of those positions, so the LM head and sampler
run over 1 + d rows for it, not one (`num_sampled` raised by the drafts).

The drafter, per method (its passes after the target's, in series on the same GPUs):
- `eagle`, `eagle3`, `mtp`: a one-layer head (`EagleProposer.propose`). Its first pass runs over every token the
  target ran this step (vLLM's default padded drafter batch keeps the rejected ones, masked), its next K - 1
  passes over one token per request that samples (`parallel_drafting`: one pass, K - 1 more slots each instead).
  The head: EAGLE and EAGLE-3 one dense decoder layer of the target's width (EAGLE-3 with its own draft
  vocabulary of 32,000 tokens, the speculators library's `Eagle3SpeculatorConfig`; EAGLE the target's LM head);
  MTP the target's own decoder layer (DeepSeek-V3's MTP module, MoE and MLA as the target's) with the target's LM
  head. The input projection that feeds the head the target's hidden states (2 or 3 x hidden -> hidden) is not
  priced: under a quarter of the layer's weights.
- `draft_model`: the draft model's own roofline at `draft_tensor_parallel_size` (default: the target's TP), the
  same passes; `speculative_config.model` must name a servesim model.
- `ngram`: no GPU work; its prompt lookup runs on the host between steps and is not priced (no measurement of it
  is in the repository).

SGLang 0.5.23 (`--policy sglang`, `srt/speculative/eagle_worker_v2.py`): a decode step runs `draft()` (num_steps -
1 one-token passes per request, 808-830: its first draft token came from the last draft extend), the target's
verification over num_steps + 1 tokens, then `_draft_extend_for_decode` over num_draft_tokens = num_steps + 1 per
request (1110-1160); a prefill batch the target's extend, then the drafter's over its tokens
(`_draft_extend_for_prefill`). So the same passes as vLLM's, but the K - 1 one-token passes run for the requests
that verify (decodes scheduled 1 + K), not for the prefill rows that sample (`Drafter.one_token_rows` "verifying").
NEXTN is priced as an MTP layer (SGLang's alias of EAGLE for DeepSeek-style NextN layers), STANDALONE as its draft
model's roofline (`--speculative-draft-model-path`, the target's TP). Its token pool is sized with the drafter's
weights and KV (`max_total_num_tokens`): SGLang gives the draft one KV slot per target slot.

Memory: the drafter's weights and its KV (its layers' bytes per token, in the target's blocks, as vLLM allocates the
draft layers in the same KV cache groups) come out of the pool `num_gpu_blocks` derives; EAGLE and MTP share the
target's embedding and LM head, so only their layer is counted (EAGLE-3 its draft LM head too).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from servesim.cost.base import CostModel, StepShape
from servesim.cost.roofline import Roofline
from servesim.cost.specs import ModelSpec, load_model
from servesim.errors import ConfigError

EAGLE3_DRAFT_VOCAB = 32_000  # EAGLE-3 heads' draft vocabulary (speculators' Eagle3SpeculatorConfig: 32K of 128K)
HEADS = ("eagle", "eagle3", "mtp")


@dataclass(frozen=True, slots=True)
class Drafter:
    """What the cost reads of a speculative config (vLLM's `SpeculativeConfig` has the same fields): the method,
    K, and which rows the K - 1 one-token passes run over: "sampled" (vLLM: every request that samples) or
    "verifying" (SGLang: every decode that verifies drafts)."""

    method: str
    num_speculative_tokens: int
    parallel_drafting: bool = False
    model: str | None = None
    draft_tensor_parallel_size: int | None = None
    one_token_rows: str = "sampled"


class SpeculativeCost:
    """A roofline with a drafter: `step_time` of a step whose decodes verify drafts, the drafter's passes added to
    the device time before the engine's host model combines them (as `Roofline.step_time` does)."""

    __slots__ = ("target", "drafter", "k", "parallel", "name", "kv_bytes_per_token", "shared_bytes", "method",
                 "verifying")

    def __init__(self, target: Roofline, spec: Any) -> None:
        self.target, self.method, self.name = target, spec.method, target.name
        self.k, self.parallel = spec.num_speculative_tokens, spec.parallel_drafting
        self.verifying = getattr(spec, "one_token_rows", "sampled") == "verifying"
        self.drafter = draft_roofline(target, spec)
        self.shared_bytes = 0  # the target's weights the drafter reuses (counted once)
        if self.drafter is not None and self.method in ("eagle", "mtp"):
            m = self.drafter.model
            self.shared_bytes = 2 * m.dtype_bytes * -(-m.vocab_size // self.drafter.tp) * m.hidden_size
        self.kv_bytes_per_token = target.kv_bytes_per_token + (
            self.drafter.kv_bytes_per_token if self.drafter is not None else 0)

    # what the engines' resolution and the readers ask of a roofline: the target's
    model = property(lambda self: self.target.model)
    gpu = property(lambda self: self.target.gpu)
    tp = property(lambda self: self.target.tp)
    engine = property(lambda self: self.target.engine)
    params = property(lambda self: self.target.params)
    layout = property(lambda self: getattr(self.target, "layout", None))

    def step_time(self, shape: StepShape) -> float:
        device, host, issue = self.split(shape)
        e = self.target.engine
        return device if e is None else e.wall(device, host, issue)

    def split(self, shape: StepShape) -> tuple[float, float, float]:
        """(device, host, eager issue) seconds, as `Roofline.split`: the device's with the verification's logits
        and the drafter's passes."""
        drafts = sum(q - 1 for q, d in zip(shape.num_new_tokens, shape.is_decode) if d and q > 1)
        device, host, issue = self.target.split(replace(shape, num_sampled=shape.num_sampled + drafts)
                                                if drafts else shape)
        return device + self.draft_time(shape), host, issue

    @property
    def weight_bytes(self) -> int:
        """Weights per GPU: the target's and the drafter's (less what the drafter shares of the target's)."""
        d = self.drafter
        return self.target.weight_bytes + (d.weight_bytes - self.shared_bytes if d is not None else 0)

    def draft_time(self, shape: StepShape) -> float:
        """The drafter's device seconds after a target pass of this shape."""
        d, n = self.drafter, shape.num_sampled
        if d is None or not shape.num_new_tokens:
            return 0.0
        if self.verifying:  # (SGLang: the one-token passes draft for the decodes that verify)
            n = sum(1 for q, dec in zip(shape.num_new_tokens, shape.is_decode) if dec and q > 1)
        if self.parallel:  # one pass, K - 1 more slots for each request that samples
            extra = (self.k - 1) * n
            first = StepShape(shape.num_new_tokens + (extra,) if extra else shape.num_new_tokens,
                              shape.num_context_tokens + (0,) if extra else shape.num_context_tokens,
                              shape.is_decode + (True,) if extra else shape.is_decode, n)
            return d.step_time_with_decodes(0, 0, first, device_only=True)
        t = d.step_time_with_decodes(0, 0, shape, device_only=True)
        if n and self.k > 1:  # each later pass: one token for each request that samples, against its context
            context = _verifying_context(shape) if self.verifying else _sampled_context(shape)
            t += (self.k - 1) * d.step_time_with_decodes(n, context, EMPTY, device_only=True)
        return t

    def max_total_num_tokens(self, mem_fraction_static: float) -> int:
        """SGLang's token pool with the drafter loaded: (GPU memory x mem_fraction_static - the target's and the
        drafter's weights) / (the target's and the drafter's KV bytes per token)."""
        t, d = self.target, self.drafter
        if d is None:
            return t.max_total_num_tokens(mem_fraction_static)
        if not 0 < mem_fraction_static <= 1:
            raise ConfigError(f"sglang.mem_fraction_static must be in (0, 1], got {mem_fraction_static}")
        tokens = int((t.gpu.memory_bytes * mem_fraction_static - self.weight_bytes) // self.kv_bytes_per_token)
        if tokens < 2:
            raise ConfigError(f"{t.model.name} with its {self.method} drafter does not fit on {t.gpu.name} at "
                              f"tp={t.tp}: weights {self.weight_bytes / 2**30:.1f} GiB per GPU; raise tp or "
                              "sglang.mem_fraction_static")
        return tokens

    def num_gpu_blocks(self, block_size: int, gpu_memory_utilization: float = 0.9,
                       max_num_batched_tokens: int = 2048, max_num_seqs: int = 256) -> int:
        """vLLM's pool with the drafter loaded: its weights beside the target's, its layers' KV in every block."""
        t, d = self.target, self.drafter
        if d is None:
            return t.num_gpu_blocks(block_size, gpu_memory_utilization, max_num_batched_tokens, max_num_seqs)
        if block_size <= 0 or not 0 < gpu_memory_utilization <= 1:
            raise ConfigError("block_size must be > 0 and gpu_memory_utilization in (0, 1]")
        weights = self.weight_bytes
        free = (t.gpu.memory_bytes * gpu_memory_utilization - weights
                - t.activation_peak_bytes(max_num_batched_tokens, max_num_seqs))
        blocks = int(free // (block_size * self.kv_bytes_per_token))
        if blocks < 2:
            raise ConfigError(f"{t.model.name} with its {self.method} drafter does not fit on {t.gpu.name} at "
                              f"tp={t.tp}: weights {weights / 2**30:.1f} GiB per GPU; raise tp or "
                              "gpu_memory_utilization")
        return blocks


EMPTY = StepShape((), (), (), 0)


def _sampled_context(shape: StepShape) -> int:
    """The summed contexts, after this step, of the rows that sample: every decode, then (a shape does not say
    which prefill rows complete) the prefill rows' mean for the rest."""
    rows = list(zip(shape.num_new_tokens, shape.num_context_tokens, shape.is_decode))
    dec = [q + c for q, c, d in rows if d][:shape.num_sampled]
    rest = [q + c for q, c, d in rows if not d]
    missing = shape.num_sampled - len(dec)
    return sum(dec) + (missing * sum(rest) // len(rest) if missing > 0 and rest else 0)


def _verifying_context(shape: StepShape) -> int:
    """The summed contexts, after this step, of the decodes that verify drafts."""
    return sum(q + c for q, c, d in zip(shape.num_new_tokens, shape.num_context_tokens, shape.is_decode)
               if d and q > 1)


def draft_model_spec(target: ModelSpec, method: str) -> ModelSpec:
    """The one-layer head of an EAGLE, EAGLE-3 or MTP drafter for `target` (see the module's docstring)."""
    # (one full-attention layer: a hybrid target's sliding-window and linear layers are not the head's)
    hybrid = dict(sliding_window=0, num_sliding_layers=0, num_linear_layers=0)
    if method == "mtp":
        return replace(target, name=f"{target.name} (MTP module)", num_hidden_layers=1, num_dense_layers=0,
                       **hybrid)
    head = replace(target, name=f"{target.name} ({method} head)", num_hidden_layers=1, num_local_experts=0,
                   index_topk=0, index_n_heads=0, index_head_dim=0, **hybrid,
                   num_experts_per_tok=0, moe_intermediate_size=0, shared_expert_intermediate_size=0,
                   num_dense_layers=0, kv_lora_rank=0, q_lora_rank=0, qk_nope_head_dim=0, qk_rope_head_dim=0,
                   v_head_dim=0, quant_method="", weight_block_size=None, int4_group_size=0,
                   int4_experts_only=False)
    return replace(head, vocab_size=EAGLE3_DRAFT_VOCAB) if method == "eagle3" else head


def draft_roofline(target: Roofline, spec: Any) -> Roofline | None:
    """The drafter's roofline on the target's GPUs (no host model: its passes are device work inside the step)."""
    params = replace(target.params, step_overhead=0.0)
    if spec.method in HEADS:
        return Roofline(draft_model_spec(target.model, spec.method), target.gpu, target.tp, params,
                        kv_cache_dtype=target.kv_cache_dtype,
                        quantization=target.quantization if spec.method == "mtp" else None)
    if spec.method == "draft_model":
        if spec.model is None:
            raise ConfigError("speculative_config.model: a draft_model drafter must name its model (a servesim "
                              "model or a config.json path) for the roofline to price it")
        tp = spec.draft_tensor_parallel_size or target.tp
        return Roofline(load_model(spec.model), target.gpu, tp, params, kv_cache_dtype=target.kv_cache_dtype)
    return None


def with_drafter(cost: CostModel, config: Any) -> CostModel:
    """`cost` with the drafter of `config.speculative_config` priced in, where `cost` is a roofline; other cost
    models (the lesson's toy cost, the unit cost, a calibrated profile) are returned as they are."""
    spec = getattr(config, "speculative_config", None) if config is not None else None
    if spec is None:
        spec = sglang_drafter(getattr(config, "sglang", None))
    if spec is None or not isinstance(cost, Roofline):
        return cost
    return SpeculativeCost(cost, spec)


SGLANG_METHODS = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "STANDALONE": "draft_model"}


def sglang_drafter(sg: Any) -> Drafter | None:
    """SGLang's `--speculative-algorithm` as the cost reads it (None: not speculating). STANDALONE without
    num_steps takes SGLang's (3, 1, 4); an unchecked config is refused later by the engine's resolution."""
    algo = getattr(sg, "speculative_algorithm", None)
    method = SGLANG_METHODS.get(algo.upper()) if isinstance(algo, str) else None
    if method is None:
        return None
    k = sg.speculative_num_steps or 3
    path = sg.speculative_draft_model_path if method == "draft_model" else None
    return Drafter(method, k, model=path, one_token_rows="verifying")
