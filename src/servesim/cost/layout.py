"""A deployment's parallel layout: attention's tensor parallelism, data-parallel ranks, and the experts' MoE TP and
EP, under each engine's own flags; and how a MoE layer's tokens reach the experts.

vLLM 0.33 (`vllm/model_executor/layers/fused_moe/config.py`, `FusedMoEParallelConfig.make`): `--tensor-parallel-size
T --data-parallel-size D` runs D engine ranks of T GPUs each; a MoE layer spans all T x D GPUs, its experts' width
split over them (MoE TP T x D) or, with `--enable-expert-parallel`, whole experts (EP T x D, MoE TP 1). At D = 1
every GPU has every token already (attention is tensor parallel) and the layer ends in the TP all-reduce; at D > 1
the ranks' tokens are all-gathered before the experts and reduce-scattered after (`--all2all-backend
allgather_reducescatter`, the default), or, under EP, dispatched and combined by DeepEP
(`deepep_high_throughput`, `deepep_low_latency`).

SGLang 0.5.23 (`server_args.py`): `--tp-size T` GPUs in all; `--enable-dp-attention --dp-size D` splits them into
D attention ranks of T / D GPUs each, whose tokens are gathered for the MoE; `--ep-size N` shards whole experts over
N ranks with MoE TP T / N; `--moe-a2a-backend deepep` (EP = T) dispatches and combines with DeepEP, `--deepep-mode
normal | low_latency | auto` (auto: normal for a step with a prefill, low latency for a decode step).

Data-parallel ranks of a MoE model step together (`servesim.cluster.dp`): a step lasts as long as the slowest
rank's, and every rank runs its GEMMs at the largest rank's token count (vLLM pads them alike under CUDA graphs,
`vllm/v1/worker/dp_utils.py`; an idle rank runs a dummy batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.cost.specs import is_int, is_real, show
from servesim.errors import ConfigError

# The busiest expert-parallel rank's routed tokens over the mean (max / mean, >= 1), when the user does not say:
# 1 / 0.66, the load balance factor (mean / max tokens per GPU) that DeepSeek's EPLB reaches on a serving trace,
# as measured in Cheng et al., "Barbarians at the Gate: How AI is Upending Systems Research" (arXiv 2510.06189,
# the expert-parallelism load-balancer case study). A rank holding all the experts (EP 1) is balanced (1).
DEFAULT_IMBALANCE = 1 / 0.66
VLLM_ALL2ALL = {"allgather_reducescatter": "gather", "deepep_high_throughput": "deepep_normal",
                "deepep_low_latency": "deepep_low_latency"}
SGLANG_DEEPEP_MODES = {"normal": "deepep_normal", "low_latency": "deepep_low_latency", "auto": "deepep_auto"}
# How a MoE layer's tokens reach the experts: every GPU has them (one rank), gathered and reduce-scattered over
# the ranks, or DeepEP's dispatch and combine
MOE_COMMS = ("replicated", "gather", "deepep_normal", "deepep_low_latency", "deepep_auto")


@dataclass(frozen=True, slots=True)
class Layout:
    """GPUs = tp x dp = moe_tp x moe_ep."""

    tp: int = 1  # attention's tensor parallelism in one data-parallel rank
    dp: int = 1  # data-parallel ranks (vLLM's engine ranks, SGLang's attention-DP ranks)
    moe_tp: int = 1  # each expert's width split over this many GPUs
    moe_ep: int = 1  # whole experts over this many GPUs
    moe_comm: str = "replicated"
    imbalance: float = 1.0  # the busiest EP rank's routed tokens over the mean
    engine: str = "vllm"
    expert_parallel: bool = False  # the engine's expert-parallel flag was given (vLLM's even at one GPU)

    def __post_init__(self) -> None:
        for field in ("tp", "dp", "moe_tp", "moe_ep"):
            value = getattr(self, field)
            if not is_int(value) or value < 1:
                raise ConfigError(f"{field}: expected a positive integer, got {show(value)}")
        if self.moe_tp * self.moe_ep != self.tp * self.dp:
            raise ConfigError(f"layout: MoE TP {self.moe_tp} x EP {self.moe_ep} must equal the GPUs, TP {self.tp} x "
                              f"DP {self.dp} = {self.tp * self.dp}")
        if self.moe_comm not in MOE_COMMS:
            raise ConfigError(f"moe_comm {self.moe_comm!r}: expected one of {', '.join(MOE_COMMS)}")
        if not (is_real(self.imbalance) and 1 <= self.imbalance < float("inf")):
            raise ConfigError(f"--expert-load-imbalance {show(self.imbalance)}: expected the busiest expert-parallel "
                              "rank's tokens over the mean, a finite number >= 1")

    def describe(self) -> str:
        """`TP 4 x DP 4, MoE TP 1 x EP 16 (gather)`."""
        return f"TP {self.tp} x DP {self.dp}, MoE TP {self.moe_tp} x EP {self.moe_ep} ({self.moe_comm})"

    @property
    def gpus(self) -> int:
        return self.tp * self.dp

    @property
    def lockstep(self) -> bool:
        """Whether the data-parallel ranks step together (a MoE layer spans them)."""
        return self.dp > 1

    @classmethod
    def vllm(cls, tp: int = 1, dp: int = 1, enable_expert_parallel: bool = False,
             all2all_backend: str = "allgather_reducescatter", imbalance: float | None = None) -> Layout:
        """vLLM's flags. `all2all_backend` matters only under EP with dp > 1 (vLLM's `use_all2all_kernels`)."""
        _positive("--tensor-parallel-size", tp)
        _positive("--data-parallel-size", dp)
        if all2all_backend not in VLLM_ALL2ALL:
            raise ConfigError(f"--all2all-backend {all2all_backend}: expected one of {', '.join(VLLM_ALL2ALL)} "
                              "(vLLM's other backends are not modelled)")
        ep = tp * dp if enable_expert_parallel else 1
        if enable_expert_parallel and dp > 1:
            comm = VLLM_ALL2ALL[all2all_backend]
        elif all2all_backend != "allgather_reducescatter":
            raise ConfigError(f"--all2all-backend {all2all_backend}: vLLM uses it only with "
                              "--enable-expert-parallel and --data-parallel-size > 1")
        else:
            comm = "gather" if dp > 1 else "replicated"
        return cls(tp, dp, tp * dp // ep, ep, comm, _imbalance(imbalance, ep), "vllm", enable_expert_parallel)

    @classmethod
    def sglang(cls, tp: int = 1, dp: int = 1, enable_dp_attention: bool = False, ep_size: int = 1,
               moe_a2a_backend: str = "none", deepep_mode: str = "auto", imbalance: float | None = None) -> Layout:
        """SGLang's flags: `tp` GPUs in all."""
        _positive("--tp-size", tp)
        _positive("--dp-size", dp)
        _positive("--ep-size", ep_size)
        if dp > 1 and not enable_dp_attention:
            raise ConfigError(f"--dp-size {dp} without --enable-dp-attention: SGLang runs {dp} independent replicas; "
                              f"simulate them with --num-replicas {dp}")
        if enable_dp_attention and (dp < 2 or tp % dp):
            raise ConfigError(f"--enable-dp-attention: --dp-size {dp} must be > 1 and divide --tp-size {tp}")
        if moe_a2a_backend not in ("none", "deepep"):
            raise ConfigError(f"--moe-a2a-backend {moe_a2a_backend}: expected none or deepep (SGLang's others are not "
                              "modelled)")
        if deepep_mode not in SGLANG_DEEPEP_MODES:
            raise ConfigError(f"--deepep-mode {deepep_mode}: expected one of {', '.join(SGLANG_DEEPEP_MODES)}")
        if moe_a2a_backend == "deepep":
            if ep_size not in (1, tp):
                raise ConfigError(f"--ep-size {ep_size}: SGLang sets it to --tp-size ({tp}) under --moe-a2a-backend "
                                  "deepep; drop it or give --tp-size")
            ep_size = tp
        elif deepep_mode != "auto":
            raise ConfigError(f"--deepep-mode {deepep_mode}: an option of --moe-a2a-backend deepep")
        if tp % ep_size:
            raise ConfigError(f"--ep-size {ep_size}: must divide --tp-size {tp} (MoE TP = tp / ep)")
        comm = SGLANG_DEEPEP_MODES[deepep_mode] if moe_a2a_backend == "deepep" else \
            "gather" if dp > 1 else "replicated"
        return cls(tp // dp, dp, tp // ep_size, ep_size, comm, _imbalance(imbalance, ep_size), "sglang",
                   ep_size > 1)


    @classmethod
    def trtllm(cls, tp: int = 1, enable_attention_dp: bool = False, moe_tensor_parallel_size: int | None = None,
               moe_expert_parallel_size: int | None = None, imbalance: float | None = None) -> Layout:
        """TensorRT-LLM 1.2's LLM API (`Mapping`): `tensor_parallel_size` GPUs; with `enable_attention_dp` attention
        runs one data-parallel rank per GPU (each its own scheduler, the ranks stepping together through the MoE);
        the experts split `moe_tensor_parallel_size` wide and whole over `moe_expert_parallel_size` GPUs, their
        product the GPUs (unset: MoE TP over every GPU, Mapping's default). The MoE's tokens are gathered and
        reduce-scattered over the ranks under attention DP (its default MoE communication), replicated without."""
        _positive("tensor_parallel_size", tp)
        mtp, ep = moe_tensor_parallel_size, moe_expert_parallel_size
        if mtp is None and ep is None:
            mtp, ep = tp, 1
        elif mtp is None or ep is None:
            mtp, ep = (tp // ep, ep) if mtp is None else (mtp, tp // mtp)
        _positive("moe_tensor_parallel_size", mtp)
        _positive("moe_expert_parallel_size", ep)
        if mtp * ep != tp:
            raise ConfigError(f"moe_tensor_parallel_size {mtp} x moe_expert_parallel_size {ep} must equal "
                              f"tensor_parallel_size {tp}")
        dp = tp if enable_attention_dp else 1
        return cls(tp // dp, dp, mtp, ep, "gather" if dp > 1 else "replicated", _imbalance(imbalance, ep),
                   "trtllm", ep > 1)


def _positive(flag: str, value: object) -> None:
    if not is_int(value) or value < 1:
        raise ConfigError(f"{flag} {show(value)}: expected a positive integer")


def _imbalance(value: float | None, ep: int) -> float:
    if value is None:
        return DEFAULT_IMBALANCE if ep > 1 else 1.0
    if ep == 1:
        raise ConfigError(f"--expert-load-imbalance {show(value)}: every GPU holds every expert (no expert "
                          "parallelism), so none is busier; drop it or add expert parallelism")
    if not (is_real(value) and 1 <= value < float("inf")):
        raise ConfigError(f"--expert-load-imbalance {show(value)}: expected the busiest expert-parallel rank's "
                          "tokens over the mean, a finite number >= 1")
    return float(value)


VLLM_FLAGS = ("enable_expert_parallel", "data_parallel_size", "all2all_backend")
SGLANG_FLAGS = ("ep_size", "enable_dp_attention", "dp_size", "moe_a2a_backend", "deepep_mode")
TRTLLM_FLAGS = ("enable_attention_dp", "moe_tensor_parallel_size", "moe_expert_parallel_size")  # its LLM API's


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def from_flags(engine: str | None, tp: int | None = None, expert_load_imbalance: float | None = None,
               **flags: object) -> Layout | None:
    """The layout an engine's own flags give (None: none given, the plain TP layout). `engine`: "sglang" reads
    SGLang's (`--tp-size` all the GPUs), "trtllm" TensorRT-LLM's `Mapping` where one of its options is given,
    anything else vLLM's; a flag of another engine is refused."""
    unknown = set(flags) - set(VLLM_FLAGS) - set(SGLANG_FLAGS) - set(TRTLLM_FLAGS)
    if unknown:
        raise TypeError(f"from_flags: unknown flags {sorted(unknown)}")
    given = {k: v for k, v in flags.items() if v is not None}
    mapping = {k: v for k, v in given.items() if k in TRTLLM_FLAGS}
    if mapping:
        other = sorted(set(given) - set(mapping))
        if engine != "trtllm" or other:
            raise ConfigError(f"{', '.join(sorted(mapping))}: TensorRT-LLM's options" + (
                f", not beside {_flag(other[0])}" if other else "; add --policy trtllm"))
        return Layout.trtllm(1 if tp is None else tp, bool(mapping.get("enable_attention_dp")),
                             mapping.get("moe_tensor_parallel_size"), mapping.get("moe_expert_parallel_size"),
                             expert_load_imbalance)
    sglang = engine == "sglang"
    for name in given:
        if sglang and name in VLLM_FLAGS:
            other = {"enable_expert_parallel": "--ep-size N", "data_parallel_size": "--enable-dp-attention "
                     "--dp-size N", "all2all_backend": "--moe-a2a-backend deepep"}[name]
            raise ConfigError(f"{_flag(name)} is vLLM's flag; SGLang's is {other}")
        if not sglang and name in SGLANG_FLAGS:
            other = {"ep_size": "--enable-expert-parallel", "dp_size": "--data-parallel-size"}.get(name)
            raise ConfigError(f"{_flag(name)} is an SGLang server option: add --policy sglang"
                              + (f" (vLLM's is {other})" if other else ""))
    if not given and expert_load_imbalance is None:
        return None
    tp = 1 if tp is None else tp
    if sglang:
        return Layout.sglang(tp, given.get("dp_size", 1), bool(given.get("enable_dp_attention")),
                             given.get("ep_size", 1), given.get("moe_a2a_backend", "none"),
                             given.get("deepep_mode", "auto"), expert_load_imbalance)
    return Layout.vllm(tp, given.get("data_parallel_size", 1), bool(given.get("enable_expert_parallel")),
                       given.get("all2all_backend", "allgather_reducescatter"), expert_load_imbalance)
