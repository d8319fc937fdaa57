"""The measured-kernel tier (`--cost aic`): each operator's latency from AIConfigurator's measured database.

AIConfigurator (`aiconfigurator-core`, Apache-2.0; the `servesim[aic]` extra, Python >= 3.11) ships per-operator
latencies collected on real GPUs per engine release: GEMMs by (m, n, k, quantization), context and generation
attention, custom all-reduce, elementwise kernels. This tier prices a step's operators through its per-operator
API (`EngineHandle.for_database(...).evaluate_ops_json`, aiconfigurator-core 0.12.0), not its whole-deployment
estimator: servesim's scheduler decides the step, this tier times it, servesim's engine profile adds the host
(`servesim.cost.host`), as the roofline does. Per step (T tokens, S of them sampled):

- per layer, as AIConfigurator describes a dense Llama-style model (`sdk/models/llama.py`): two add+norm
  kernels, the QKV, output, gate/up and down GEMMs, the activation, and with TP > 1 two custom all-reduces of
  the hidden states; per step the embedding and its all-reduce; all at T tokens: the tables at the powers of two
  around T, linear in between (the library's own interpolation is not monotone in T for FP8 GEMMs);
- the LM head GEMM at S tokens, the same way (16-bit, as vLLM keeps it) and, priced by the roofline, the sampler;
- context attention per prefill chunk (t new tokens over c cached: `s` = c + t, `prefix` = c), memoised per
  (t, c); generation attention for the step's decodes at their mean KV length, memoised per (n, length);
- a MoE model's MLPs per MoE layer as AIConfigurator describes them (`sdk/models/blocks/moe.py`): the router
  GEMM (16-bit), the shared experts' GEMMs, its MoE operator at the layout's MoE TP and EP under its own routing
  default (power law, alpha 1.2), and the dense layers' MLP, at T tokens as the dense list;
- an operator list the tables have no row for (vLLM's FP8-KV context attention on an H100, in 0.24.0's) by the
  roofline, the library's reason kept in `fallbacks` and said by `servesim cost`.

`provenance` counts, per operator, the distinct shapes priced by each source the database names (`silicon`:
measured; `mixed`, `empirical`: interpolated or transferred from measured rows; `sol`: its speed-of-light
fallback; `roofline`: servesim's own), and `database` says which table set (system, engine, version).
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict

from servesim.cost.base import StepShape
from servesim.cost.host import EngineProfile
from servesim.cost.layout import Layout
from servesim.cost.roofline import OpCost, Roofline
from servesim.errors import ConfigError

# servesim's GPU files -> AIConfigurator's systems (the ones servesim has a GPU file for)
SYSTEMS = {"h100-80gb": "h100_sxm", "h200": "h200_sxm", "a100-80gb": "a100_sxm", "b200": "b200_sxm",
           "b300": "b300_sxm", "gb200": "gb200", "gb300": "gb300"}
BACKENDS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}  # an engine preset's family -> its tables
_EMPTY = StepShape((), (), (), 0)
# Per process: one engine handle per table set, and every value asked of it (an operator list's JSON and a shape
# -> seconds and each operator's source), shared by the cost models of many deployments (validate's rows).
_HANDLES: dict[tuple[str, str, str], object] = {}
_VALUES: dict[tuple, tuple[float, tuple[tuple[str, str], ...]]] = {}


def _library():
    try:
        import logging

        from aiconfigurator_core.sdk import common, perf_database
        from aiconfigurator_core.sdk import operations as ops
        from aiconfigurator_core.sdk.engine import EngineHandle, build_ops_json
    except ImportError:
        raise ConfigError("--cost aic needs aiconfigurator-core (AIConfigurator's measured kernels, Python >= "
                          "3.11): pip install 'servesim[aic]'") from None
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)  # (its notes on each table's fallbacks)
    return common, perf_database, ops, EngineHandle, build_ops_json


@functools.cache
def database_for(gpu: str, engine: str, version: str | None = None) -> tuple[str, str, str]:
    """(system, backend, version) of the tables for a servesim GPU and engine family; the newest version where
    `version` is None or has no queryable tables (aiconfigurator-core 0.12 serves its "current" and "next" slots,
    e.g. vLLM 0.24.0 on an H100), as AIConfigurator's own scoring of its file falls back
    (`predict_silicon_sample.py`)."""
    _, pdb, _, handle_cls, _ = _library()
    if gpu not in SYSTEMS:
        raise ConfigError(f"--cost aic: no AIConfigurator tables mapped for GPU {gpu}; expected one of "
                          f"{', '.join(SYSTEMS)}")
    if engine not in BACKENDS:
        raise ConfigError(f"--cost aic: no AIConfigurator tables for engine {engine}; expected vllm, sglang or trtllm")
    system, backend = SYSTEMS[gpu], BACKENDS[engine]
    if version is not None and _load(system, backend, version, pdb, handle_cls) is not None:
        return system, backend, version
    latest = pdb.get_latest_database_version(system=system, backend=backend)
    if latest is None or _load(system, backend, latest, pdb, handle_cls) is None:
        raise ConfigError(f"--cost aic: AIConfigurator has no {backend} tables for {system}")
    return system, backend, latest


def _load(system: str, backend: str, version: str, pdb, handle_cls) -> object | None:
    """The engine handle on one table set (once per process), or None where the library has none."""
    key = (system, backend, version)
    if key not in _HANDLES:
        try:
            db = pdb.get_database_view(system, backend, version, allow_missing_data=False, database_mode="SILICON",
                                       transfer_policy=None)
        except (ValueError, FileNotFoundError, KeyError):
            db = None
        _HANDLES[key] = None if db is None else handle_cls.for_database(db)
    return _HANDLES[key]


class AicKernels(Roofline):
    """A step's operators timed by AIConfigurator's measured tables; the rest of the roofline (memory, KV
    capacity, the engine's host model) unchanged."""

    __slots__ = ("database", "provenance", "fallbacks", "_handle", "_json", "_memo", "_build_ops_json")

    def __init__(self, model: str = "llama-3-8b", gpu: str = "h100-80gb", tp: int = 1,
                 engine: EngineProfile | None = None, quantization: str | None = None, kv_cache_dtype: str = "auto",
                 backend_version: str | None = None, enable_expert_parallel: bool = False,
                 layout: Layout | None = None) -> None:
        super().__init__(model, gpu, None if layout is not None else tp, engine=engine, quantization=quantization,
                         kv_cache_dtype=kv_cache_dtype, enable_expert_parallel=enable_expert_parallel, layout=layout)
        lay = self.layout
        if lay.dp > 1 or lay.moe_ep not in (1, lay.tp):
            raise ConfigError(f"--cost aic: a layout of DP {lay.dp}, MoE TP {lay.moe_tp}, EP {lay.moe_ep} is not "
                              "mapped to AIConfigurator's tables yet (one rank, experts by width or whole over TP); "
                              "expected --cost roofline")
        if self.quantization == "compressed-tensors" and not self.model.int4_experts_only:
            raise ConfigError(f"--cost aic: {self.model.name}'s 4-bit linear layers are not mapped to "
                              "AIConfigurator's tables yet (its routed experts' are); expected --cost roofline")
        if self.model.is_mla:
            raise ConfigError(f"--cost aic: {self.model.name}'s multi-head latent attention is not mapped to "
                              "AIConfigurator's tables yet; expected --cost roofline")
        if self.model.num_sliding_layers or self.model.num_linear_layers or self.quantization == "mxfp4":
            raise ConfigError(f"--cost aic: {self.model.name}'s sliding-window or linear-attention layers and MXFP4 "
                              "experts are not mapped to AIConfigurator's tables yet; expected --cost roofline")
        common, pdb, ops, handle_cls, self._build_ops_json = _library()
        family = (engine.name if engine is not None else "vllm").split("-")[0]
        self.database = database_for(self.gpu.name, family, backend_version)
        self._handle = _HANDLES[self.database]
        self.name = f"aic ({' '.join(self.database)})"  # (results record it as their cost_model: the tables used)
        self.provenance: dict[str, Counter] = defaultdict(Counter)
        self.fallbacks: dict[str, str] = {}  # operator list -> why the tables could not price it (the roofline did)
        self._memo: dict[tuple, float] = {}
        self._json = self._ops(common, ops)

    def _ops(self, common, ops) -> dict[str, str]:
        """The operator lists, in AIConfigurator's terms (`sdk/models/llama.py`), one JSON each."""
        m, tp = self.model, self.tp
        h, hd, L = m.hidden_size, m.head_dim, m.num_hidden_layers
        heads, kv = m.num_attention_heads // tp, max(1, m.num_key_value_heads // tp)
        inter, vocab = m.intermediate_size // tp, -(-m.vocab_size // tp)
        gq = common.GEMMQuantMode.nvfp4 if self.quantization == "modelopt_fp4" else \
            common.GEMMQuantMode.bfloat16 if self.quantization != "fp8" else \
            common.GEMMQuantMode.fp8_block if self._block else common.GEMMQuantMode.fp8
        fp8_kv = self.kv_cache_dtype.startswith("fp8")
        kvq = common.KVCacheQuantMode.fp8 if fp8_kv else common.KVCacheQuantMode.bfloat16
        fmha = common.FMHAQuantMode.fp8 if fp8_kv else common.FMHAQuantMode.bfloat16
        up = inter * (2 if m.gated_mlp else 1)
        dense = [ops.Embedding("embedding", 1, vocab, h, 0.3),
                 ops.ElementWise("add_norm_1", L, 2 * h, 2 * h, 0.8),
                 ops.GEMM("qkv_proj", L, (heads + 2 * kv) * hd, h, gq),
                 ops.GEMM("o_proj", L, h, heads * hd, gq, low_precision_input=True),
                 ops.ElementWise("add_norm_2", L, 2 * h, 2 * h, 0.8)]
        if not m.num_local_experts:
            dense += [ops.GEMM("gate_up_proj", L, up, h, gq),
                      ops.ElementWise("act_and_mul", L, up, inter, 0.8),
                      ops.GEMM("down_proj", L, h, inter, gq, low_precision_input=True)]
        if tp > 1:
            dense += [ops.CustomAllReduce("all_reduce", 2 * L + 1, h, tp)]
        more = {"moe": self._build_ops_json(self._moe_ops_aic(common, ops, gq))} if m.num_local_experts else {}
        return more | {"dense": self._build_ops_json(dense),
                "lm_head": self._build_ops_json([ops.GEMM("lm_head", 1, vocab, h, common.GEMMQuantMode.bfloat16)]),
                "context": self._build_ops_json([ops.ContextAttention("attention (prefill)", L, heads, kv, kvq, fmha,
                                                                      head_size=hd)]),
                "generation": self._build_ops_json([ops.GenerationAttention("attention (decode)", L, heads, kv, kvq,
                                                                            head_size=hd)])}

    def _moe_ops_aic(self, common, ops, gq) -> list:
        """A MoE model's MLPs in AIConfigurator's terms (`sdk/models/blocks/moe.py`): per MoE layer the router
        GEMM (16 bits), the shared experts' GEMMs, the experts as its MoE operator at the layout's MoE TP and EP
        and AIConfigurator's own routing default (power law, alpha 1.2: `sdk/models/moe.py`, the distribution
        its MoE tables are measured under); the dense layers' MLP."""
        m, tp = self.model, self.tp
        h, lm, ld = m.hidden_size, m.num_moe_layers, m.num_dense_layers
        ep = tp if self.enable_expert_parallel else 1
        if self.quantization == "compressed-tensors":  # (W4A16 experts: its int4_wo tables)
            mq = common.MoEQuantMode.int4_wo
        else:
            mq = common.MoEQuantMode.nvfp4 if self.quantization == "modelopt_fp4" else \
                common.MoEQuantMode.bfloat16 if self.quantization != "fp8" else \
                common.MoEQuantMode.fp8_block if self._block else common.MoEQuantMode.fp8
        out = [ops.GEMM("router", lm, m.num_local_experts, h, common.GEMMQuantMode.bfloat16)]
        sw = m.shared_expert_intermediate_size // tp
        if sw:
            out += [ops.GEMM("shared_expert.gate_up_proj", lm, 2 * sw, h, gq),
                    ops.ElementWise("shared_expert.act_and_mul", lm, 2 * sw, sw, 0.8),
                    ops.GEMM("shared_expert.down_proj", lm, h, sw, gq, low_precision_input=True)]
        out += [ops.MoE("experts", lm, h, m.expert_intermediate_size, m.num_experts_per_tok, m.num_local_experts,
                        tp // ep, ep, mq, "power_law_1.2", 1)]
        if ld:
            inter = m.intermediate_size // tp
            out += [ops.GEMM("gate_up_proj", ld, 2 * inter, h, gq),
                    ops.ElementWise("act_and_mul", ld, 2 * inter, inter, 0.8),
                    ops.GEMM("down_proj", ld, h, inter, gq, low_precision_input=True)]
        return out

    def _check_finite(self) -> None:
        """(The roofline probes a step of 2^30 tokens at build; the tables are checked per value instead.)"""

    def _value(self, key: tuple, which: str, is_context: bool, batch: int, s: int, prefix: int = 0) -> float:
        """Seconds of one operator list at one shape, from the tables (memoised; each new shape's sources
        counted in `provenance`); where the tables have no row for it, the roofline's, said in `fallbacks`."""
        t = self._memo.get(key)
        if t is None:
            shared = (self.database, self._json[which], is_context, batch, s, prefix)
            hit = _VALUES.get(shared)
            if hit is None:
                rows = self._rows(key, which, is_context, batch, s, prefix)
                hit = _VALUES[shared] = (sum(r[1] for r in rows) * 1e-3, tuple((r[0], r[2]) for r in rows))
            t = self._memo[key] = hit[0]
            for name, source in hit[1]:
                self.provenance[name][source] += 1
        return t

    def _rows(self, key: tuple, which: str, is_context: bool, batch: int, s: int, prefix: int) -> list[tuple]:
        """[(operator, ms, source)] of one operator list at one shape: the tables', or the roofline's where they
        have no row for it (the reason kept in `fallbacks`)."""
        try:
            rows = [(name, ms, source) for name, ms, _energy, source in self._handle.evaluate_ops_json(
                self._json[which], is_context=is_context, batch_size=batch, s=s, prefix=prefix)]
        except Exception as exc:  # noqa: BLE001 - the library's "no data" errors (PerfDataNotAvailableError)
            self.fallbacks.setdefault(which, str(exc).splitlines()[0][:240])
            rows = [(f"{which} (roofline)", self._roofline(key) * 1e3, "roofline")]
        for name, ms, _source in rows:
            if not (ms >= 0 and ms < float("inf")):
                raise ConfigError(f"--cost aic: {name} at {which} shape {key[1:]}: the tables gave {ms} ms")
        return rows

    def _roofline(self, key: tuple) -> float:
        """The roofline's seconds for one operator list the tables lack (`key` as `_value`'s)."""
        which, L = key[0], self._L
        if which == "dense":
            return Roofline._fixed(self, key[1], 0) - (self._moe_time(key[1]) if self._moe is not None else 0.0)
        if which == "lm_head":
            fc, fm = self._gemm(key[1], *self._lm, quantized=False)
            return max(fc, fm) + self._kl
        if which == "moe":
            return self._moe_time(key[1])
        if which == "context":
            q, c = key[1], key[2]
            cp, per_q, floor, mem = self._ap
            fp, fkv, bkv, bq = self._attn_prefill
            fc = fp * (q * c + q * (q + 1) // 2) * cp + fkv * (c + q) * cp + per_q * q
            fm = (bkv * (c + q) + bq * q) * mem
            return L * (max(fc, fm) + floor)
        n, kv = key[1], key[2]
        cp, mem, floor = self._ad
        fc, fm = self._attn_flops * n * kv * cp, (self._attn_bytes_kv * n * kv + self._attn_bytes_q * n) * mem
        return L * (max(fc, fm) + floor)

    @staticmethod
    def _bracket(m: int) -> tuple[int, int, float]:
        """(lo, hi, f): the powers of two around m and how far m is from lo to hi (`_by_count`'s interpolation)."""
        lo = 1 << (m.bit_length() - 1)
        return lo, lo << 1, (m - lo) / lo

    def _by_count(self, which: str, m: int) -> float:
        """An operator list whose cost depends on the token count alone (the GEMMs, elementwise kernels and
        all-reduces; the LM head), at m tokens: the tables at the powers of two around m, linear in between. (The
        library's own interpolation between its measured sizes is not monotone for FP8 GEMMs: in
        aiconfigurator-core 0.12.0 a Llama-3.1-70B FP8 step on an H200 costs more at 513 tokens than at 1,024.)"""
        lo, hi, f = self._bracket(m)
        t_lo = self._value((which, lo), which, True, 1, lo)
        return t_lo if f == 0 else t_lo + (self._value((which, hi), which, True, 1, hi) - t_lo) * f

    def _count_rows(self, which: str, m: int) -> list[OpCost]:
        """`_by_count`'s interpolation, operator by operator (the breakdown)."""
        lo, hi, f = self._bracket(m)
        rows = self._rows((which, lo), which, True, 1, lo, 0)
        upper = rows if f == 0 else self._rows((which, hi), which, True, 1, hi, 0)
        return [OpCost(name, (a + (b - a) * f) * 1e-3, source) for (name, a, source), (_, b, _) in zip(rows, upper)]

    def _fixed(self, tokens: int, sampled: int) -> float:
        t = self._by_count("dense", tokens)
        if self._moe is not None:
            t += self._by_count("moe", tokens)
        if sampled:
            t += self._by_count("lm_head", sampled)
            t += self._sampler_bytes * sampled * self._m + self._kl  # the sampler, by the roofline
        return t

    def _attention(self, chunks: list[tuple[int, int]], decodes: int, kv_sum: int) -> float:
        t = 0.0
        for q, c in chunks:
            t += self._value(("context", q, c), "context", True, 1, c + q, c)
        if decodes:
            kv = max(1, round(kv_sum / decodes))
            t += self._value(("generation", decodes, kv), "generation", False, decodes, kv)
        return t

    def step_time_with_decodes(self, num_decodes: int, decode_context_sum: int, shape: StepShape,
                               device_only: bool = False) -> float:
        """As `Roofline.step_time_with_decodes`, each operator from the tables (the decodes' KV lengths enter
        through their mean)."""
        chunks, dq, kv_sum = [], num_decodes, decode_context_sum + num_decodes
        for q, c, dec in zip(shape.num_new_tokens, shape.num_context_tokens, shape.is_decode):
            if dec:
                dq += q
                kv_sum += c + q
            else:
                chunks.append((q, c))
        tokens = dq + sum(q for q, _ in chunks)
        e = self.engine
        if tokens == 0:
            return 0.0 if e is None or device_only else e.fixed_host(self.tp)
        sampled = num_decodes + shape.num_sampled
        device = self._fixed(tokens, sampled) + self._attention(chunks, dq, kv_sum)
        if e is None or device_only:
            return device
        issue = e.launch * self.num_kernels(bool(chunks) + bool(dq), sampled > 0) if e.enforce_eager else 0.0
        return e.wall(device, e.host_time(num_decodes + len(shape.num_new_tokens), self.tp), issue)

    def decode_stretch(self, n: int, context_sum: int, k: int) -> list[float]:
        """k decode-only steps, each exactly as `step_time_with_decodes` prices it (the fast path = step by
        step)."""
        return [self.step_time_with_decodes(n, context_sum + i * n, _EMPTY) for i in range(k)]

    def breakdown(self, shape: StepShape) -> list[OpCost]:
        """Per operator, from the tables (its bound column: the source of the value)."""
        chunks = [(q, c) for q, c, d in zip(shape.num_new_tokens, shape.num_context_tokens, shape.is_decode)
                  if not d]
        dq = shape.num_decodes
        kv_sum = sum(c + q for q, c, d in zip(shape.num_new_tokens, shape.num_context_tokens, shape.is_decode) if d)
        tokens = shape.num_tokens
        out: list[OpCost] = []
        if not tokens:
            return out
        out += self._count_rows("dense", tokens)
        lists = [(("context", q, c), True, 1, c + q, c) for q, c in chunks]
        if dq:
            kv = max(1, round(kv_sum / dq))
            lists.append((("generation", dq, kv), False, dq, kv, 0))
        for key, is_context, batch, s, prefix in lists:
            for name, ms, source in self._rows(key, key[0], is_context, batch, s, prefix):
                out.append(OpCost(name, ms * 1e-3, source))
        if shape.num_sampled:
            out += self._count_rows("lm_head", shape.num_sampled)
        if self._moe is not None:
            out += self._count_rows("moe", tokens)
        if shape.num_sampled:
            out.append(OpCost("sampler (roofline)", self._sampler_bytes * shape.num_sampled * self._m + self._kl,
                              "roofline"))
        merged: dict[str, OpCost] = {}
        for op in out:  # (several prefill chunks: one line)
            prev = merged.get(op.name)
            merged[op.name] = op if prev is None else OpCost(op.name, prev.seconds + op.seconds, prev.bound)
        return list(merged.values())
