"""Roofline step cost: a step's exact composition, a model's shapes and a GPU's datasheet give the step's time.

Every operator's time is max(FLOPs / (peak x compute efficiency), bytes / (bandwidth x memory efficiency)) plus
a per-kernel floor; a step adds the tensor-parallel all-reduces and a per-step host overhead, or, given an
`EngineProfile` (`servesim.cost.host`), the engine's host work beside the device time: in series or overlapped,
with eager launches and the engine's custom all-reduce. Units: seconds,
bytes, FLOPs. Everything that depends only on the model, GPU and `tp` is computed once in `__init__`, so
`step_time` is one pass over the scheduled requests plus a few dozen multiplications.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from servesim.cost.attention_kinds import AttentionKinds
from servesim.cost.base import OpCost, StepShape
from servesim.cost.comm import A2A_KERNELS, Fabric, allreduce_time  # noqa: F401 (allreduce_time: its old home)
from servesim.cost.host import EngineProfile
from servesim.cost.kv_groups import KVGroups, state_block_size
from servesim.cost.layout import Layout
from servesim.cost.specs import GpuSpec, ModelSpec, is_finite, is_int, is_real, load_gpu, load_model, show
from servesim.errors import ConfigError

# Tensor-core GEMM kernels compute the token dimension in CTA tiles of 128 rows: 129 tokens cost as much compute
# as 256. Below one tile a GEMM is memory-bound on every listed GPU, so the padding only shapes the transition.
GEMM_TILE_TOKENS = 128
# Per layer: two fused_add_rms_norm, rotary embedding, activation (vLLM fuses the residual adds into the norms).
ELEMENTWISE_KERNELS_PER_LAYER = 4
# The sampler reads the float32 logits about three times (softmax, top-k/top-p, sampling).
SAMPLER_LOGIT_PASSES = 3
# Decode stretches at least this long are computed with numpy (its per-call cost pays off from here on).
NUMPY_STRETCH = 24
# The step `Roofline` prices once at build to refuse numbers whose step times overflow: this many decodes at this
# context each, plus a prefill chunk of this many tokens at this context (far beyond any real step).
PROBE_COUNT = 1 << 30
# vLLM's names: `--quantization fp8` (weights and activations of the linear layers in FP8, the LM head kept in
# 16 bits) and `--kv-cache-dtype` (auto: the model's dtype; fp8 variants: one byte per element).
QUANTIZATIONS = ("fp8", "modelopt_fp4", "mxfp4")
# NVFP4 (`--quantization modelopt_fp4`, ModelOpt's NVFP4 checkpoints): 4-bit weights with one FP8 scale per 16,
# 0.5 + 1/16 bytes a weight (the per-tensor FP32 scale aside)
NVFP4_BYTES = 0.5625
# A checkpoint's families of linear layers kept in 16 bits (`ModelSpec.unquantized`), as vLLM names their GEMMs
UNQUANTIZED_GEMMS = {"attention": ("qkv_proj", "o_proj"),
                     "linear_attention": ("in_proj_qkvz", "in_proj_ba", "out_proj"),
                     "shared_experts": ("shared_expert.gate_up_proj", "shared_expert.down_proj"),
                     "dense": ("gate_up_proj", "down_proj")}
# MXFP4 (`--quantization mxfp4`, the OCP microscaling format of gpt-oss's experts): 4-bit E2M1 weights with one
# 8-bit E8M0 scale per 32, 0.5 + 1/32 bytes a weight (4.25 bits)
MXFP4_BYTES = 0.53125


def int4_bytes(group_size: int) -> float:
    """Bytes a weight of compressed-tensors' W4A16 checkpoints: 4 bits and a 16-bit scale per group."""
    return 0.5 + 2 / group_size
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
# SGLang's --swa-full-tokens-ratio default (`server_args.py`): its sliding-window pool's tokens over the full pool's
SWA_FULL_TOKENS_RATIO = 0.8
# SGLang's --mamba-full-memory-ratio default: a linear-attention state pool's memory over the full-attention KV's
MAMBA_FULL_MEMORY_RATIO = 0.9


@dataclass(frozen=True, slots=True)
class MoeLayers:
    """A MoE model's MLPs on one GPU: (name, k, n) GEMMs as `Roofline._gemms`."""

    local_experts: int  # the routed experts this GPU holds
    rows_per_token: float  # routed rows a token brings this GPU: top-k, over the EP ranks
    local_share: float  # the share of the experts it holds (1 / EP ranks)
    experts: list  # one routed expert's gate_up_proj and down_proj
    router_width: int  # the router GEMM's n: every expert
    shared: list  # the shared experts' GEMMs (empty: none)
    num_moe_layers: int
    dense: list  # the dense layers' MLP GEMMs
    num_dense_layers: int

    @property
    def act_width(self) -> float:
        """Elements per token of a MoE layer's activations (gate-up out, down in), over the rows routed here
        and the shared experts."""
        (_, _, up), (_, width, _) = self.experts
        shared = sum(n for _, _, n in self.shared[:1]) + sum(k for _, k, _ in self.shared[1:])
        return self.rows_per_token * (up + width) + shared


@dataclass(frozen=True, slots=True)
class CostParams:
    """The fitted (or default) constants that turn FLOPs and bytes into seconds."""

    compute_efficiency: float  # fraction of dense peak FLOP/s that GEMMs and attention reach
    memory_efficiency: float  # fraction of peak memory bandwidth that memory-bound kernels reach
    kernel_latency: float  # seconds: floor per GPU kernel
    step_overhead: float  # seconds per step: host-side scheduling, input preparation, sampling bookkeeping
    # All-reduce: (latency seconds, fraction of per-direction interconnect bandwidth) per NCCL protocol; the
    # collective takes the fastest, as NCCL picks a low-latency protocol for small messages and "Simple" for big.
    allreduce: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        for field in ("compute_efficiency", "memory_efficiency"):
            value = getattr(self, field)
            if not (is_real(value) and 0 < value <= 1):  # NaN fails the comparison too
                raise ConfigError(f"{field}: expected a fraction in (0, 1], got {show(value)}")
        for field in ("kernel_latency", "step_overhead"):
            value = getattr(self, field)
            if not (is_finite(value) and value >= 0):
                raise ConfigError(f"{field}: expected a finite number of seconds >= 0, got {show(value)}")
        pairs = self.allreduce
        if not isinstance(pairs, tuple) or not pairs:
            raise ConfigError(f"allreduce: expected at least one (latency, efficiency) pair, got {show(pairs)}")
        for i, pair in enumerate(pairs):
            lat, eff = pair if isinstance(pair, tuple) and len(pair) == 2 else (None, None)
            if not (is_finite(lat) and lat >= 0 and is_real(eff) and 0 < eff <= 1):
                raise ConfigError(f"allreduce[{i}]: expected (latency seconds >= 0, efficiency in (0, 1]), "
                                  f"got {show(pair)}")

    @classmethod
    def defaults(cls, gpu: GpuSpec, tp: int = 1) -> CostParams:
        """The GPU file's constants; the all-reduce protocols fitted for this TP size where it has them."""
        return cls(gpu.compute_efficiency, gpu.memory_efficiency, gpu.kernel_latency, gpu.step_overhead,
                   gpu.allreduce_protocols(tp))


def _check_options(m: ModelSpec, g: GpuSpec, tp: object, quantization: str | None, kv_cache_dtype: str,
                   layout: Layout) -> str | None:
    """Refuse what the model, the GPU and the options cannot do together, in one line each; the quantization
    served (the checkpoint's own where --quantization is not given, as vLLM reads it)."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ConfigError(f"--quantization {quantization}: expected one of {', '.join(QUANTIZATIONS)} (or none)")
    if quantization == "mxfp4" and m.quant_method != "mxfp4":
        raise ConfigError(f"--quantization mxfp4: {m.name}'s checkpoint is not MXFP4 (its quantization_config has "
                          "no quant_method mxfp4); expected an MXFP4 checkpoint, e.g. gpt-oss-120b")
    if m.quant_method and quantization not in (None, m.quant_method, "modelopt_fp4"):
        raise ConfigError(f"--quantization {quantization}: {m.name}'s checkpoint is {m.quant_method} (its "
                          "quantization_config), which vLLM serves as it is; drop --quantization")
    quantization = quantization or m.quant_method or None
    if quantization == "fp8" and g.fp8_flops is None:
        raise ConfigError(f"--quantization fp8: {g.name} has no FP8 tensor cores (no dense_fp8_tflops in its "
                          "GPU file); expected a GPU with FP8, e.g. h100-80gb")
    if quantization == "modelopt_fp4" and g.description.startswith("AMD"):
        raise ConfigError(f"--quantization modelopt_fp4: NVFP4's kernels are NVIDIA's (ModelOpt, FlashInfer, "
                          f"Marlin); vLLM serves no NVFP4 checkpoint on {g.name}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ConfigError(f"--kv-cache-dtype {kv_cache_dtype}: expected one of {', '.join(KV_CACHE_DTYPES)}")
    if not is_int(tp) or tp < 1:
        raise ConfigError(f"tp: expected a positive integer, got {show(tp)}")
    if m.num_attention_heads % tp:
        raise ConfigError(f"tp={tp}: must divide num_attention_heads ({m.num_attention_heads}) of {m.name}")
    if m.num_key_value_heads % tp and tp % m.num_key_value_heads:
        raise ConfigError(f"tp={tp}: num_key_value_heads ({m.num_key_value_heads}) of {m.name} must divide "
                          "or be a multiple of tp")
    for key in ("linear_num_key_heads", "linear_num_value_heads"):
        if getattr(m, key) % tp:
            raise ConfigError(f"tp={tp}: must divide {key} ({getattr(m, key)}) of {m.name}")
    if m.num_moe_layers < m.num_hidden_layers and m.intermediate_size % tp:
        raise ConfigError(f"tp={tp}: must divide intermediate_size ({m.intermediate_size}) of {m.name}")
    if not m.num_local_experts:
        if layout.expert_parallel:
            raise ConfigError(f"{_ep_flag(layout)}: {m.name} has no experts (a dense model); drop it")
        return quantization
    ep, mtp = layout.moe_ep, layout.moe_tp
    if m.num_local_experts % ep:
        raise ConfigError(f"{_ep_flag(layout)}: the experts' {ep} ranks must divide the {m.num_local_experts} "
                          f"experts of {m.name}")
    if m.expert_intermediate_size % mtp:
        raise ConfigError(f"MoE TP {mtp} (tp x dp / ep): must divide the experts' width "
                          f"({m.expert_intermediate_size}) of {m.name}; or shard whole experts with {_ep_flag(layout)}")
    if m.shared_expert_intermediate_size % tp:
        raise ConfigError(f"tp={tp}: must divide the shared experts' width ({m.shared_expert_intermediate_size}) "
                          f"of {m.name}")
    return quantization


def _ep_flag(layout: Layout) -> str:
    return f"--ep-size {layout.moe_ep}" if layout.engine == "sglang" else "--enable-expert-parallel"


def _layout(tp: int | None, enable_expert_parallel: object, layout: Layout | None) -> Layout:
    """The layout given, or vLLM's at one data-parallel rank from `tp` and `enable_expert_parallel`."""
    if not isinstance(enable_expert_parallel, bool):
        raise ConfigError(f"enable_expert_parallel: expected true or false, got {show(enable_expert_parallel)}")
    if layout is None:
        if tp is not None and not (is_int(tp) and tp >= 1):
            raise ConfigError(f"tp: expected a positive integer, got {show(tp)}")
        return Layout.vllm(1 if tp is None else tp, 1, enable_expert_parallel)
    if not isinstance(layout, Layout):
        raise ConfigError(f"layout: expected a servesim.cost.layout.Layout, got {show(layout)}")
    if (tp is not None and tp != layout.tp) or enable_expert_parallel:
        raise ConfigError(f"tp={tp}, enable_expert_parallel={enable_expert_parallel}: the layout says them "
                          f"(attention TP {layout.tp}, EP {layout.moe_ep}); give one or the other")
    return layout


class Roofline(AttentionKinds):
    """Step cost of `model` on GPUs of type `gpu`: one data-parallel rank of `tp` GPUs (tensor parallel), or the
    `layout` given (`servesim.cost.layout`: data-parallel ranks, the experts' MoE TP and EP, how tokens reach
    them); a step's shape is one rank's.

    A MoE layer's experts are split over the layout's GPUs: E / EP whole experts per GPU, each of width / MoE TP.
    Routing is uniform (each token's top-k a uniform draw) but for the busiest rank: a step reads the experts it
    touches, E (1 - (1 - k / E)^N) of the N tokens entering the layer over all ranks, and a rank its share, 1 / EP,
    of them and of the routed rows, times the layout's load imbalance (the busiest rank, whom the others wait for;
    capped at the experts it holds). The tokens reach the experts as the layout says (`_comm_ops`): already there
    (one rank: the layer ends in the TP all-reduce), all-gathered and reduce-scattered over the data-parallel
    ranks, or dispatched and combined by DeepEP, over the fabric (`servesim.cost.comm`).
    """

    __slots__ = ("name", "model", "gpu", "tp", "params", "kv_bytes_per_token", "_c", "_m", "_kl", "_L", "_gemms",
                 "_moe", "_cq", "_dw", "quantization", "kv_cache_dtype", "enable_expert_parallel", "_kernels_layers",
                 "_attn_prefill", "_block", "_aq", "_ew",
                 "_attn_flops", "_attn_bytes_kv",
                 "_attn_bytes_q", "_elem_bytes", "_elem_s", "_elem_floor", "_ap", "_ad",
                 "_lm", "_sampler_bytes", "_ar_bytes", "_ar_count", "_ar_link", "_weights", "_act_bytes",
                 "_by_tokens", "_by_sampled", "_decode", "engine", "_car", "_kernels_layer", "_kernels_step", "_host",
                 "layout", "fabric", "_a2a", "_dispatch_bytes", "_by_a2a", "_ce", "_eaq", "_La", "_Ls", "_W",
                 "_Ll", "_kind_gemms", "_gdn", "state_bytes_per_request", "_index", "_bf16")

    def __init__(self, model: str | ModelSpec = "llama-3-8b", gpu: str | GpuSpec = "h100-80gb", tp: int | None = None,
                 params: CostParams | None = None, engine: EngineProfile | None = None,
                 quantization: str | None = None, kv_cache_dtype: str = "auto",
                 enable_expert_parallel: bool = False, layout: Layout | None = None) -> None:
        m, g = load_model(model), load_gpu(gpu)
        layout = _layout(tp, enable_expert_parallel, layout)
        tp = layout.tp
        quantization = _check_options(m, g, tp, quantization, kv_cache_dtype, layout)
        self.quantization, self.kv_cache_dtype = quantization, kv_cache_dtype
        # block-wise FP8 (the checkpoint's weight_block_size): vLLM quantizes each GEMM's activations per token
        # and 128-column group in a kernel of its own (`per_token_group_quant_fp8`) before the block GEMM
        self._block = quantization == "fp8" and m.weight_block_size is not None
        # NVFP4 on a GPU with FP4 tensor cores runs W4A4, its activations quantized per 16 in a kernel of their
        # own (as block FP8's): bytes read and written per input element of each such GEMM (0: none)
        w4a4 = quantization == "modelopt_fp4" and g.fp4_flops is not None
        self._aq = m.dtype_bytes + 1 if self._block else m.dtype_bytes + NVFP4_BYTES if w4a4 else 0
        self.layout, self.enable_expert_parallel = layout, layout.moe_ep > 1
        self.name, self.model, self.gpu, self.tp = "roofline", m, g, tp
        self._by_tokens: dict[int, float] = {}
        self._by_sampled: dict[int, float] = {}
        self._decode: dict[int, tuple] = {}  # decode_stretch's constants per batch size
        p = params or CostParams.defaults(g, tp)
        if engine is not None:  # the engine's host model takes the place of the flat per-step overhead
            p = replace(p, step_overhead=0.0)
        self.params, self.engine = p, engine
        self.fabric = Fabric.of(g, p.allreduce, tp)
        self._car = engine.custom_all_reduce_for(tp) if engine is not None else None
        # The engine's host model as the hot path uses it: (per-step s, per-sequence s, eager launch s, overlap).
        self._host = None if engine is None else (engine.fixed_host(tp), engine.seq_host,
                                                  engine.launch if engine.enforce_eager else 0.0,
                                                  engine.async_scheduling)
        d, h, hd, L = m.dtype_bytes, m.hidden_size, m.head_dim, m.num_hidden_layers
        heads = m.num_attention_heads // tp
        kv_heads = max(1, m.num_key_value_heads // tp)  # vLLM replicates KV heads when tp > num_key_value_heads
        inter = m.intermediate_size // tp
        vocab = -(-m.vocab_size // tp)  # vocab-parallel LM head, padded
        gate_up = inter * (2 if m.gated_mlp else 1)
        # Seconds per FLOP and per byte, efficiencies folded in.
        self._c = 1.0 / (g.peak_flops * p.compute_efficiency)
        # The linear layers' seconds per FLOP and weight bytes: FP8 at the GPU's dense FP8 peak when quantized.
        # NVFP4: at the FP4 peak where the GPU has one (W4A4), else dequantized into 16-bit GEMMs (vLLM's Marlin
        # W4A16 on Hopper), its weights 4.5 bits either way
        fp8, fp4 = quantization == "fp8", quantization == "modelopt_fp4"
        self._cq = (1.0 / (g.fp8_flops * p.compute_efficiency) if fp8 else
                    1.0 / (g.fp4_flops * p.compute_efficiency) if fp4 and g.fp4_flops else self._c)
        self._dw = 1 if fp8 else NVFP4_BYTES if fp4 else d
        # compressed-tensors W4A16 (the checkpoint's): 16-bit GEMMs over 4-bit weights, every linear layer's or
        # the routed experts' alone; `_ew`: the routed experts' bytes a weight
        self._ew = self._dw
        if quantization == "compressed-tensors":
            self._ew = int4_bytes(m.int4_group_size)
            self._dw = d if m.int4_experts_only else self._ew
        self._mxfp4(quantization, g, p)
        dkv = 1 if kv_cache_dtype.startswith("fp8") else d
        self._m = 1.0 / (g.memory_bandwidth * p.memory_efficiency)
        self._kl, self._L = p.kernel_latency, L
        # attention's layers as priced: full (every position before the query) and capped (the last W positions of
        # a sliding window; DSA's top-k of every layer, W = index_topk); their memory is the model's (`_kv_layers`)
        self._La, self._Ls, self._W = m.num_full_attention_layers, m.num_sliding_layers, m.sliding_window
        if m.index_topk:
            self._La, self._Ls, self._W = 0, L, m.index_topk
        # (name, k, n): a [tokens x k] @ [k x n] GEMM per layer, per GPU (q_proj with its output gate: 2 x heads)
        mlp = [("gate_up_proj", h, gate_up), ("down_proj", inter, h)]
        q_heads = heads * (2 if m.attn_output_gate else 1)
        self._gemms = [("qkv_proj", h, (q_heads + 2 * kv_heads) * hd), ("o_proj", heads * hd, h)]
        # Attention per layer: 4 FLOPs per (query, key) pair per head dim (QK^T and PV); bytes per KV position
        # (K and V of the GPU's KV heads, read) and per new token (Q read, O written, its K and V written). The
        # decode's constants, and the prefill's: (FLOPs per pair, FLOPs per KV position, bytes per KV
        # position, bytes per new token).
        self._attn_flops = 4.0 * heads * hd
        self._attn_bytes_kv = 2 * kv_heads * hd * dkv
        self._attn_bytes_q = (2 * heads + 2 * kv_heads) * hd * d
        self.kv_bytes_per_token = m.num_full_attention_layers * 2 * kv_heads * hd * dkv  # (full layers only)
        self._attn_prefill = (self._attn_flops, 0.0, self._attn_bytes_kv, self._attn_bytes_q)
        if m.is_mla:
            self._mla(m, heads, d, dkv)
        self._index = None
        if m.index_topk:
            self._indexer(m)
        # GEMMs a partly quantized checkpoint keeps in 16 bits (`ModelSpec.unquantized`), by vLLM module name
        self._bf16 = frozenset(name for family in m.unquantized for name in UNQUANTIZED_GEMMS[family]) \
            if quantization == m.quant_method else frozenset()
        attn_w = L * sum(k * n * self._wbytes(name) for name, k, n in self._gemms)
        # (name, k, n, layers): GEMMs of one layer kind only (a hybrid model's attention and linear attention)
        self._kind_gemms: list[tuple[str, int, int, int]] = []
        self._Ll, self._gdn, self.state_bytes_per_request = m.num_linear_layers, None, 0
        if self._Ll:
            self._gated_deltanet(m, tp, d)
            attn_w = sum(k * n * count * self._wbytes(name) for name, k, n, count in self._kind_gemms)
        self._moe = self._moe_layers(m, mlp) if m.num_local_experts else None
        if self._moe is None:
            self._gemms += mlp
        self._set_kernels(m, g, p, tp, heads, kv_heads, inter, gate_up, vocab)
        dense_w = sum(k * n * self._wbytes(name) for name, k, n in mlp)
        shared_w, experts_w, router_w = 0, 0, 0
        if self._moe is not None:  # (the router stays in 16 bits under FP8, as vLLM builds it)
            moe = self._moe
            experts_w = moe.local_experts * sum(k * n for _, k, n in moe.experts)
            shared_w, router_w = sum(k * n * self._wbytes(name) for name, k, n in moe.shared), h * moe.router_width
        lm = m.num_moe_layers
        self._weights = int(attn_w + (L - lm) * dense_w + lm * shared_w + self._ew * lm * experts_w
                            + d * (lm * router_w + vocab * h * (1 if m.tie_word_embeddings else 2)))
        act = gate_up + inter if self._moe is None else max(self._moe.act_width, (gate_up + inter) * (lm < L))
        self._act_bytes = d * (2 * h + act)  # live activations per token at the MLP
        self._check_finite()

    def _wbytes(self, name: str) -> float:
        """Bytes a weight of the GEMM `name` (outside the routed experts): 16 bits where the checkpoint keeps it
        so, else the linear layers' precision."""
        return self.model.dtype_bytes if name in self._bf16 else self._dw

    def _mxfp4(self, quantization: str | None, g: GpuSpec, p: CostParams) -> None:
        """The routed experts' seconds per FLOP (`_ce`) and activation quantization bytes per input element
        (`_eaq`). MXFP4 (the experts alone, `--quantization mxfp4`): W4A4 at the FP4 peak where the GPU file has
        one (Blackwell), the activations quantized per 32 in a kernel of their own (read 16 bits, write 4.25);
        else W4A16 (Hopper: vLLM's Marlin / Triton MXFP4 MoE kernels dequantize the weights into 16-bit GEMMs)."""
        self._ce, self._eaq = self._cq, self._aq
        if quantization == "mxfp4":
            self._dw, self._ew, self._cq, self._aq = self.model.dtype_bytes, MXFP4_BYTES, self._c, 0
            w4a4 = g.fp4_flops is not None
            self._ce = 1.0 / (g.fp4_flops * p.compute_efficiency) if w4a4 else self._c
            self._eaq = self.model.dtype_bytes + MXFP4_BYTES if w4a4 else 0

    def _mla(self, m: ModelSpec, heads: int, d: int, dkv: int) -> None:
        """Multi-head latent attention as vLLM 0.33 runs it (`vllm/model_executor/layers/attention/mla_attention.py`,
        `MLACommonImpl`; DeepSeek-V3's modules): per GPU the replicated fused_qkv_a_proj (hidden -> q_lora_rank +
        kv_lora_rank + rope), q_b_proj and o_proj over the GPU's heads; each layer caches one latent of
        kv_lora_rank + rope per token, the same on every GPU (not split by TP). A decode runs absorbed: its query
        through kv_b_proj's W_UK (per head nope -> rank), attention over the latents (QK over rank + rope, PV
        over rank), the result through W_UV (rank -> v); a prefill chunk decompresses its c + q positions'
        latents through kv_b_proj and attends with nope + rope / v head dims. The absorbed projections are
        priced for every new token, a prefill's too, which vLLM's prefill path skips (for DeepSeek-V3 on a TP-8
        GPU 2 x 16 x 131,072 FLOPs a token beside ~9.4 GFLOPs of its other GEMMs)."""
        h, r, ql, rope = m.hidden_size, m.kv_lora_rank, m.q_lora_rank, m.qk_rope_head_dim
        nope, v, qk = m.qk_nope_head_dim, m.v_head_dim, m.qk_nope_head_dim + m.qk_rope_head_dim
        q = [("fused_qkv_a_proj", h, ql + r + rope), ("q_b_proj", ql, heads * qk)] if ql else \
            [("q_proj", h, heads * qk), ("kv_a_proj_with_mqa", h, r + rope)]
        self._gemms = q + [("kv_b_proj.W_UK", heads * nope, r), ("kv_b_proj.W_UV", heads * r, v),
                           ("o_proj", heads * v, h)]
        self._attn_flops = 2.0 * heads * (2 * r + rope)  # absorbed: QK over r + rope, PV over r
        self._attn_bytes_kv = self._latent_bytes(m, dkv)  # one latent per position, read by every head
        self._attn_bytes_q = (heads * (2 * r + rope) + r + rope) * d  # q in, latent out, the token's latent written
        self.kv_bytes_per_token = m.num_full_attention_layers * (self._latent_bytes(m, dkv) + m.index_key_bytes)
        # prefill: the decompression GEMM per KV position (rank -> heads x (nope + v)), its K and V written and
        # read, then attention with qk = nope + rope and v head dims
        self._attn_prefill = (2.0 * heads * (qk + v), 2.0 * r * heads * (nope + v),
                              (r + rope) * dkv + 2 * heads * (nope + v) * d, (heads * (qk + v) + r + rope) * d)

    def _moe_layers(self, m: ModelSpec, dense_mlp: list) -> MoeLayers:
        """A MoE model's MLPs per GPU: the routed rows a rank's token brings the busiest GPU are the layout's
        ranks' tokens (dp of them under the same padding) x top-k / EP x the load imbalance."""
        h, ei, k, lay = m.hidden_size, m.expert_intermediate_size, m.num_experts_per_tok, self.layout
        ep = lay.moe_ep
        width = ei // lay.moe_tp  # an expert's width per GPU: whole at MoE TP 1
        up = width * (2 if m.gated_mlp else 1)
        experts = [("gate_up_proj", h, up), ("down_proj", width, h)]
        sw = m.shared_expert_intermediate_size // lay.tp
        shared = [("shared_expert.gate_up_proj", h, sw * (2 if m.gated_mlp else 1)),
                  ("shared_expert.down_proj", sw, h)] if sw else []
        dense = dense_mlp if m.num_dense_layers else []
        return MoeLayers(m.num_local_experts // ep, lay.dp * k / ep * lay.imbalance, 1 / ep, experts,
                         m.num_local_experts, shared, m.num_moe_layers, dense, m.num_dense_layers)

    def _set_kernels(self, m: ModelSpec, g: GpuSpec, p: CostParams, tp: int, heads: int, kv_heads: int, inter: int,
                     gate_up: int, vocab: int) -> None:
        """Attention's fitted constants, the elementwise kernels, the LM head and sampler, the all-reduces and the
        kernels launched per layer and per step."""
        d, h, hd, L = m.dtype_bytes, m.hidden_size, m.head_dim, m.num_hidden_layers
        kf, bw = g.kernel_fit, g.memory_bandwidth
        # Attention's own constants (`servesim.cost.kernels`): prefill (s per FLOP, s per query token, floor, s per
        # byte), decode (s per FLOP, s per byte, floor). A GPU file without [kernels] gives the uniform roofline.
        ep, per_q, floor_p = kf.prefill_attention
        ed, floor_d = kf.decode_attention
        cp = 1.0 / (g.peak_flops * ep)
        self._ap = (cp, per_q, floor_p, 1.0 / (bw * ed))
        self._ad = (cp, 1.0 / (bw * ed), floor_d)
        # Per layer: two fused_add_rms_norm (read x and residual, write both), rotary (q, k in and out), activation
        # (in 2I/I, out I); per step the embedding lookup (at the GEMMs' bandwidth) and the final norm.
        rotated = (heads + 1) * m.qk_rope_head_dim if m.is_mla else (heads + kv_heads) * hd
        norm, rotary = 4 * h * d, 2 * rotated * d
        if self._moe is None:
            act = (gate_up + inter) * d
        else:  # the MoE layers' activations over the routed rows and shared experts, and the dense layers'
            lm, ld = m.num_moe_layers, m.num_dense_layers
            act = (lm * self._moe.act_width + ld * (gate_up + inter)) * d / L
        self._elem_bytes = L * (2 * norm + rotary + act) + 2 * h * d + norm
        (en, fn), (er, fr), (ea, fa) = kf.norm, kf.rotary, kf.activation
        self._elem_s = (L * (2 * norm / en + rotary / er + act / ea) + norm / en) / bw + 2 * h * d * self._m
        self._elem_floor = L * (2 * fn + fr + fa) + fn + p.kernel_latency
        self._lm = (h, vocab)
        self._sampler_bytes = SAMPLER_LOGIT_PASSES * 4 * m.vocab_size
        # Row-parallel o_proj and down_proj each end in an all-reduce of the hidden states, and so does the
        # vocab-parallel embedding: 2 per layer + 1 per step; a MoE layer under DeepEP ends in its combine instead
        # (`_comm_ops`, `_a2a_time`).
        lay = self.layout
        self._a2a = self._moe is not None and lay.moe_comm.startswith("deepep")
        combined = m.num_moe_layers if self._a2a else 0
        self._ar_bytes, self._ar_count = h * d, (2 * L + 1 - combined) if tp > 1 else 0
        self._ar_link = g.interconnect_bandwidth / 2  # datasheets state both directions together
        # DeepEP dispatches a token copy in FP8 where the experts run in FP8 or FP4 (hidden bytes + a 4-byte scale
        # per 128), else in 16 bits; it combines in 16 bits
        self._dispatch_bytes = h * (1 + 4 / 128) if self.quantization in ("fp8", "modelopt_fp4") else h * d
        self._by_a2a: dict[tuple[int, str], float] = {}
        # Kernels launched per layer (GEMMs, experts, elementwise, all-reduces; attention counted per step) and
        # per step (embedding, final norm, the embedding's all-reduce): what eager mode issues from the host.
        self._kernels_layer = len(self._gemms) + ELEMENTWISE_KERNELS_PER_LAYER + (2 if tp > 1 else 0)
        self._kernels_layers = L * self._kernels_layer + sum(count for *_, count in self._kind_gemms)
        if self._moe is not None:  # a MoE layer's router, experts and shared experts (and its two collectives
            moe = self._moe  # over the ranks); the dense layers' MLP
            self._kernels_layers += (moe.num_moe_layers * (1 + len(moe.experts) + len(moe.shared)
                                                           + 2 * (lay.moe_comm != "replicated"))
                                     + moe.num_dense_layers * len(moe.dense))
        self._kernels_step = 2 + (1 if tp > 1 else 0)

    def _check_finite(self) -> None:
        """Refuse, once here and never per step, numbers whose step times would overflow. A step's time grows with
        every count in its shape and each term is >= 0 (the specs and params are validated), so a finite time for
        a step far beyond any real one bounds every step's: none can be NaN, inf or negative."""
        big = PROBE_COUNT
        try:
            t = self.step_time_with_decodes(big, big * big, StepShape((big,), (big,), (False,), 1))
        except OverflowError:  # a model dimension too large to be a float
            t = math.inf
        finally:
            self._by_tokens.clear()
            self._by_sampled.clear()
        if not (is_finite(t) and t >= 0):
            raise ConfigError(f"roofline: {self.model.name} on {self.tp} x {self.gpu.name}: step times overflow "
                              f"(a step of 2^30 tokens costs {t} s); expected model and GPU numbers of a real model "
                              "and GPU")

    # -- per-operator pieces (shared by step_time and breakdown) -------------------------------------------------

    def _gemm(self, tokens: int, k: int, n: int, weight_copies: float = 1.0,
              quantized: bool = True, expert: bool = False) -> tuple[float, float]:
        """(compute seconds, memory seconds) of one GEMM: weights read once, activations in and out (16-bit; an
        FP8 GEMM's activation quantization is fused into the kernel before it). `quantized=False`: the LM head,
        which vLLM's fp8 quantization leaves in 16 bits."""
        flops, nbytes, qbytes = self._gemm_parts(tokens, k, n, weight_copies, quantized, expert)
        fc, fm = flops * ((self._ce if expert else self._cq) if quantized else self._c), nbytes * self._m
        if qbytes:  # the activation quantization kernel before it: reads 16 bits, writes 8 or 4.5
            q = qbytes * self._m + self._kl
            return fc + q, fm + q
        return fc, fm

    def _gemm_work(self, tokens: int, k: int, n: int, weight_copies: float = 1.0,
                   quantized: bool = True, expert: bool = False) -> tuple[float, float]:
        """(FLOPs, bytes) of one GEMM as `_gemm` prices it (the breakdown's columns)."""
        flops, nbytes, qbytes = self._gemm_parts(tokens, k, n, weight_copies, quantized, expert)
        return flops, nbytes + qbytes

    def _gemm_parts(self, tokens: int, k: int, n: int, weight_copies: float, quantized: bool,
                    expert: bool) -> tuple[float, float, float]:
        """(FLOPs over the padded token rows, weight and activation bytes, an activation quantization kernel's
        bytes) of one GEMM."""
        padded = -(-tokens // GEMM_TILE_TOKENS) * GEMM_TILE_TOKENS
        d = self.model.dtype_bytes
        dw = (self._ew if expert else self._dw) if quantized else d
        qbytes = tokens * k * (self._eaq if expert else self._aq) if quantized else 0
        return 2.0 * padded * k * n, dw * weight_copies * k * n + d * tokens * (k + n), qbytes

    def _experts_touched(self, tokens: int) -> float:
        """Expected distinct experts the busiest GPU holds that a step touches, with uniform routing: its share of
        E (1 - (1 - k/E)^N), N the tokens of all data-parallel ranks, times the load imbalance, at most the experts
        it holds."""
        e, k, lay = self.model.num_local_experts, self.model.num_experts_per_tok, self.layout
        touched = self._moe.local_share * e * (1.0 - (1.0 - k / e) ** (lay.dp * tokens))
        return min(self._moe.local_experts, touched * lay.imbalance) if lay.imbalance != 1.0 else touched

    # -- the cost model ----------------------------------------------------------------------------------------

    def step_time(self, shape: StepShape) -> float:
        """Seconds for one step of this shape; equals the sum of `breakdown(shape)`."""
        return self.step_time_with_decodes(0, 0, shape)

    def step_time_with_decodes(self, num_decodes: int, decode_context_sum: int, shape: StepShape,
                               device_only: bool = False, pad: int = 0) -> float:
        """A step of `num_decodes` one-token decodes whose contexts sum to `decode_context_sum`, plus `shape`:
        decode attention depends on the contexts only through their sum (the engine's decode cohort). With an
        engine profile, the step's wall time (`EngineProfile.wall`, inlined); `device_only`: the GPU's part.
        `pad`: the token count every data-parallel rank runs its GEMMs at (`dp_step_time`)."""
        pq = pkv = ppairs = 0
        dq = num_decodes
        dkv = dpairs = decode_context_sum + num_decodes  # a decode reads c + 1 positions: q*c + q(q+1)/2 pairs
        for q, c, dec in zip(shape.num_new_tokens, shape.num_context_tokens, shape.is_decode):
            if dec:
                dq += q
                dkv += c + q
                dpairs += q * c + q * (q + 1) // 2
            else:
                pq += q
                pkv += c + q
                ppairs += q * c + q * (q + 1) // 2
        tokens = pq + dq
        hm = self._host
        if tokens == 0 and not pad:
            return self.params.step_overhead if hm is None or device_only else hm[0]
        sampled = num_decodes + shape.num_sampled
        device = self._fixed(tokens if tokens > pad else pad, sampled, pq > 0)
        if self._La:  # (none in a DSA model: every layer's attention is capped at its top-k)
            device += self._La * self._attention(pq, pkv, ppairs, dq, dkv, dpairs)
        if self._index is not None:
            device += self._L * self._index_time(pq, pkv, ppairs, dq, dkv, dpairs)
        if self._Ls:
            device += self._Ls * self._attention(*self._window_sums(num_decodes, decode_context_sum, shape))
        if self._Ll:
            rows = sum(shape.is_decode)
            device += self._Ll * self._linear_time(pq, len(shape.is_decode) - rows, dq, num_decodes + rows)
        if hm is None or device_only:
            return device
        fixed, per_seq, launch, overlap = hm
        host = fixed + per_seq * (num_decodes + len(shape.num_new_tokens))
        if launch:
            issue = launch * self.num_kernels((pq > 0) + (dq > 0), sampled > 0)
            if issue > device:
                device = issue
        if overlap:
            return host if host > device else device
        return host + device

    def _attention(self, pq: int, pkv: int, ppairs: int, dq: int, dkv: int, dpairs: int) -> float:
        """One layer's attention seconds: the prefill rows' (pq queries, pkv positions read, ppairs query-key
        pairs) and the decode rows' kernels."""
        attn = 0.0
        if pq:
            cp, per_q, floor, mem = self._ap
            fp, fkv, bkv, bq = self._attn_prefill
            fc = fp * ppairs * cp + fkv * pkv * cp + per_q * pq
            fm = (bkv * pkv + bq * pq) * mem
            attn += (fc if fc > fm else fm) + floor
        if dq:
            cp, mem, floor = self._ad
            fc, fm = self._attn_flops * dpairs * cp, (self._attn_bytes_kv * dkv + self._attn_bytes_q * dq) * mem
            attn += (fc if fc > fm else fm) + floor
        return attn

    def num_kernels(self, attention_kernels: int, sampled: bool) -> int:
        """Kernels one forward pass launches: per layer its GEMMs, elementwise kernels, all-reduces and one
        attention kernel per kind present (prefill, decode); per step the rest, and the LM head and sampler when
        a request samples. Llama-2-7B, one decode: 32 x (4 + 4 + 1) + 2 + 2 = 292."""
        return self._kernels_layers + self._L * attention_kernels + self._kernels_step + (2 if sampled else 0)

    def split(self, shape: StepShape) -> tuple[float, float, float]:
        """(device seconds, host seconds, eager issue seconds) of a step: what `step_time` combines. Without an
        engine profile the host part is the flat step overhead, inside the device time."""
        device = self.step_time_with_decodes(0, 0, shape, device_only=True)
        e = self.engine
        if e is None:
            return device, 0.0, 0.0
        kinds = len(set(shape.is_decode))  # 0 for an empty step: no forward pass, nothing launched
        issue = 0.0 if not kinds else e.launch * self.num_kernels(kinds, shape.num_sampled > 0) if e.enforce_eager \
            else 0.0
        return device, e.host_time(len(shape.num_new_tokens), self.tp), issue

    def idle_step_time(self, shape: StepShape) -> float:
        """A step that starts on an idle engine (a first token with nothing else running): async scheduling hides a
        step's host work behind the previous step's GPU work, and there is none, so host and device add up."""
        device, host, issue = self.split(shape)
        return host + (issue if issue > device else device)

    def _fixed(self, tokens: int, sampled: int, prefill: bool = False) -> float:
        """Everything but attention: GEMMs, elementwise work, collectives and the step overhead depend on the token
        count alone (DeepEP's auto mode also on whether the step has a prefill), the LM head and sampler on the
        sampled count, so each is computed once per count (the engine's hot path)."""
        t = self._by_tokens.get(tokens)
        if t is None:
            kl = self._kl
            layer = 0.0
            bf16 = self._bf16
            for name, k, n in self._gemms:
                fc, fm = self._gemm(tokens, k, n, quantized=name not in bf16)
                layer += (fc if fc > fm else fm) + kl
            t = self._L * layer + self._elem_s * tokens + self._elem_floor
            for name, k, n, count in self._kind_gemms:
                fc, fm = self._gemm(tokens, k, n, quantized=name not in bf16)
                t += count * ((fc if fc > fm else fm) + kl)
            if self._moe is not None:
                t += self._moe_time(tokens)
            for _, seconds, count, _ in self._comm_ops(tokens):
                t += count * seconds
            t = self._by_tokens[tokens] = t + self.params.step_overhead
        if self._a2a:
            t += self._a2a_time(tokens, prefill)
        if not sampled:
            return t
        lm = self._by_sampled.get(sampled)
        if lm is None:
            fc, fm = self._gemm(sampled, *self._lm, quantized=False)
            lm = (fc if fc > fm else fm) + self._kl + self._sampler_bytes * sampled * self._m + self._kl
            self._by_sampled[sampled] = lm
        return t + lm

    def decode_stretch(self, n: int, context_sum: int, k: int) -> list[float]:
        """Durations of k steps of n one-token decodes whose contexts (summing to `context_sum` at the first
        step) each grow by one token per step: what the engine's fast path asks for. The same arithmetic as
        `step_time`, step by step, so the same floats."""
        consts = self._decode.get(n)
        if consts is None:
            cp, mem, floor = self._ad
            consts = self._decode[n] = (self._fixed(n, n), self._La, floor, self._attn_flops, cp,
                                        self._attn_bytes_kv, mem, self._attn_bytes_q * n)
        fixed, L, kl, af, c, bkv, mem, q = consts
        if self._Ls or self._Ll:  # (sliding-window, linear layers: step by step, `step_time_with_decodes`')
            empty = StepShape((), (), (), 0)
            out = [self.step_time_with_decodes(n, context_sum + i * n, empty, device_only=True) for i in range(k)]
            return out if self.engine is None else [self.engine.wall(d, *self._decode_host(n)) for d in out]
        e = self.engine
        if k >= NUMPY_STRETCH:  # the same operations, in the same order, on arrays (IEEE: the same floats)
            kv = np.arange(context_sum + n, context_sum + n + n * k, n, dtype=np.float64)[:k]
            device = fixed + L * (np.maximum(af * kv * c, (bkv * kv + q) * mem) + kl)
            if e is None:
                return device.tolist()
            host, issue = self._decode_host(n)
            if e.enforce_eager:
                device = np.maximum(device, issue)
            return (np.maximum(device, host) if e.async_scheduling else host + device).tolist()
        out = []
        kv = context_sum + n  # positions read (= query-key pairs) in the first step
        for _ in range(k):
            fc, fm = af * kv * c, (bkv * kv + q) * mem
            out.append(fixed + L * ((fc if fc > fm else fm) + kl))
            kv += n
        if e is not None:
            host, issue = self._decode_host(n)
            out = [e.wall(d, host, issue) for d in out]
        return out

    def _decode_host(self, n: int) -> tuple[float, float]:
        """(host seconds, eager issue seconds) of a step of n decodes alone."""
        e = self.engine
        return e.host_time(n, self.tp), (e.launch * self.num_kernels(1, True) if e.enforce_eager else 0.0)

    def _moe_time(self, tokens: int) -> float:
        """A MoE model's MLPs over all layers: each MoE layer's router, shared experts and routed experts (the
        rows routed to this rank, the experts it touches), and the dense layers' MLP."""
        return sum(count * (max(fc, fm) + self._kl) for _, fc, fm, count in self._moe_ops(tokens))

    def _moe_ops(self, tokens: int, work: bool = False) -> list[tuple]:
        """(name, compute s, memory s, layers) of each GEMM in a MoE model's MLPs at `tokens` tokens; `work`:
        with its (FLOPs, bytes) too."""
        moe, h = self._moe, self.model.hidden_size
        lm, ld = moe.num_moe_layers, moe.num_dense_layers
        touched, routed = self._experts_touched(tokens), math.ceil(tokens * moe.rows_per_token)
        gemms = [("router", (tokens, h, moe.router_width, 1.0, False), lm)]
        gemms += [(name, (tokens, k, n, 1.0, name not in self._bf16), lm) for name, k, n in moe.shared]
        gemms += [(f"experts.{name}", (routed, k, n, touched, True, True), lm) for name, k, n in moe.experts]
        gemms += [(name, (tokens, k, n, 1.0, name not in self._bf16), ld) for name, k, n in moe.dense]
        return [(name, *self._gemm(*args), count, *(self._gemm_work(*args) if work else ()))
                for name, args, count in gemms]

    def _comm_ops(self, tokens: int) -> list[tuple[str, float, int, float]]:
        """(name, seconds, count, bytes each) of a step's collectives at `tokens` tokens a rank (DeepEP's apart):
        the all-reduces over the attention TP group; a MoE layer's all-gather of the data-parallel ranks' tokens
        (T x dp x hidden, every rank at the same padded T) and its reduce-scatter after the experts, over the
        ranks spread across the layout's GPUs; under DeepEP, an all-gather over the TP group after the combine
        (each TP GPU dispatched 1 / tp of the tokens)."""
        f, lay, size = self.fabric, self.layout, self._ar_bytes * tokens
        out = []
        if self._ar_count:
            out.append(("all_reduce", f.all_reduce(size, lay.tp, self._car), self._ar_count, size))
        if self._moe is None:
            return out
        lm = self._moe.num_moe_layers
        if lay.moe_comm == "gather":
            gathered = size * lay.dp
            t = f.all_gather(gathered, lay.dp, lay.gpus)
            out += [("moe all_gather", t, lm, gathered), ("moe reduce_scatter", t, lm, gathered)]
        elif self._a2a and lay.tp > 1:
            out.append(("moe all_gather (tp)", f.all_gather(size, lay.tp), lm, size))
        return out

    def _a2a_kernel(self, prefill: bool) -> str:
        mode = self.layout.moe_comm
        if mode == "deepep_auto":  # SGLang's auto: normal kernels for a step with a prefill, low latency else
            return "deepep_normal" if prefill else "deepep_low_latency"
        return mode

    def _a2a_bytes(self, tokens: int) -> tuple[float, float]:
        """(dispatch, combine) bytes the busiest GPU moves per MoE layer: its 1 / tp share of the rank's tokens, k
        copies each, times the load imbalance (the rank whose experts are hottest receives that much more)."""
        lay, k = self.layout, self.model.num_experts_per_tok
        copies = tokens / lay.tp * k * lay.imbalance
        return copies * self._dispatch_bytes, copies * self._ar_bytes

    def _a2a_time(self, tokens: int, prefill: bool) -> float:
        """DeepEP's dispatch and combine over the layout's GPUs, every MoE layer (memoised per count and kernel)."""
        kernel = self._a2a_kernel(prefill)
        t = self._by_a2a.get((tokens, kernel))
        if t is None:
            n, k = self.layout.gpus, A2A_KERNELS[kernel]
            dispatch, combine = self._a2a_bytes(tokens)
            t = self._moe.num_moe_layers * (self.fabric.all_to_all(dispatch, n, k) + self.fabric.all_to_all(
                combine, n, k))
            self._by_a2a[(tokens, kernel)] = t
        return t

    def dp_step_time(self, shapes: list[StepShape]) -> float:
        """A step of the data-parallel ranks together, one shape each (an idle rank's empty: it runs a dummy
        batch): every rank's GEMMs, elementwise kernels and collectives at the largest rank's token count (at
        least one), its own attention, LM head and host. The MoE layers synchronise the ranks, so the step lasts
        as long as the slowest rank's."""
        pad = max(1, max(sum(s.num_new_tokens) for s in shapes))
        return max(self.step_time_with_decodes(0, 0, s, pad=pad) for s in shapes)

    def breakdown(self, shape: StepShape) -> list[OpCost]:
        """Per-operator times over all layers, each marked compute- or memory-bound; sums to `step_time` without an
        engine profile, to the device time of `split` with one."""
        tokens, L, kl = shape.num_tokens, self._L, self._kl
        out: list[OpCost] = []

        def add(name: str, fc: float, fm: float, count: int, flops: float, nbytes: float) -> None:
            out.append(OpCost(name, count * (max(fc, fm) + kl), "compute" if fc > fm else "memory",
                              count * flops, count * nbytes))

        if tokens:
            for name, k, n in self._gemms:
                q = name not in self._bf16
                add(name, *self._gemm(tokens, k, n, quantized=q), L, *self._gemm_work(tokens, k, n, quantized=q))
            for name, k, n, count in self._kind_gemms:
                q = name not in self._bf16
                add(name, *self._gemm(tokens, k, n, quantized=q), count, *self._gemm_work(tokens, k, n, quantized=q))
            if self._moe is not None:
                for name, fc, fm, count, flops, nbytes in self._moe_ops(tokens, work=True):
                    if count:
                        add(name, fc, fm, count, flops, nbytes)
            out += self._attention_ops(shape)
            if self._index is not None:
                out += self._index_ops(shape)
            if self._Ll:
                out += self._linear_ops(shape)
            nbytes = self._elem_bytes * tokens
            out.append(OpCost("norms, rotary, activation", self._elem_s * tokens + self._elem_floor, "memory",
                              0.0, nbytes))
        if tokens and shape.num_sampled:
            fc, fm = self._gemm(shape.num_sampled, *self._lm, quantized=False)
            sampler = self._sampler_bytes * shape.num_sampled
            out.append(OpCost("lm_head + sampler", max(fc, fm) + kl + sampler * self._m + kl,
                              "compute" if fc > fm else "memory", fc / self._c, fm / self._m + sampler))
        if tokens:
            for name, t, count, size in self._comm_ops(tokens):
                out.append(OpCost(f"{name} x{count} ({size / 2**20:.2f} MiB each)", count * t, "communication",
                                  0.0, count * size))
        if tokens and self._a2a:
            kernel = A2A_KERNELS[self._a2a_kernel(not all(shape.is_decode))]
            lm, n = self._moe.num_moe_layers, self.layout.gpus
            for name, size in zip(("dispatch", "combine"), self._a2a_bytes(tokens)):
                out.append(OpCost(f"moe {name} ({kernel.name}) x{lm} ({size / 2**20:.2f} MiB each)",
                                  lm * self.fabric.all_to_all(size, n, kernel), "communication", 0.0, lm * size))
        if self.engine is None:
            out.append(OpCost("step overhead", self.params.step_overhead, "overhead"))
        return out

    # -- KV capacity ------------------------------------------------------------------------------------------

    @property
    def weight_bytes(self) -> int:
        """Weights held by each GPU at this `tp` (norms and biases left out)."""
        return self._weights

    def activation_peak_bytes(self, max_num_batched_tokens: int, max_num_seqs: int = 256) -> int:
        """vLLM's profiling forward pass at the full token budget: live MLP activations, plus float32 logits."""
        return max_num_batched_tokens * self._act_bytes + max_num_seqs * self.model.vocab_size * 4

    @property
    def kv_groups(self) -> KVGroups:
        """vLLM's KV cache groups of this model's attention layers (`servesim.cost.kv_groups`)."""
        m = self.model
        return KVGroups.of(m.num_full_attention_layers, m.num_sliding_layers or m.num_linear_layers)

    def kv_blocks_per_request(self, block_size: int) -> int:
        """Blocks of `block_size` tokens a request holds whatever its length, in vLLM's hybrid KV cache manager: a
        sliding-window model's window, a linear-attention model's state (0 for a model with neither)."""
        if self.model.num_sliding_layers:
            return self.kv_groups.per_request(self.model.sliding_window, block_size)
        return self.kv_groups.state_per_request() if self._Ll else 0

    def kv_block_size(self, block_size: int) -> int:
        """The block size vLLM runs at: the one given, or, for a linear-attention model, at least a layer's state
        over a layer's KV bytes a token (`servesim.cost.kv_groups.state_block_size`)."""
        if not self._Ll:
            return block_size
        return state_block_size(block_size, self.state_bytes_per_request // self._Ll,
                                self.kv_bytes_per_token // self.model.num_full_attention_layers)

    def max_total_num_tokens(self, mem_fraction_static: float) -> int:
        """KV tokens per GPU as SGLang sizes its token pool (`ModelRunner.profile_max_num_token`): the memory left
        after the weights, less the (1 - mem_fraction_static) share SGLang keeps back for activations and CUDA
        graphs, over the KV bytes of a token: (GPU memory x mem_fraction_static - weights) / KV bytes per token.
        A sliding-window model's pool is the full-attention layers' (`set_num_token_hybrid`): the tokens every
        layer could hold, times the layers, over full layers + swa_full_tokens_ratio x sliding layers (its SWA pool
        holds that ratio of the full pool's tokens, and frees those out of the window)."""
        if not 0 < mem_fraction_static <= 1:
            raise ConfigError(f"sglang.mem_fraction_static must be in (0, 1], got {mem_fraction_static}")
        free = self.gpu.memory_bytes * mem_fraction_static - self._weights
        if self._Ll:  # the linear-attention state's slots first (`state_slots`), the full layers' tokens after
            free -= self.state_slots(mem_fraction_static) * self.state_bytes_per_request
        full, sliding = self.model.num_full_attention_layers, self.model.num_sliding_layers
        if sliding:
            layer = self.kv_bytes_per_token // full
            every = int(free // (layer * self._L))
            tokens = int(every * self._L / (SWA_FULL_TOKENS_RATIO * sliding + full))
        else:
            tokens = int(free // self.kv_bytes_per_token)
        if tokens < 2:
            raise ConfigError(
                f"{self.model.name} does not fit on {self.gpu.name} at tp={self.tp}: weights "
                f"{self._weights / 2**30:.1f} GiB per GPU, {self.gpu.memory_bytes * mem_fraction_static / 2**30:.1f}"
                " GiB static; raise tp or sglang.mem_fraction_static")
        return tokens

    def state_slots(self, mem_fraction_static: float) -> int:
        """A linear-attention model's state slots as SGLang sizes them (`_handle_max_mamba_cache`, no speculative
        decoding): mamba_full_memory_ratio / (1 + mamba_full_memory_ratio) of the memory left after the weights,
        over one request's state (every linear layer's); 0 for a model without linear layers."""
        if not self._Ll:
            return 0
        free = self.gpu.memory_bytes * mem_fraction_static - self._weights
        budget = free * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)
        return max(0, int(budget // self.state_bytes_per_request))

    def num_gpu_blocks(self, block_size: int, gpu_memory_utilization: float = 0.9,
                       max_num_batched_tokens: int = 2048, max_num_seqs: int = 256) -> int:
        """KV blocks per GPU, as vLLM derives them:
        (GPU memory x gpu_memory_utilization - weights - activation peak) / (block_size x KV bytes per token)."""
        if block_size <= 0 or not 0 < gpu_memory_utilization <= 1:
            raise ConfigError("block_size must be > 0 and gpu_memory_utilization in (0, 1]")
        free = (self.gpu.memory_bytes * gpu_memory_utilization - self._weights
                - self.activation_peak_bytes(max_num_batched_tokens, max_num_seqs))
        if self.model.num_sliding_layers or self._Ll:  # vLLM's hybrid KV cache manager: a pool for every kind
            if block_size < self.kv_block_size(block_size):
                raise ConfigError(f"block_size {block_size}: below the {self.kv_block_size(block_size)} tokens vLLM "
                                  f"sets for {self.model.name}'s linear-attention state; give it or more")
            blocks = self.kv_groups.pool_blocks(free, block_size,
                                                self.kv_bytes_per_token // self.model.num_full_attention_layers)
        else:
            blocks = int(free // (block_size * self.kv_bytes_per_token))
        if blocks < 2:
            raise ConfigError(
                f"{self.model.name} does not fit on {self.gpu.name} at tp={self.tp}: weights "
                f"{self._weights / 2**30:.1f} GiB per GPU, {self.gpu.memory_bytes * gpu_memory_utilization / 2**30:.1f}"
                " GiB usable; raise tp or gpu_memory_utilization")
        return blocks
