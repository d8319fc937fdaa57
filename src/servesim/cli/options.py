"""The options every simulating command takes (`run`, `trace`, `compare`, `explain`), declared once.

`@simulating` adds them to a command's signature and hands the command one `SimOptions`; the command declares
only its own options. Names are `vllm serve`'s and `vllm bench serve`'s where servesim has the concept
(`--max-num-seqs`, `--tensor-parallel-size`, `--num-prompts`, `--random-input-len`, ...). Defaults are not
decided here: an option not given is None, and `servesim.defaults` and the engine's package (`servesim.engines`)
fill it, the same for the command line and the API. Each engine's own flags come from its package.
"""

# Annotations stay objects (no `from __future__ import annotations`): typer reads every command's on each
# start, and would eval each string (~0.01 s in all).

import functools
import inspect
import math
from dataclasses import dataclass, fields, replace
from typing import Annotated, Any

import typer

from servesim.cli.workload import (
    BurstinessOpt,
    ColumnsOpt,
    FormatOpt,
    KeepFailedOpt,
    LogTypeOpt,
    OutputLenOpt,
    PromptLenOpt,
    RateScaleOpt,
    RequestRateOpt,
    SeedOpt,
    TimeUnitOpt,
    TraceModelOpt,
    WindowOpt,
    WorkloadOpt,
    workload_from_options,
)
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig
from servesim.errors import ConfigError
from servesim.flags import opt as _opt
from servesim.workloads.synthetic import RampUp


def policy_names() -> str:
    """Every policy, as `--help` lists them (the registry's engines, in order)."""
    from servesim.engines.registry import policies

    return " | ".join(policies())


Policy = Annotated[str, typer.Option("--policy", "-p", help=f"Scheduling policy: {policy_names()}.")]


def _engine_flags() -> tuple[type, ...]:
    """Each engine's flags (`EngineSpec.flags`), last engine first: `SimOptions` takes them all."""
    from servesim.engines.registry import engines

    return tuple(e.load("flags").FLAGS for e in reversed(engines()) if e.flags)


def _client_flags() -> tuple[type, ...]:
    """Each benchmark client's own flags (`servesim.clients`): `SimOptions` takes them all."""
    from servesim.clients import CLIENTS, client_module

    return tuple(m.FLAGS for m in map(client_module, CLIENTS) if m.FLAGS is not None)


@dataclass
class SimOptions(*_client_flags(), *_engine_flags()):
    """One simulating command's shared options, as given (None: not given, the default applies): the workload's,
    the cost model's, the cluster's here, and each engine's flags from its package (`servesim.engines`)."""

    # the workload (servesim.cli.workload has the loaders' options)
    workload: WorkloadOpt = "seed"
    client: Annotated[str, _opt("--client", help="The benchmark client that sends the load and measures it: "
                                "vllm-bench (vllm bench serve) | aiperf | mlperf | inference-perf | sglang-bench | "
                                "guidellm (docs/clients.md).")] = "vllm-bench"
    dataset_name: Annotated[str | None, _opt("--dataset-name", help="vllm bench serve's dataset: random (same as "
                                                                   "--workload random).")] = None
    format: FormatOpt = None
    columns: ColumnsOpt = None
    time_unit: TimeUnitOpt = None
    request_rate: RequestRateOpt = None
    burstiness: BurstinessOpt = 1.0
    ramp_up_strategy: Annotated[str | None, _opt("--ramp-up-strategy", help="vllm bench serve's ramp-up: linear | "
                                                 "exponential, the rate rising from --ramp-up-start-rps to "
                                                 "--ramp-up-end-rps over the requests (no --request-rate).")] = None
    ramp_up_start_rps: Annotated[int | None, _opt("--ramp-up-start-rps", help="...: the first request's "
                                                  "rate.")] = None
    ramp_up_end_rps: Annotated[int | None, _opt("--ramp-up-end-rps", help="...: the last request's rate.")] = None
    num_requests: Annotated[int | None, _opt("--num-prompts", "--num-requests", help="'random': how many (default "
                                                                                   "1000); a trace: sample N.")] = None
    prompt_len: PromptLenOpt = None
    output_len: OutputLenOpt = None
    random_input_len: Annotated[int | None, _opt("--random-input-len", help="vllm bench serve's random dataset: "
                                                                           "input tokens (default 1024).")] = None
    random_output_len: Annotated[int | None, _opt("--random-output-len", help="...: output tokens (default "
                                                                             "128).")] = None
    random_range_ratio: Annotated[float | None, _opt("--random-range-ratio", help="...: lengths uniform in "
                                                     "[L(1-r), L(1+r)] (default 0).")] = None
    ignore_eos: Annotated[bool, _opt("--ignore-eos", help="vllm bench serve's: every request generates to its "
                                     "output length (servesim's always do); SGLang admits them apart, with its "
                                     "radix cache off.")] = False
    random_prefix_len: Annotated[int | None, _opt("--random-prefix-len", help="...: the same tokens before every "
                                                  "prompt (default 0), which the prefix cache can serve.")] = None
    prefix_repetition_prefix_len: Annotated[int, _opt("--prefix-repetition-prefix-len", help="vllm bench serve's "
                                                      "prefix_repetition dataset: tokens of each shared "
                                                      "prefix.")] = 256
    prefix_repetition_suffix_len: Annotated[int, _opt("--prefix-repetition-suffix-len", help="...: each prompt's "
                                                      "own tokens after it.")] = 256
    prefix_repetition_num_prefixes: Annotated[int, _opt("--prefix-repetition-num-prefixes", help="...: how many "
                                                        "prefixes, num_prompts // this prompts each.")] = 10
    prefix_repetition_output_len: Annotated[int, _opt("--prefix-repetition-output-len", help="...: output "
                                                      "tokens.")] = 128
    num_conversations: Annotated[int | None, _opt("--num-conversations", help="--workload multi-turn: "
                                                  "conversations (default 32), the first turns at "
                                                  "--request-rate (default: all at 0).")] = None
    num_turns: Annotated[int | None, _opt("--num-turns", help="...: turns per conversation (default 5); each "
                                          "turn's prompt is the conversation so far.")] = None
    turn_input_len: Annotated[int | None, _opt("--turn-input-len", help="...: tokens of each user message "
                                               "(default 256).")] = None
    turn_output_len: Annotated[int | None, _opt("--turn-output-len", help="...: tokens of each answer (default "
                                                "128).")] = None
    common_prefix_len: Annotated[int | None, _opt("--common-prefix-len", help="...: a system prompt shared by "
                                                  "every conversation (default 0).")] = None
    think_time: Annotated[float | None, _opt("--think-time", help="...: seconds from an answer's last token to "
                                             "the next turn (closed loop; default 0).")] = None
    max_concurrency: Annotated[int | None, _opt("--max-concurrency", help="vllm bench serve's cap on requests in "
                                                "flight: the others wait at the client (first come, first "
                                                "served); TTFT counts from when one is sent.")] = None
    frontend: Annotated[str | None, _opt("--frontend", help="The path outside the engine core (HTTP, the API "
                                         "server, tokenizing, streaming, the client): vllm | sglang (measured "
                                         "presets, servesim.engine.frontend) | none (the default).")] = None
    frontend_latency_ms: Annotated[float | None, _opt("--frontend-latency-ms", help="...: ms per request from a "
                                                      "send to the engine's queue (default: the preset's).")] = None
    frontend_latency_per_token_us: Annotated[float | None, _opt("--frontend-latency-per-token-us", help="...: us "
                                                                "per prompt token, the tokenizer (default: the "
                                                                "preset's).")] = None
    window: WindowOpt = None
    rate_scale: RateScaleOpt = None
    seed: SeedOpt = 0
    trace_model: TraceModelOpt = None
    log_type: LogTypeOpt = None
    keep_failed: KeepFailedOpt = False
    # the cost model
    cost: Annotated[str, _opt("--cost", help="auto (toy for the lesson's workloads, else the roofline) | toy | unit "
                                             "| roofline | aic (the roofline's operators from AIConfigurator's "
                                             "measured tables, servesim[aic]) | a profile .json.")] = "auto"
    aic_backend_version: Annotated[str | None, _opt("--aic-backend-version", help="--cost aic: the engine release "
                                                    "whose tables price each step. Default: the newest.")] = None
    model: Annotated[str | None, _opt("--model", help="Roofline model (see `servesim models`) or PATH/config.json. "
                                                      "Default: llama-3-8b.")] = None
    gpu: Annotated[str | None, _opt("--gpu", help="Roofline GPU (see `servesim gpus`) or PATH.toml. Default: "
                                                  "h100-80gb.")] = None
    tp: Annotated[int | None, _opt("--tensor-parallel-size", "-tp", "--tp", help="Roofline tensor-parallel size. "
                                   "Default: 1.")] = None
    dtype: Annotated[str | None, _opt("--dtype", help="Weights and KV: auto, bfloat16, float16 (2 bytes "
                                                      "each).")] = None
    quantization: Annotated[str | None, _opt("--quantization", "-q", help="Roofline: fp8 (weights and activations "
                                             "of the linear layers at the GPU's FP8 peak) | modelopt_fp4 (NVFP4: "
                                             "4.5-bit weights, W4A4 at the FP4 peak on Blackwell, W4A16 before). "
                                             "Default: none, or the checkpoint's own.")] = None
    kv_cache_dtype: Annotated[str | None, _opt("--kv-cache-dtype", help="Roofline KV cache: auto (the model's dtype) "
                                               "| fp8 (1 byte: more KV blocks, cheaper decode attention).")] = None
    enable_expert_parallel: Annotated[bool | None, _opt("--enable-expert-parallel", help="Roofline, MoE models: "
                                                        "whole experts per GPU (E / tp each), vLLM's expert "
                                                        "parallelism, instead of each expert's width split over "
                                                        "the tp GPUs. Default: off.")] = None
    ep_size: Annotated[int | None, _opt("--ep-size", help="SGLang, MoE models: whole experts over N GPUs, each "
                                        "expert's width over --tp / N (MoE TP). Default 1.")] = None
    data_parallel_size: Annotated[int | None, _opt("--data-parallel-size", "-dp", help="vLLM: N engine ranks of "
                                                   "--tp GPUs each, requests spread by vLLM's DP load balancing; a "
                                                   "MoE model's ranks step together. Default 1.")] = None
    all2all_backend: Annotated[str | None, _opt("--all2all-backend", help="vLLM, expert parallelism over DP > 1: "
                                                "allgather_reducescatter | deepep_high_throughput | "
                                                "deepep_low_latency. Default: allgather_reducescatter.")] = None
    enable_dp_attention: Annotated[bool | None, _opt("--enable-dp-attention", help="SGLang: attention data "
                                                     "parallel, --dp-size ranks of --tp / --dp-size GPUs each, "
                                                     "their tokens gathered for the MoE. Default: off.")] = None
    dp_size: Annotated[int | None, _opt("--dp-size", help="SGLang, with --enable-dp-attention: the attention DP "
                                        "ranks. Default 1.")] = None
    moe_a2a_backend: Annotated[str | None, _opt("--moe-a2a-backend", help="SGLang: none | deepep (DeepEP's "
                                                "dispatch and combine; EP = --tp). Default: none.")] = None
    deepep_mode: Annotated[str | None, _opt("--deepep-mode", help="SGLang, --moe-a2a-backend deepep: normal | "
                                            "low_latency | auto (normal for a prefill step). Default: auto.")] = None
    expert_load_imbalance: Annotated[float | None, _opt("--expert-load-imbalance", help="Roofline, expert "
                                                        "parallelism: the busiest EP rank's routed tokens over the "
                                                        "mean. Default 1.52 (1 / 0.66, EPLB's measured balance; "
                                                        "docs/cost-models.md).")] = None
    engine: Annotated[str | None, _opt("--engine", help="Roofline engine profile (host time per step): vllm-0.33 | "
                                       "vllm-0.13 (async scheduling off: 0.10-0.13) | vllm-0.2 | trtllm | sglang. "
                                       "Default: vllm-0.33.")] = None
    enforce_eager: Annotated[bool | None, _opt("--enforce-eager/--no-enforce-eager", help="No CUDA graphs: each "
                                               "kernel is launched from the host. Default: the --engine "
                                               "preset's.")] = None
    distributed_executor_backend: Annotated[str | None, _opt("--distributed-executor-backend", help="TP workers: "
                                                             "mp | ray (a per-step RPC). Default: the "
                                                             "preset's.")] = None
    disable_custom_all_reduce: Annotated[bool | None, _opt("--disable-custom-all-reduce/--enable-custom-all-reduce",
                                                           help="NCCL only, not vLLM's custom all-reduce for "
                                                           "small messages. Default: the preset's.")] = None
    decode_ms: Annotated[float | None, _opt("--decode-ms", help="Toy cost: ms per decoding request per step "
                                                               "(default 1).")] = None
    prefill_token_ms: Annotated[float | None, _opt("--prefill-token-ms", help="Toy cost: ms per prefill token "
                                                                             "(default 0.1).")] = None
    overhead_ms: Annotated[float | None, _opt("--overhead-ms", help="Toy cost: fixed ms per step (default "
                                                                    "0).")] = None
    # a cluster (servesim.cluster): replicas behind a router, or prefill/decode pools
    num_replicas: Annotated[int | None, _opt("--num-replicas", help="Data-parallel replicas of the engine behind "
                                             "--router (default: one engine, no router).")] = None
    router: Annotated[str | None, _opt("--router", help="round-robin (default) | random | least-loaded | least-kv | "
                                       "prefix-aware | weighted:prefix=3,queue=2,kv=2 (servesim routers).")] = None
    router_delay_ms: Annotated[float | None, _opt("--router-delay-ms", help="The router sees the replicas' state "
                                                  "this many ms late (default 0).")] = None
    prefill_replicas: Annotated[int | None, _opt("--prefill-replicas", help="P/D: prefill replicas (with "
                                                 "--decode-replicas).")] = None
    decode_replicas: Annotated[int | None, _opt("--decode-replicas", help="P/D: decode replicas.")] = None
    kv_transfer_bandwidth: Annotated[float | None, _opt("--kv-transfer-bandwidth", help="P/D: bytes/s of each "
                                                        "prefill replica's KV link (default 50e9).")] = None
    kv_transfer_latency_ms: Annotated[float | None, _opt("--kv-transfer-latency-ms", help="P/D: ms per KV transfer "
                                                         "on top of bytes / bandwidth (default 0).")] = None

    def is_cluster(self) -> bool:
        """Any cluster option given: the run goes to `servesim.cluster.simulate_cluster`."""
        return any(v is not None for v in (self.num_replicas, self.router, self.router_delay_ms,
                                           self.prefill_replicas, self.decode_replicas, self.kv_transfer_bandwidth,
                                           self.kv_transfer_latency_ms))

    def no_cluster(self, command: str) -> None:
        if self.is_cluster():
            raise ConfigError(f"{command}: the cluster options (--num-replicas, --router, --prefill-replicas, ...) "
                              "are taken by servesim run for now")

    def simulate_cluster(self, requests: list[Request], config: EngineConfig, policy: str, cost, record: str):
        from servesim.cluster import DEFAULT_KV_BANDWIDTH, Pool, simulate_cluster

        pd = (self.prefill_replicas, self.decode_replicas)
        routing = self.router is not None or self.router_delay_ms is not None
        if routing and self.num_replicas is None and pd == (None, None):
            given = "--router" if self.router is not None else "--router-delay-ms"
            raise ConfigError(f"{given} shapes a cluster's routing: add --num-replicas N (or --prefill-replicas and "
                              "--decode-replicas)")
        if self.router_delay_ms is not None and not 0 <= self.router_delay_ms < math.inf:
            raise ConfigError(f"--router-delay-ms {self.router_delay_ms:g}: expected a finite number of ms >= 0")
        if (pd[0] is None) != (pd[1] is None):
            raise ConfigError("--prefill-replicas and --decode-replicas make a P/D cluster: give both")
        if pd[0] is not None and self.num_replicas is not None:
            raise ConfigError("--num-replicas and --prefill-replicas/--decode-replicas: give one layout")
        if pd[0] is None and (self.kv_transfer_bandwidth is not None or self.kv_transfer_latency_ms is not None):
            raise ConfigError("--kv-transfer-* shape a P/D cluster: add --prefill-replicas and --decode-replicas")
        if pd[0] is not None:
            for flag, n in (("--prefill-replicas", pd[0]), ("--decode-replicas", pd[1])):
                if n < 1:
                    raise ConfigError(f"{flag} {n}: expected an integer >= 1")
            pools = [Pool(pd[0], config, policy, cost, "prefill"), Pool(pd[1], config, policy, cost, "decode")]
        else:
            pools = [Pool(1 if self.num_replicas is None else self.num_replicas, config, policy, cost)]
            if pools[0].count < 1:
                raise ConfigError(f"--num-replicas {self.num_replicas}: expected an integer >= 1")
        return simulate_cluster(
            requests, pools, router=self.router or "round-robin", seed=self.seed,
            router_delay=(self.router_delay_ms or 0.0) / 1000,
            kv_transfer_bandwidth=DEFAULT_KV_BANDWIDTH if self.kv_transfer_bandwidth is None
            else self.kv_transfer_bandwidth,
            kv_transfer_latency=(self.kv_transfer_latency_ms or 0.0) / 1000, record=record)

    def requests(self) -> list[Request]:
        """The workload vllm bench serve sends (another `--client` sends its own: `servesim run` only)."""
        from servesim.clients import CLIENTS, DEFAULT_CLIENT, client_module

        if self.client != DEFAULT_CLIENT:
            client_module(self.client)  # (an unknown name is refused as such)
            raise ConfigError(f"--client {self.client}: its load is simulated by servesim run, trace and explain "
                              "for now")
        for name in CLIENTS:
            given = client_module(name).FLAGS and client_module(name).given(self)
            if given:
                raise ConfigError(f"{given[0]} is an option of the {name} client: add --client {name} (servesim "
                                  "run)")
        reqs = self._requests()
        if self.ignore_eos:  # vllm bench serve's --ignore-eos (sglang.bench_serving's default)
            reqs = [replace(r, ignore_eos=True) for r in reqs]
        return reqs

    def _requests(self) -> list[Request]:
        if self.workload_name() == MULTI_TURN:
            return self.conversations()
        reqs = workload_from_options(self.workload_name(), **self.loader_options())
        if self.dataset_name == "prefix_repetition":
            return repeated_prefixes(reqs, self.prefix_repetition_prefix_len, self.prefix_repetition_num_prefixes,
                                     self.seed)
        if self.random_prefix_len:
            reqs = shared_prefix(reqs, self.random_prefix_len)
        return reqs

    def conversations(self) -> list[Request]:
        """--workload multi-turn (`servesim.workloads.sessions.conversations`)."""
        from servesim.workloads.sessions import conversations

        given = [flag for flag, v in (("--num-prompts", self.num_requests), ("--prompt-len", self.prompt_len),
                                      ("--output-len", self.output_len), ("--window", self.window),
                                      ("--rate-scale", self.rate_scale)) if v is not None]
        given += ["--ramp-up-strategy"] if self.ramp_up_strategy is not None else []
        if given or self.burstiness != 1.0:
            raise ConfigError(f"{(given or ['--burstiness'])[0]}: --workload multi-turn is shaped by "
                              "--num-conversations, --num-turns, --turn-input-len, --turn-output-len, "
                              "--common-prefix-len, --think-time and --request-rate")
        rate = math.inf if self.request_rate is None else self.request_rate
        return conversations(
            32 if self.num_conversations is None else self.num_conversations,
            5 if self.num_turns is None else self.num_turns,
            256 if self.turn_input_len is None else self.turn_input_len,
            128 if self.turn_output_len is None else self.turn_output_len,
            self.common_prefix_len or 0, self.think_time or 0.0, rate, self.seed)

    def workload_name(self) -> str:
        if self.client != "vllm-bench":  # the client makes its own dataset: not the lesson's (its settings, toy cost)
            return self.client
        if self.dataset_name is not None:
            if self.dataset_name not in ("random", "prefix_repetition"):
                raise ConfigError(f"--dataset-name {self.dataset_name}: servesim makes the random and "
                                  "prefix_repetition datasets; for others give the dataset as a trace file with "
                                  "--workload")
            if self.workload not in ("seed", "random"):
                raise ConfigError(f"--dataset-name {self.dataset_name} and --workload FILE: give one of them")
            return "random"
        return self.workload

    def loader_options(self) -> dict[str, Any]:
        turns = [flag for flag, v in (("--num-conversations", self.num_conversations), ("--num-turns", self.num_turns),
                                      ("--turn-input-len", self.turn_input_len),
                                      ("--turn-output-len", self.turn_output_len),
                                      ("--common-prefix-len", self.common_prefix_len),
                                      ("--think-time", self.think_time)) if v is not None]
        if turns:
            raise ConfigError(f"{turns[0]} shapes --workload multi-turn; add --workload multi-turn (a trace's "
                              "sessions come from its session id column)")
        prompt, output, num = self.prompt_len, self.output_len, self.num_requests
        if self.dataset_name == "prefix_repetition":
            if prompt is not None or output is not None or self.random_input_len or self.random_output_len:
                raise ConfigError("--dataset-name prefix_repetition sets the lengths: use --prefix-repetition-*")
            p, s, k = (self.prefix_repetition_prefix_len, self.prefix_repetition_suffix_len,
                       self.prefix_repetition_num_prefixes)
            if p < 0 or s < 0 or p + s < 1 or k < 1 or self.prefix_repetition_output_len < 1:
                raise ConfigError("--prefix-repetition-*: lengths >= 0 (prefix + suffix >= 1), output and "
                                  "num-prefixes >= 1")
            num = 1000 if num is None else num
            if num < k:  # as vLLM: num_prompts // num_prefixes prompts per prefix
                raise ConfigError(f"--num-prompts ({num}) must be >= --prefix-repetition-num-prefixes ({k})")
            prompt, output, num = str(p + s), str(self.prefix_repetition_output_len), k * (num // k)
        elif any(v is not None for v in (self.random_input_len, self.random_output_len, self.random_range_ratio,
                                       self.random_prefix_len)):
            if prompt is not None or output is not None:
                raise ConfigError("--random-input-len/--random-output-len and --prompt-len/--output-len both give "
                                  "lengths: use one pair")
            if self.workload_name() != "random":
                raise ConfigError("--random-* options shape the random dataset: add --dataset-name random")
            ratio = 0.0 if self.random_range_ratio is None else self.random_range_ratio
            if not 0.0 <= ratio < 1.0:
                raise ConfigError(f"--random-range-ratio {ratio}: expected a number in [0, 1)")
            prefix = self.random_prefix_len or 0
            if prefix < 0:
                raise ConfigError(f"--random-prefix-len {prefix}: expected an integer >= 0")
            prompt = random_lengths(1024 if self.random_input_len is None else self.random_input_len, ratio, prefix)
            output = random_lengths(128 if self.random_output_len is None else self.random_output_len, ratio, 0)
        return {"format": self.format, "columns": self.columns, "time_unit": self.time_unit,
                "request_rate": self.request_rate, "burstiness": self.burstiness, "num_requests": num,
                "prompt_len": prompt, "output_len": output, "window": self.window, "rate_scale": self.rate_scale,
                "seed": self.seed, "trace_model": self.trace_model, "log_type": self.log_type,
                "keep_failed": self.keep_failed, "ramp_up": self.ramp_up()}

    def ramp_up(self) -> RampUp | None:
        """`--ramp-up-strategy` and its two rates (`servesim.workloads.synthetic.RampUp`), or None."""
        rates = {"--ramp-up-start-rps": self.ramp_up_start_rps, "--ramp-up-end-rps": self.ramp_up_end_rps}
        if self.ramp_up_strategy is None:
            given = [flag for flag, v in rates.items() if v is not None]
            if given:
                raise ConfigError(f"{given[0]}: a rate of vllm bench serve's ramp-up; add --ramp-up-strategy "
                                  "linear or exponential")
            return None
        missing = [flag for flag, v in rates.items() if v is None]
        if missing:
            raise ConfigError(f"--ramp-up-strategy {self.ramp_up_strategy}: expected {missing[0]} as well "
                              "(vllm bench serve: both rates must be specified)")
        return RampUp(self.ramp_up_strategy, float(self.ramp_up_start_rps), float(self.ramp_up_end_rps))

    def engine_config(self, policy: str = "vllm", policies: tuple[str, ...] = ()) -> EngineConfig:
        """The shared knobs given (vLLM's flags) and the section of `policy`'s engine from its own flags; another
        engine's flags are refused. `policies`: a run of several (`compare --policies`): the config carries the
        section of every engine among them (each run takes its own)."""
        from servesim.defaults import lesson_settings
        from servesim.engines.registry import engine_for, engines, policy_class
        from servesim.engines.vllm.flags import shared_knobs

        given = {k: v for k, v in shared_knobs(self).items() if v is not None}
        if self.max_concurrency is not None:
            given["max_concurrency"] = self.max_concurrency
        given |= self.frontend_knobs()
        lesson = lesson_settings(self.workload_name(), policy_class(policy).chunked)
        spec, wanted = engine_for(policy), {engine_for(p).name for p in (policy, *policies)}
        sections = {e.section: self.section(e, e.name in wanted) for e in engines() if e.section}
        sections = {k: v for k, v in sections.items() if v is not None}
        if policies:
            return replace(EngineConfig(**(lesson | given)), **sections)
        if spec.from_shared_sizes is not None:  # the lesson's sizes under the engine's names; shared knobs given
            cfg, _ = spec.from_shared_sizes(EngineConfig(**lesson), sections.get(spec.section))  # are its to refuse
            return replace(cfg, **given)
        return EngineConfig(**(lesson | given))

    def frontend_knobs(self) -> dict[str, float]:
        """`--frontend PRESET` and its overrides as `EngineConfig`'s front-end seconds (none given: {})."""
        from servesim.engine.frontend import frontend

        ms, us = self.frontend_latency_ms, self.frontend_latency_per_token_us
        if self.frontend is None and ms is None and us is None:
            return {}
        for flag, v in (("--frontend-latency-ms", ms), ("--frontend-latency-per-token-us", us)):
            if v is not None and not 0 <= v < math.inf:
                raise ConfigError(f"{flag} {v:g}: expected a finite number >= 0")
        base = frontend(self.frontend or "none")
        return {"frontend_latency": base.latency if ms is None else ms / 1e3,
                "frontend_latency_per_token": base.latency_per_token if us is None else us / 1e6}

    def section(self, spec, wanted: bool):
        """`spec`'s config section from its flags for a run of its engine (`wanted`); refused when given to a run
        of another engine (None when not given)."""
        flags = spec.load("flags")
        given = flags.given(self)
        if wanted:
            return EngineConfig.section_class(spec.section)(**given)
        if given:
            field = next(iter(given)) if "max_total_num_tokens" not in given else "max_total_num_tokens"
            flag = flags.FLAG_OF.get(field, "--" + field.replace("_", "-"))
            if hasattr(flags, "named"):  # (the engine names the flag itself: a file of options, TensorRT-LLM's)
                flag = flags.named(self, field)
            article = "an" if spec.display[0] in "AEIOSU" else "a"  # (an SGLang, a TensorRT-LLM)
            raise ConfigError(f"{flag} is {article} {spec.display} server option: add --policy "
                              f"{next(iter(spec.policies))}")
        return None

    def cost_model(self, policy: str | None = None):
        """The cost model the options give; a roofline runs the host preset of `policy`'s engine (SGLang's under
        --policy sglang) unless --engine says otherwise (one cost for several policies: the default preset), its
        host work in series with the GPU's where the engine's flags turn its overlap off (`host_in_series`)."""
        from servesim.defaults import build_cost
        from servesim.engines.registry import engine_for

        spec = None if policy is None else engine_for(policy)
        preset = None if spec is None else spec.host_preset
        async_scheduling = self.async_scheduling
        serial = getattr(spec.load("flags"), "host_in_series", None) if spec is not None and spec.flags else None
        if serial is not None and serial(self):
            async_scheduling = False  # an engine loop without overlap (SGLang's normal one, TensorRT-LLM's
            #                           _executor_loop): the host's work in series with the GPU's
        return build_cost(self.cost, self.workload_name(), preset,
                          model=self.model, gpu=self.gpu, tp=self.tp,
                          dtype=self.dtype, quantization=self.quantization, kv_cache_dtype=self.kv_cache_dtype,
                          layout=self.layout(policy),
                          decode_ms=self.decode_ms, prefill_token_ms=self.prefill_token_ms,
                          overhead_ms=self.overhead_ms, engine=self.engine, enforce_eager=self.enforce_eager,
                          distributed_executor_backend=self.distributed_executor_backend,
                          disable_custom_all_reduce=self.disable_custom_all_reduce,
                          async_scheduling=async_scheduling, aic_backend_version=self.aic_backend_version)

    def layout(self, policy: str | None):
        """The parallel layout under the engine's own flags (`servesim.cost.layout.from_flags`): vLLM's
        --enable-expert-parallel, --data-parallel-size, --all2all-backend; SGLang's --ep-size, --enable-dp-attention,
        --dp-size, --moe-a2a-backend, --deepep-mode. None: none given."""
        from servesim.cost.layout import from_flags
        from servesim.engines.registry import engine_for

        engine = None if policy is None else engine_for(policy).name
        if engine is None and any(v is not None for v in (self.ep_size, self.enable_dp_attention, self.dp_size,
                                                          self.moe_a2a_backend, self.deepep_mode)):
            engine = "sglang" if self.enable_expert_parallel is None else None
        return from_flags(engine, self.tp, self.expert_load_imbalance,
                          enable_expert_parallel=self.enable_expert_parallel,
                          data_parallel_size=self.data_parallel_size, all2all_backend=self.all2all_backend,
                          ep_size=self.ep_size, enable_dp_attention=self.enable_dp_attention, dp_size=self.dp_size,
                          moe_a2a_backend=self.moe_a2a_backend, deepep_mode=self.deepep_mode)

    def lesson_note(self, policy: str = "vllm") -> str | None:
        """What the lesson's settings set, for a lesson workload (None otherwise or when all were given)."""
        from servesim.defaults import lesson_settings
        from servesim.engines.registry import engine_for

        spec = engine_for(policy)
        settings = lesson_settings(self.workload_name(), spec.scheduler(policy).chunked)
        settings = {spec.own_names.get(k, k): v for k, v in settings.items()}  # under the engine's own names
        applied = {k: v for k, v in settings.items() if getattr(self, k) is None}
        if not applied:
            return None
        return (f"{self.workload}: the lesson's settings, " + ", ".join(f"{k} {v}" for k, v in applied.items())
                + " (override with " + " ".join(f"--{k.replace('_', '-')}" for k in applied) + ")")


MULTI_TURN = "multi-turn"  # the generated multi-turn sessions (closed loop): see `SimOptions.conversations`
PREFIX_BLOCK = 16  # tokens per hash id of a shared random prefix: split or grouped into any vLLM block size >= 1


def shared_prefix(requests: list[Request], prefix_len: int) -> list[Request]:
    """vllm bench serve's random dataset gives every prompt the same `--random-prefix-len` tokens: as block
    identities, the prefix's full 16-token blocks are shared by all and every other block is the request's own,
    so the prefix cache can serve the prefix (one id per 16 tokens, `hash_block_size` 16)."""
    from dataclasses import replace

    shared = prefix_len // PREFIX_BLOCK
    out = []
    for i, r in enumerate(requests):
        n = -(-r.prompt_len // PREFIX_BLOCK)
        ids = tuple(("prefix", k) if k < shared else (i, k) for k in range(n))
        out.append(replace(r, hash_ids=ids, hash_block_size=PREFIX_BLOCK))
    return out


def repeated_prefixes(requests: list[Request], prefix_len: int, num_prefixes: int, seed: int) -> list[Request]:
    """vllm bench serve's prefix_repetition dataset (vllm/benchmarks/datasets, PrefixRepetitionRandomDataset):
    `num_prefixes` prefixes, num_prompts // num_prefixes prompts after each, in the order Python's
    `random.shuffle` gives with the seed (as vLLM shuffles them); a prompt's own suffix blocks are its own."""
    import random
    from dataclasses import replace

    per = len(requests) // num_prefixes
    order = [j for j in range(num_prefixes) for _ in range(per)]
    random.Random(seed).shuffle(order)
    shared = prefix_len // PREFIX_BLOCK
    out = []
    for i, (r, j) in enumerate(zip(requests, order, strict=True)):
        n = -(-r.prompt_len // PREFIX_BLOCK)
        ids = tuple(("prefix", j, k) if k < shared else (i, k) for k in range(n))
        out.append(replace(r, hash_ids=ids, hash_block_size=PREFIX_BLOCK))
    return out


def random_lengths(length: int, ratio: float, prefix: int) -> str:
    """vllm bench serve's random lengths as servesim's length syntax: uniform integers in
    [floor(L (1 - r)), floor(L (1 + r))] plus the prefix (vllm/benchmarks/datasets.py, RandomDataset)."""
    if length < 1:
        raise ConfigError(f"random length {length}: expected an integer >= 1")
    low, high = max(1, math.floor(length * (1 - ratio))), math.floor(length * (1 + ratio))
    return str(length + prefix) if low == high else f"uniform:{low + prefix}:{high + prefix}"


_SIM_FIELDS = [f.name for f in fields(SimOptions)]


def simulating(command):
    """Add every `SimOptions` option to `command`'s signature; the command takes `opts: SimOptions`."""
    sig = inspect.signature(command)
    own = [p for p in sig.parameters.values() if p.name != "opts"]
    hints = {f.name: f.type for f in fields(SimOptions)}
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
              for f in fields(SimOptions)]
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        opts = SimOptions(**{k: kwargs.pop(k) for k in _SIM_FIELDS})
        return command(opts=opts, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=own + shared)
    wrapper.__annotations__ = {p.name: p.annotation for p in own + shared} | {"return": sig.return_annotation}
    del wrapper.__wrapped__  # typer must read the new signature, not the command's
    return wrapper
