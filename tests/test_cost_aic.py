"""The measured-kernel tier (`--cost aic`, servesim.cost.aic): a step is the sum of AIConfigurator's own answers
for its operators, plus the roofline's sampler and the engine's host; the fast path stays equal to step by step;
every value's source is counted. Needs aiconfigurator-core (`servesim[aic]`); skipped, saying so, without it."""

from __future__ import annotations

import json

import pytest
from helpers import cli

aic = pytest.importorskip("aiconfigurator_core", reason="the measured-kernel tier needs servesim[aic]")

from servesim.cost.base import StepShape  # noqa: E402
from servesim.cost.host import get_engine  # noqa: E402
from servesim.engine import simulate  # noqa: E402
from servesim.engine.request import Request  # noqa: E402
from servesim.engines.config import EngineConfig  # noqa: E402
from servesim.errors import ConfigError  # noqa: E402

# Llama-3-8B (config.json): hidden 4096, 32 layers, 32 heads, 8 KV heads, head_dim 128, MLP 14336, vocab 128256
H, L, HEADS, KV, HD, INTER, VOCAB = 4096, 32, 32, 8, 128, 14336, 128256


def _library_step(tp: int, tokens: int, sampled: int, chunks, decodes: int, kv_len: int) -> float:
    """The step's operators asked of aiconfigurator-core directly, in its own terms (sdk/models/llama.py), seconds."""
    from aiconfigurator_core.sdk import common, perf_database
    from aiconfigurator_core.sdk import operations as ops
    from aiconfigurator_core.sdk.engine import EngineHandle, build_ops_json

    db = perf_database.get_database_view("h100_sxm", "vllm", "0.24.0", allow_missing_data=False,
                                         database_mode="SILICON", transfer_policy=None)
    h = EngineHandle.for_database(db)
    bf16, heads, kv, inter = common.GEMMQuantMode.bfloat16, HEADS // tp, KV // tp, INTER // tp
    dense = [ops.Embedding("e", 1, VOCAB // tp, H, 0.3), ops.ElementWise("n1", L, 2 * H, 2 * H, 0.8),
             ops.GEMM("qkv", L, (heads + 2 * kv) * HD, H, bf16),
             ops.GEMM("o", L, H, heads * HD, bf16, low_precision_input=True),
             ops.ElementWise("n2", L, 2 * H, 2 * H, 0.8), ops.GEMM("up", L, 2 * inter, H, bf16),
             ops.ElementWise("act", L, 2 * inter, inter, 0.8),
             ops.GEMM("down", L, H, inter, bf16, low_precision_input=True),
             ops.CustomAllReduce("ar", 2 * L + 1, H, tp)]

    def ms(op_list, **kw):
        return sum(r[1] for r in h.evaluate_ops_json(build_ops_json(op_list), **kw))

    def at(op_list, m, lo, hi):  # the token-count lists: the tables at the powers of two around m, linear between
        a, b = (ms(op_list, is_context=True, batch_size=1, s=x) for x in (lo, hi))
        return a + (b - a) * (m - lo) / (hi - lo)

    total = at(dense, tokens, 512, 1024)  # (tokens: 516)
    total += at([ops.GEMM("lm", 1, VOCAB // tp, H, bf16)], sampled, 4, 8)  # (sampled: 5)
    kvq, fmha = common.KVCacheQuantMode.bfloat16, common.FMHAQuantMode.bfloat16
    for q, c in chunks:
        total += ms([ops.ContextAttention("ca", L, heads, kv, kvq, fmha, head_size=HD)], is_context=True,
                    batch_size=1, s=c + q, prefix=c)
    total += ms([ops.GenerationAttention("ga", L, heads, kv, kvq, head_size=HD)], is_context=False,
                batch_size=decodes, s=kv_len)
    return total * 1e-3


def test_a_step_is_the_librarys_own_operator_answers_plus_host():
    # the token-count lists at 516 tokens: 512's answer + 4/512 of the way to 1,024's; the LM head at 5 sampled:
    # 4's + 1/4 of the way to 8's; the attention lists at their own shapes
    from servesim.cost.aic import AicKernels

    engine = get_engine("vllm-0.13")  # async scheduling off: the host's work in series with the GPU's
    cost = AicKernels("llama-3-8b", "h100-80gb", 2, engine=engine, backend_version="0.24.0")
    assert cost.database == ("h100_sxm", "vllm", "0.24.0")
    # 4 decodes at 1,000 cached tokens (each reads 1,001) and a 512-token chunk on 256 cached; 5 sample
    shape = StepShape.of([1000] * 4, [(512, 256)])
    device = _library_step(2, 516, 5, [(512, 256)], 4, 1001)
    sampler = cost._sampler_bytes * 5 * cost._m + cost._kl  # the sampler stays the roofline's
    host = engine.host_time(5, 2)  # Vidur's per-step cost + 5 sequences + the TP broadcast
    assert cost.step_time(shape) == pytest.approx(device + sampler + host, rel=1e-12)
    assert cost.split(shape)[0] == pytest.approx(device + sampler, rel=1e-12)
    assert sum(op.seconds for op in cost.breakdown(shape)) == pytest.approx(device + sampler, rel=1e-12)
    # every value's source is counted: the GEMMs measured, the sampler servesim's own
    assert cost.provenance["qkv_proj"]["silicon"] >= 1 and "roofline" in {op.bound for op in cost.breakdown(shape)}


def test_the_fast_path_equals_step_by_step():
    reqs = [Request(f"r{i}", 0.002 * i, 300 + 50 * i, 20 + 3 * i) for i in range(12)]
    cfg = EngineConfig(max_num_seqs=6, max_num_batched_tokens=512)

    def run(fast):
        from servesim.cost.aic import AicKernels

        cost = AicKernels("llama-3-8b", "h100-80gb", 1, engine=get_engine("vllm-0.33"))
        return simulate(reqs, cfg, "vllm", cost, record="full", fast=fast)

    a, b = run(True), run(False)
    assert [r.token_times for r in a.requests] == [r.token_times for r in b.requests]
    assert a.cost_model.startswith("aic (h100_sxm vllm ")  # the result names the tables that priced it


def test_the_newest_tables_where_the_release_has_none_and_what_is_refused(monkeypatch, capsys):
    from servesim.cost.aic import AicKernels, database_for

    # a release without queryable tables (none, or outside aiconfigurator-core's current/next slots, as vLLM
    # 0.12.0 and 0.14.0 are in 0.12.0) takes the newest, as AIConfigurator's own scoring of its file does
    newest = database_for("h100-80gb", "vllm", None)
    assert database_for("h100-80gb", "vllm", "0.0.1") == database_for("h100-80gb", "vllm", "0.14.0") == newest
    with pytest.raises(ConfigError, match="no AIConfigurator tables mapped for GPU l40s"):
        AicKernels("llama-3-8b", "l40s", 1)
    code, _, err = cli(monkeypatch, capsys, "cost", "--decodes", "8", "--aic-backend-version", "0.24.0")
    assert code == 2 and "--aic-backend-version: an option of the measured-kernel tier; add --cost aic" in err
    code, out, err = cli(monkeypatch, capsys, "cost", "--decodes", "8", "--cost", "aic", "--aic-backend-version",
                         "0.24.0", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["aic_database"] == {"system": "h100_sxm", "backend": "vllm", "version": "0.24.0"}
    assert {p["operator"]: p["bound"] for p in doc["breakdown"]}["qkv_proj"] == "silicon"


def test_an_operator_the_tables_lack_is_the_rooflines_and_said():
    from servesim.cost.aic import AicKernels
    from servesim.cost.roofline import Roofline

    # vLLM 0.24.0's H100 tables have no context attention with an FP8 KV cache (FP8 FMHA): the roofline prices
    # that operator, the rest stays measured
    kw = dict(model="llama-3-8b", gpu="h100-80gb", tp=1, engine=get_engine("vllm-0.33"), kv_cache_dtype="fp8")
    cost, roof = AicKernels(backend_version="0.24.0", **kw), Roofline(**kw)
    shape = StepShape.of([], [(512, 0)])
    ops = {op.name: op for op in cost.breakdown(shape)}
    assert ops["context (roofline)"].bound == "roofline" and ops["qkv_proj"].bound == "silicon"
    assert "context attention data missing" in cost.fallbacks["context"]
    # one chunk alone: the roofline's own prefill attention for it
    attn = {op.name: op for op in roof.breakdown(shape)}["attention (prefill)"].seconds
    assert ops["context (roofline)"].seconds == pytest.approx(attn, rel=1e-12)


def test_a_moe_models_experts_are_the_librarys_moe_operator():
    # MiniMax-M2.5 (62 MoE layers, 256 experts of width 1,536, top-8, hidden 3,072; its checkpoint block-wise
    # FP8) on 4 H200s, 4 decodes: the MoE list is the router GEMM and AIConfigurator's MoE operator (fp8_block)
    # at MoE TP 4 under its own routing default (power law 1.2), both at 4 tokens (a power of two: no
    # interpolation); with whole experts (--enable-expert-parallel) the operator at MoE TP 1, EP 4
    from aiconfigurator_core.sdk import common, perf_database
    from aiconfigurator_core.sdk import operations as ops
    from aiconfigurator_core.sdk.engine import EngineHandle, build_ops_json

    from servesim.cost.aic import AicKernels

    db = perf_database.get_database_view("h200_sxm", "vllm", "0.24.0", allow_missing_data=False,
                                         database_mode="SILICON", transfer_policy=None)
    h = EngineHandle.for_database(db)

    def moe_ms(moe_tp, ep):
        listed = [ops.GEMM("r", 62, 256, 3072, common.GEMMQuantMode.bfloat16),
                  ops.MoE("m", 62, 3072, 1536, 8, 256, moe_tp, ep, common.MoEQuantMode.fp8_block, "power_law_1.2",
                          1)]
        return sum(r[1] for r in h.evaluate_ops_json(build_ops_json(listed), is_context=True, batch_size=1, s=4))

    for ep, layout in ((False, (4, 1)), (True, (1, 4))):
        cost = AicKernels("minimax-m2.5", "h200", 4, backend_version="0.24.0", enable_expert_parallel=ep)
        got = {op.name: op for op in cost.breakdown(StepShape.of([1000] * 4))}
        assert (got["router"].seconds + got["experts"].seconds) * 1e3 == pytest.approx(moe_ms(*layout), rel=1e-12)
        assert got["experts"].bound == "silicon" and not cost.fallbacks
