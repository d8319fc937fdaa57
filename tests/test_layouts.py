"""Parallel layouts (issue 26): expert parallelism with DeepEP's all-to-all, data-parallel ranks stepping together,
SGLang's attention DP and a MoE TP apart from attention's, under each engine's own flags. Numbers by hand."""

import json

import pytest
from helpers import cli

from servesim.cluster.dp import run_dp
from servesim.cost import Roofline, StepShape
from servesim.cost.comm import A2A_KERNELS
from servesim.cost.layout import DEFAULT_IMBALANCE, Layout, from_flags
from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError

EMPTY = StepShape((), (), (), 0)


def test_each_engines_flags_give_its_layout():
    # vLLM: TP 4 x DP 4 with --enable-expert-parallel: EP 16 over the 16 GPUs, whole experts (MoE TP 1); the
    # ranks' tokens gathered and reduce-scattered (vLLM's default all2all backend)
    v = from_flags("vllm", 4, enable_expert_parallel=True, data_parallel_size=4)
    assert (v.tp, v.dp, v.moe_tp, v.moe_ep, v.moe_comm, v.gpus) == (4, 4, 1, 16, "gather", 16)
    # without EP the experts' width is split over all 16 (FusedMoEParallelConfig's flattened TP)
    assert from_flags("vllm", 4, data_parallel_size=4).moe_tp == 16
    # one rank: every GPU has the tokens already, no collective of the experts' own
    assert from_flags("vllm", 8, enable_expert_parallel=True).moe_comm == "replicated"
    # SGLang: --tp 16 --ep-size 4: attention TP 16, MoE TP 16 / 4 = 4 beside EP 4
    s = from_flags("sglang", 16, ep_size=4)
    assert (s.tp, s.dp, s.moe_tp, s.moe_ep) == (16, 1, 4, 4)
    # --enable-dp-attention --dp-size 8 on --tp 8: eight attention ranks of one GPU; DeepEP sets EP = 8
    a = from_flags("sglang", 8, enable_dp_attention=True, dp_size=8, moe_a2a_backend="deepep")
    assert (a.tp, a.dp, a.moe_tp, a.moe_ep, a.moe_comm) == (1, 8, 1, 8, "deepep_auto")
    assert from_flags("vllm", 2) is None  # nothing but TP: the plain layout


@pytest.mark.parametrize(("engine", "flags", "said"), [
    ("sglang", {"tp": 8, "ep_size": 3}, "--ep-size 3: must divide --tp-size 8"),
    ("sglang", {"tp": 8, "enable_dp_attention": True, "dp_size": 3}, "--dp-size 3 must be > 1 and divide"),
    ("sglang", {"tp": 4, "dp_size": 2}, "runs 2 independent replicas; simulate them with --num-replicas 2"),
    ("sglang", {"tp": 8, "ep_size": 4, "moe_a2a_backend": "deepep"}, "SGLang sets it to --tp-size"),
    ("sglang", {"tp": 8, "deepep_mode": "normal"}, "an option of --moe-a2a-backend deepep"),
    ("sglang", {"tp": 2, "data_parallel_size": 2}, "--data-parallel-size is vLLM's flag"),
    ("vllm", {"tp": 2, "dp_size": 2}, "--dp-size is an SGLang server option"),
    ("vllm", {"tp": 2, "data_parallel_size": 2, "all2all_backend": "deepep_low_latency"},
     "uses it only with --enable-expert-parallel"),
    ("vllm", {"tp": 2, "all2all_backend": "pplx"}, "--all2all-backend pplx: expected one of"),
    ("vllm", {"tp": 2, "data_parallel_size": 0}, "--data-parallel-size 0: expected a positive integer"),
])
def test_layouts_the_engines_do_not_allow_are_refused(engine, flags, said):
    tp = flags.pop("tp")
    with pytest.raises(ConfigError, match=said):
        from_flags(engine, tp, **flags)


def test_expert_load_imbalance_is_checked_and_needs_expert_parallelism():
    assert Layout.vllm(2, 1, True).imbalance == DEFAULT_IMBALANCE == pytest.approx(1.5152, abs=1e-4)
    assert Layout.vllm(2).imbalance == 1.0  # every GPU holds every expert
    with pytest.raises(ConfigError, match="--expert-load-imbalance 0.5: expected"):
        Layout.vllm(2, 1, True, imbalance=0.5)
    with pytest.raises(ConfigError, match="every GPU holds every expert"):
        Layout.vllm(2, imbalance=1.2)


def test_the_model_refuses_what_its_experts_cannot_be_split_into(tmp_path):
    # Mixtral's 8 experts over EP 16 (vLLM TP 8 x DP 2)
    with pytest.raises(ConfigError, match="the experts' 16 ranks must divide the 8 experts of mixtral-8x7b"):
        Roofline("mixtral-8x7b", "h100", layout=Layout.vllm(8, 2, True))
    # SGLang --tp 16 --ep-size 2: MoE TP 8, which an expert 36 wide cannot be split into
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 16,
                                "vocab_size": 100, "intermediate_size": 256, "num_experts": 4,
                                "num_experts_per_tok": 2, "moe_intermediate_size": 36}))
    with pytest.raises(ConfigError, match="MoE TP 8 \\(tp x dp / ep\\): must divide the experts' width \\(36\\)"):
        Roofline(str(path), "h100", layout=Layout.sglang(16, ep_size=2))
    with pytest.raises(ConfigError, match="the layout says them"):
        Roofline("qwen3-30b-a3b", "h100", 4, layout=Layout.vllm(2, 2, True))


def test_weights_per_gpu_per_layout():
    # Qwen3-30B-A3B (hidden 2,048, 32 heads of 128, 4 KV heads, 48 layers, 128 experts of width 768, vocab
    # 151,936, untied), 16 bits. The experts split over 4 GPUs either way: by width at TP 4 (128 x 3 x 2,048 x 192
    # a layer) or whole at TP 2 x DP 2 with EP 4 (32 x 3 x 2,048 x 768): 150,994,944 weights a layer each.
    # Attention (qkv 2,048 x 5,120 + o 4,096 x 2,048 = 18,874,368 a layer) and the embedding and LM head
    # (151,936 x 2,048 each) split over the attention TP only: half of them at TP 2, a quarter at TP 4. So the
    # DP layout holds 2 bytes x (48 x 18,874,368 + 2 x 311,164,928) / 4 = 764,149,760 bytes more a GPU.
    tp4 = Roofline("qwen3-30b-a3b", "h100", 4)
    dp2 = Roofline("qwen3-30b-a3b", "h100", layout=Layout.vllm(2, 2, True))
    assert dp2.weight_bytes - tp4.weight_bytes == 764_149_760
    # SGLang --tp 4 --ep-size 2 (MoE TP 2: 64 experts of width 384 a GPU): the same expert weights, TP 4's attention
    sg = Roofline("qwen3-30b-a3b", "h100", layout=Layout.sglang(4, ep_size=2))
    assert sg.weight_bytes == tp4.weight_bytes


def test_weights_that_do_not_fit_a_gpu_are_refused_in_one_line(monkeypatch, capsys):
    # DeepSeek-V3's 671 B weights (FP8) over 4 H100s: 157.5 GiB a GPU against 72 usable (80 x 0.9)
    code, _, err = cli(monkeypatch, capsys, "run", "--workload", "random", "--request-rate", "10", "--model",
                       "deepseek-v3", "--gpu", "h100", "--tp", "4", "--num-prompts", "4")
    assert code == 2 and "does not fit on h100-80gb" in err and len(err.strip().splitlines()) == 1


def test_an_ep_all_to_all_moves_top_k_copies_of_each_token():
    # DeepSeek-V3 (hidden 7,168, top-8, 58 MoE layers, block FP8) on 8 H200s, SGLang's DP attention (8 ranks of
    # one GPU) with DeepEP's low-latency kernels and no imbalance: a token's dispatch is 8 copies of 7,168 FP8
    # bytes + 56 four-byte scales = 59,136 bytes, its combine 8 x 7,168 x 2 = 114,688 bytes
    lay = Layout.sglang(8, 8, True, moe_a2a_backend="deepep", deepep_mode="low_latency", imbalance=1.0)
    r = Roofline("deepseek-v3", "h200", layout=lay)
    assert r._a2a_bytes(1) == (59_136, 114_688)
    # 32 decodes a rank: 1,892,352 bytes dispatched a layer; 7/8 of them to the 7 other GPUs of the board over
    # NVLink (450 GB/s one way x 0.70): 27 us + 1,655,808 / 315e9 s = 32.26 us, over 58 layers
    ops = {o.name.split(" (")[0] + " " + o.name.split(") ")[0].split("(")[-1]: o
           for o in r.breakdown(StepShape.of(decodes=[2000] * 32))}
    dispatch = ops["moe dispatch deepep_low_latency"]
    assert dispatch.bytes == 58 * 32 * 59_136
    assert dispatch.seconds == pytest.approx(58 * (27e-6 + 1_655_808 / 315e9))
    # (no all-reduce at attention TP 1: the combine brings each token home)
    assert not any(name.startswith("all_reduce") for name in ops)


def test_ep_16_leaves_the_node_on_hgx_and_not_on_nvl72():
    # vLLM TP 1 x DP 16 with EP 16 and DeepEP low latency, 16 decodes a rank: 16 x 59,136 = 946,176 bytes
    # dispatched a MoE layer (DeepSeek-R1's FP8 block checkpoint, no imbalance). On an HGX B200, 8 of the 16 ranks
    # sit on the other node: half the bytes over the NIC (50 GB/s x 0.87); on a GB200 NVL72, 15/16 over NVLink
    # (900 GB/s x 0.70)
    lay = Layout.vllm(1, 16, True, "deepep_low_latency", imbalance=1.0)
    ll = A2A_KERNELS["deepep_low_latency"]
    size = 16 * 59_136
    for gpu, expected in (("b200", 27e-6 + size / 2 / (50e9 * ll.network_efficiency)),
                          ("gb200", 27e-6 + size * 15 / 16 / (900e9 * ll.nvlink_efficiency))):
        r = Roofline("deepseek-r1", gpu, layout=lay)
        (dispatch,) = [o for o in r.breakdown(StepShape.of(decodes=[1000] * 16)) if o.name.startswith("moe disp")]
        assert dispatch.seconds == pytest.approx(58 * expected)


def test_a_dp_layout_gathers_every_ranks_tokens_for_the_experts():
    # vLLM TP 2 x DP 2, EP 4 on Qwen3-30B-A3B (hidden 2,048, 16 bits): 8 tokens a rank; each MoE layer gathers
    # the two ranks' 8 x 2,048 x 2 bytes (65,536) and reduce-scatters as much back, over ranks 2 GPUs apart on
    # one board; the experts take 2 x 8 x 8 / 4 = 32 routed rows, times the imbalance
    r = Roofline("qwen3-30b-a3b", "h100", layout=Layout.vllm(2, 2, True, imbalance=1.0))
    ops = {o.name: o for o in r.breakdown(StepShape.of(decodes=[500] * 8))}
    assert ops["moe all_gather x48 (0.06 MiB each)"].bytes == 48 * 65_536
    assert ops["moe reduce_scatter x48 (0.06 MiB each)"].bytes == 48 * 65_536
    # an all-gather of 2 ranks inside the board, 32,768 bytes moving, at the H100 file's NCCL protocols for 2 GPUs:
    # min(6.8 us + 32,768 / (450 GB/s x 0.041), 20.6 us + 32,768 / (450 GB/s x 0.670)) = 8.576 us
    assert ops["moe all_gather x48 (0.06 MiB each)"].seconds == pytest.approx(48 * (6.8e-6 + 32_768 / (450e9 * 0.041)))
    # the routed rows: 32 padded to the 128-row tile, 2 x 32 x 2,048 x 1,536 FLOPs a gate_up_proj
    assert ops["experts.gate_up_proj"].flops == 48 * 2 * 128 * 2048 * 1536


def _decodes(name, n, context):
    return [Request(f"{name}{i}", 0.0, context, n) for i in range(1)]


def test_vllm_dp_ranks_step_together_with_a_dummy_batch():
    # One request on two vLLM DP ranks (TP 1 each, EP 2): vLLM's DP load balancer sends it to rank 0 (all empty,
    # the scan starting at 0); rank 1 has nothing and runs a dummy batch each step, so every step is
    # `dp_step_time([rank 0's shape, nothing])`: rank 0's GEMMs at its own tokens (the padding is its), the MoE
    # over both ranks' tokens (the dummy's one padded up to rank 0's)
    cost = Roofline("qwen3-30b-a3b", "h100", layout=Layout.vllm(1, 2, True))
    reqs = [Request("a", 0.0, 100, 3)]
    res = run_dp(reqs, EngineConfig(), "vllm", cost, record="full")
    assert [r.replica for r in res.routes] == [0]
    steps = res.replicas[0].steps
    shapes = [StepShape.of(prefills=[(100, 0)]), StepShape.of(decodes=[100]), StepShape.of(decodes=[101])]
    assert [s.duration for s in steps] == [cost.dp_step_time([sh, EMPTY]) for sh in shapes]
    assert res.replicas[1].steps == ()  # the dummy batches leave no record
    # rank 0's step, its GEMMs at its own 100 tokens, the experts over both ranks' 2 x 100 (the dummy padded):
    # 200 x 8 / 2 x 1.515 (the default imbalance) = 1,212.1 routed rows on the busiest GPU, 1,213, padded to the
    # 128-row tile, 1,280
    assert steps[0].duration == cost.step_time_with_decodes(0, 0, shapes[0], pad=100)
    (up,) = [o for o in cost.breakdown(shapes[0]) if o.name == "experts.gate_up_proj"]
    assert up.flops == 48 * 2 * 1280 * 2048 * 1536
    # and the group's clock is one: the request's last token at the three steps' end
    t = simulate(reqs, EngineConfig(), "vllm", cost, record="summary").timelines
    assert t[0].token_times[-1] == pytest.approx(sum(s.duration for s in steps), rel=1e-15)


def test_a_rank_that_finishes_first_keeps_stepping_with_the_other():
    # a (2 tokens) to rank 0, b (4 tokens) to rank 1 (vLLM's scan starts one rank further each request); after
    # a's last token rank 0 runs dummy batches while b decodes, every step still the two ranks' together
    cost = Roofline("qwen3-30b-a3b", "h100", layout=Layout.vllm(1, 2, True))
    res = run_dp([Request("a", 0.0, 50, 2), Request("b", 0.0, 50, 4)], EngineConfig(), "vllm", cost)
    assert [r.replica for r in res.routes] == [0, 1]
    a, b = res.replicas[0].steps, res.replicas[1].steps
    assert (len(a), len(b)) == (2, 4)
    assert [s.start_time for s in a] == [s.start_time for s in b[:2]]  # the same clock
    assert b[2].duration == cost.dp_step_time([EMPTY, StepShape.of(decodes=[51])])


def test_a_dp_attention_batch_is_split_over_the_ranks():
    # SGLang --tp 4 --enable-dp-attention --dp-size 2 --ep-size 4 (attention TP 2 a rank): four requests at once
    # go round robin (SGLang's default load balancing), two to each rank; both ranks prefill their two in one
    # step, alike, so the step is one rank's shape as `step_time` prices it (every rank alike)
    lay = Layout.sglang(4, 2, True, ep_size=4)
    cost = Roofline("qwen3-30b-a3b", "h100", layout=lay)
    assert cost.tp == 2 and cost.layout.gpus == 4
    res = run_dp([Request(f"r{i}", 0.0, 100, 2) for i in range(4)], EngineConfig(), "sglang", cost)
    assert [r.replica for r in res.routes] == [0, 1, 0, 1]
    first = [rep.steps[0] for rep in res.replicas]
    assert [len(s.scheduled) for s in first] == [2, 2]
    shape = StepShape.of(prefills=[(100, 0), (100, 0)])
    assert first[0].duration == first[1].duration == cost.dp_step_time([shape, shape]) == cost.step_time(shape)


def test_dense_dp_ranks_are_independent_and_the_fast_path_is_step_by_step():
    # a dense model's vLLM DP ranks never synchronise: each steps on its own (the cluster's clock), with the fast
    # path as a replica has it; the same timelines step by step
    cost = Roofline("llama-3-8b", "h100", layout=Layout.vllm(1, 2))
    reqs = [Request(f"r{i}", 0.01 * i, 200 + 37 * i, 20 + 11 * i) for i in range(12)]
    fast = simulate(reqs, EngineConfig(), "vllm", cost, record="summary", fast=True)
    slow = simulate(reqs, EngineConfig(), "vllm", cost, record="summary", fast=False)
    assert [list(r.token_times) for r in fast.timelines] == [list(r.token_times) for r in slow.timelines]


def test_the_cli_takes_each_engines_layout_flags(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "cost", "--model", "deepseek-v3", "--gpu", "h200", "--engine",
                         "sglang", "--tp", "8", "--enable-dp-attention", "--dp-size", "8", "--moe-a2a-backend",
                         "deepep", "--decodes", "16", "--json")
    assert code == 0, err
    import json

    got = json.loads(out)
    assert got["layout"] == {"tp": 1, "dp": 8, "moe_tp": 1, "moe_ep": 8, "moe_comm": "deepep_auto",
                             "expert_load_imbalance": DEFAULT_IMBALANCE, "gpus": 8}
    assert any(p["operator"].startswith("moe dispatch (deepep_low_latency)") for p in got["breakdown"])
    assert "communication" in got["by_bound"]
    run = ["run", "--workload", "random", "--request-rate", "10", "--model", "qwen3-30b-a3b", "--num-prompts", "8"]
    for args, said in ((("--policy", "sglang", "--data-parallel-size", "2"), "--data-parallel-size is vLLM's flag"),
                       (("--dp-size", "2", "--enable-expert-parallel"), "--dp-size is an SGLang server option")):
        code, _, err = cli(monkeypatch, capsys, *run, "--tp", "2", *args)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1
    code, out, err = cli(monkeypatch, capsys, *run, "--tp", "1", "--data-parallel-size", "2",
                         "--enable-expert-parallel")
    assert code == 0, err


def test_a_closed_loop_over_lockstep_ranks_sends_each_request_as_a_slot_frees():
    # (a bug fixed: a finish's stop for the cluster's clock left a rank's next arrival in the past, and the group
    # waited for it forever) 8 requests, at most 2 in flight over two ranks: the third is sent at the first finish
    cost = Roofline("qwen3-30b-a3b", "h100", layout=Layout.vllm(1, 2, True))
    reqs = [Request(f"r{i}", 0.0, 64, 4 + i) for i in range(8)]
    t = simulate(reqs, EngineConfig(max_concurrency=2), "vllm", cost, record="summary").timelines
    assert t.finished.all()
    assert t[2].arrival_time == pytest.approx(min(t[0].finish_time, t[1].finish_time))


def test_trtllms_mapping_gives_its_layout():
    # TensorRT-LLM's LLM API: tensor_parallel_size 8 with enable_attention_dp: eight attention ranks of one GPU,
    # the experts whole over the eight (moe_expert_parallel_size 8), the ranks' tokens gathered for them
    a = Layout.trtllm(8, True, 1, 8)
    assert (a.tp, a.dp, a.moe_tp, a.moe_ep, a.moe_comm, a.engine) == (1, 8, 1, 8, "gather", "trtllm")
    # tensor_parallel_size 64, MoE TP 8 x EP 8: attention TP 64, every GPU with the tokens (no gather)
    b = Layout.trtllm(64, False, 8, 8)
    assert (b.tp, b.dp, b.moe_tp, b.moe_ep, b.moe_comm) == (64, 1, 8, 8, "replicated")
    # Mapping's default: the experts' width over every GPU; one size given, the other the rest
    assert (Layout.trtllm(4).moe_tp, Layout.trtllm(4).moe_ep) == (4, 1)
    assert Layout.trtllm(16, moe_expert_parallel_size=4).moe_tp == 4
    assert Layout.trtllm(16, moe_tensor_parallel_size=2).moe_ep == 8
    with pytest.raises(ConfigError, match="moe_tensor_parallel_size 2 x moe_expert_parallel_size 2 must equal "
                                          "tensor_parallel_size 8"):
        Layout.trtllm(8, False, 2, 2)


def test_trtllms_attention_dp_gives_a_request_to_the_rank_with_the_fewest_active():
    # TensorRT-LLM 1.2 --enable_attention_dp over 2 GPUs: r0 (2,000 tokens to write) and r1 (2) at t=0 take
    # ranks 0 and 1; r1 is done long before r2 arrives at 1 s while r0 still decodes, so r2 goes to rank 1, the one
    # with no active request (`_balance_requests_across_ranks`); round robin would have sent it to rank 0
    cost = Roofline("qwen3-30b-a3b", "h100", layout=Layout.trtllm(2, True, 1, 2))
    reqs = [Request("r0", 0.0, 100, 2000), Request("r1", 0.0, 100, 2), Request("r2", 1.0, 100, 2)]
    res = run_dp(reqs, EngineConfig(), "trtllm", cost)
    assert res.cluster.request("r0").finish_time > 1.0 > res.cluster.request("r1").finish_time
    assert [r.replica for r in res.routes] == [0, 1, 1]


def test_trtllms_options_give_its_mapping_and_are_refused_elsewhere():
    # from_flags reads TensorRT-LLM's LLM API names under its engine: the same layout as Layout.trtllm
    lay = from_flags("trtllm", 8, enable_attention_dp=True, moe_expert_parallel_size=8)
    assert (lay.tp, lay.dp, lay.moe_tp, lay.moe_ep, lay.engine) == (1, 8, 1, 8, "trtllm")
    with pytest.raises(ConfigError, match="enable_attention_dp: TensorRT-LLM's options; add --policy trtllm"):
        from_flags("vllm", 8, enable_attention_dp=True)
    with pytest.raises(ConfigError, match="not beside --data-parallel-size"):
        from_flags("trtllm", 8, moe_expert_parallel_size=8, data_parallel_size=2)
