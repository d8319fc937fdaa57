"""Every vLLM flag under every engine: honoured (the run changes) or refused in one line, never silently ignored.

One workload, on the unit step clock (every step 1 s): four requests with a shared 64-token prefix (block
identities, so the prefix cache can act) and priorities, a 300-token prompt at 2 s, four more at 3-6 s; a bounded
pool of 40 blocks of 16 tokens, so admission, the watermark and preemption all bind. Each knob is given one value
that must change what an engine that reads it does; the other engines refuse it, naming why.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from servesim import EngineConfig, Request, simulate
from servesim.engines.registry import policy_class
from servesim.engines.sglang.server_args import SGLangConfig
from servesim.engines.trtllm.llm_args import TrtllmConfig
from servesim.errors import ConfigError

POLICIES = ("static", "continuous", "vllm", "vllm-v0", "sglang", "trtllm")


def _workload() -> list[Request]:
    shared = tuple(("shared", k) for k in range(4))
    r = [Request(f"a{i}", 0.0, 64, 40, priority=i % 3, hash_ids=shared, hash_block_size=16) for i in range(4)]
    r.append(Request("L", 2.0, 300, 20, hash_ids=tuple(("L", k) for k in range(19)), hash_block_size=16))
    return r + [Request(f"b{i}", 3.0 + i, 64, 30, priority=2 - i % 3, hash_ids=shared, hash_block_size=16)
                for i in range(4)]


BASE = {"max_num_batched_tokens": 512, "max_num_seqs": 6, "num_gpu_blocks": 40}
SWAP = {"preemption_mode": "swap", "enable_prefix_caching": False}  # (vLLM v1 has no swap beside its cache)
# knob -> (its value, what the base run needs beside it)
KNOBS = {
    "max_num_batched_tokens": (64, {}), "max_num_seqs": (2, {}), "max_model_len": (200, {}),
    "long_prefill_token_threshold": (32, {}), "enable_prefix_caching": (False, {}),
    "block_size": (8, {"num_gpu_blocks": 80}), "num_gpu_blocks": (30, {}), "gpu_memory_utilization": (0.5, {}),
    "watermark": (0.5, {}), "policy": ("priority", {}), "preemption_mode": ("swap", {"enable_prefix_caching": False}),
    "swap_space": (1e-4, SWAP), "num_cpu_blocks": (0, SWAP), "kv_bytes_per_token": (10**9, SWAP),
    "pcie_bandwidth": (1e3, SWAP), "async_scheduling": (True, {}),
}
# the knobs an engine reads under its own names only: refused under sglang (its own flags are SGLang's)
SGLANG_HONOURS = {"max_model_len"}
# knob -> the policies that refuse it, and the words of the refusal
REFUSED = {
    "max_num_batched_tokens": ({"static", "continuous", "vllm-v0"}, "could never be scheduled"),
    "long_prefill_token_threshold": ({"static", "vllm-v0"}, "never splits a prompt"),
    "enable_prefix_caching": ({"static", "vllm-v0"}, "prefix cache"),
    "gpu_memory_utilization": ({"static", "continuous", "vllm", "vllm-v0"}, "knows no GPU"),
    "watermark": ({"static"}, "reserves each request's whole length"),
    **{k: ({"static"}, "never preempts") for k in ("preemption_mode", "swap_space", "num_cpu_blocks",
                                                    "kv_bytes_per_token", "pcie_bandwidth")},
}


def _signature(result) -> tuple:
    steps = [(s.step, s.start_time, tuple((e.id, e.num_scheduled_tokens, e.num_blocks) for e in s.scheduled))
             for s in result.steps]
    return steps, [(t.id, t.finish_time) for t in result.requests], result.rejected, result.preemptions


def _base(policy: str, extra: dict) -> EngineConfig:
    if policy == "sglang":
        return EngineConfig(sglang=SGLangConfig(chunked_prefill_size=256, max_running_requests=6,
                                                max_total_num_tokens=640))
    if policy == "trtllm":  # (every vLLM knob is refused: TensorRT-LLM's own are in tests/test_trtllm_flags.py)
        return EngineConfig(trtllm=TrtllmConfig(max_num_tokens=512, max_batch_size=6, max_tokens=640,
                                                tokens_per_block=16, enable_chunked_prefill=True))
    unread = policy_class(policy).unread  # (static and v0 keep no prefix cache to turn off beside swap)
    return EngineConfig(**(BASE | {k: v for k, v in extra.items() if k not in unread}))


@pytest.mark.parametrize("knob", KNOBS)
@pytest.mark.parametrize("policy", POLICIES)
def test_a_vllm_flag_is_honoured_or_refused(policy, knob):
    value, extra = KNOBS[knob]
    try:
        base = simulate(_workload(), _base(policy, extra), policy, "unit")
    except ConfigError as exc:  # what the knob needs beside it is itself refused (static: swap preemption)
        assert policy in REFUSED.get(knob, ((), ""))[0] and REFUSED[knob][1] in str(exc), exc
        return
    refused_by, words = REFUSED.get(knob, ((), ""))
    if policy == "sglang" and knob not in SGLANG_HONOURS:
        refused_by, words = {"sglang"}, "vLLM knobs?\\b.*under policy sglang"
    if policy == "trtllm":
        refused_by, words = {"trtllm"}, f"{knob} is a vLLM knob with no meaning under policy trtllm"
    config = replace(_base(policy, extra), **{knob: value})
    if policy in refused_by:
        with pytest.raises(ConfigError, match=words):
            simulate(_workload(), config, policy, "unit")
        return
    assert _signature(simulate(_workload(), config, policy, "unit")) != _signature(base)


@pytest.mark.parametrize("policy", ["static", "continuous", "vllm-v0"])
def test_no_chunked_prefill_is_what_the_unchunked_policies_do(policy):
    # --no-enable-chunked-prefill states what they already do: the run is the same, and its config says so
    on = simulate(_workload(), EngineConfig(**BASE), policy, "unit")
    off = simulate(_workload(), EngineConfig(**BASE, enable_chunked_prefill=False), policy, "unit")
    assert _signature(on) == _signature(off) and not on.config.enable_chunked_prefill


def test_no_chunked_prefill_changes_vllm():
    cfg = EngineConfig(**(BASE | {"max_num_batched_tokens": 128}))
    chunked = simulate(_workload(), cfg, "vllm", "unit")
    whole = simulate(_workload(), replace(cfg, enable_chunked_prefill=False, max_num_batched_tokens=None), "vllm",
                     "unit")
    assert _signature(chunked) != _signature(whole)
