"""Model specs from a Hugging Face `config.json` and GPU specs from a datasheet TOML, built-in or a user's file.

Also the readers every input file outside trace loading shares: a bad file is refused with one line,
`FILE:LINE: field: what was expected` (`FILE: field: ...` where no line can be named), never a traceback.
"""

from __future__ import annotations

import fnmatch
import json
import math
import numbers
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from servesim.cost.kernels import KERNEL_FIELDS, KernelFit
from servesim.errors import ConfigError, ServesimError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# vLLM's dtype="auto" serves a float32 checkpoint in 16-bit, so every listed dtype serves at 2 bytes except fp8.
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 2, "float8_e4m3fn": 1, "fp8": 1}
# Architectures whose MLP is up -> activation -> down (two matrices); the rest are gated (gate, up, down).
NON_GATED_MODEL_TYPES = frozenset({"bloom", "gpt2", "gpt_neox", "gptj", "opt", "falcon", "gpt_bigcode", "mpt"})
# `tie_word_embeddings` when config.json omits it: PretrainedConfig's True, except where the architecture's config
# class passes False (transformers' LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig).
UNTIED_MODEL_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe"})
# A GPU TOML's keys (datasheet units) and its [efficiency] table's; anything else is refused as a likely typo.
GPU_KEYS = ("name", "description", "aliases", "dense_bf16_tflops", "dense_fp8_tflops", "dense_fp4_tflops",
            "memory_bandwidth_gb_s",
            "memory_gib", "interconnect_gb_s", "pcie_gb_s", "nvlink_domain", "network_gb_s", "efficiency", "kernels",
            "allreduce")
GPU_EFFICIENCY_KEYS = ("compute", "memory", "interconnect", "allreduce_latency_us", "kernel_latency_us",
                       "step_overhead_ms", "network", "network_latency_us")
# Between nodes, when a GPU file does not say (`[efficiency]` network, network_latency_us): NCCL send/recv between
# two DGX H100 nodes, one GPU each, over their 400 Gb/s ConnectX-7 NICs (../shared/peer-data/vidur/profiling/
# network/h100_dgx/send_recv.csv, the 994 rows with devices_per_node 1, 2 KiB..64 MiB): least squares on relative
# error gives 19.1 us + bytes / 35.9 GB/s, 0.72 of the NIC's 50 GB/s
NETWORK_EFFICIENCY, NETWORK_LATENCY_US = 0.72, 19.1
MAX_NVLINK_DOMAIN = 1 << 20
MAX_MEMORY_GIB = 2**30  # 1 EiB: keeps memory_bytes a float-convertible int
MAX_DIMENSION = 2**31 - 1  # a model dimension beyond any real one (the roofline's arithmetic stays finite)


# -- input files -----------------------------------------------------------------------------------------------


def show(value: Any, limit: int = 60) -> str:
    """A value as the file spells it (JSON), on one line and at most `limit` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_real(value: Any) -> bool:
    """A number (int or float, numpy's too), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    """A number (not a bool) that is finite as a float: NaN, inf, and an integer too large for a float are not."""
    try:
        return is_real(value) and math.isfinite(value)
    except OverflowError:  # JSON and TOML integers have no size limit
        return False


_PLAIN_KEY = re.compile(r"[\w-]+", re.ASCII)


def field_name(where: tuple[str | int, ...]) -> str:
    """("requests", 3, "prompt_len") -> "requests[3].prompt_len"; a key that is not a plain word is quoted, so
    a file's key (a newline, a dot, a space in it) cannot break the message's one line."""
    out = ""
    for part in where:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = part if _PLAIN_KEY.fullmatch(part) else json.dumps(part)
            out += f".{name}" if out else name
    return out


def read_input_bytes(path: Path, what: str, error: type[ServesimError] = ConfigError) -> bytes:
    """The file's bytes; a missing file, a directory or an unreadable one is one line naming `what` was expected."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such file; expected {what}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory; expected {what}") from None
    except ValueError:  # an embedded NUL in the path
        raise error(f"{show(str(path))}: not a valid path; expected {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or type(exc).__name__}); expected {what}") from None


def decode_input(path: Path, data: bytes, what: str, error: type[ServesimError] = ConfigError) -> str:
    """UTF-8 text (a BOM dropped); binary content (a NUL byte, invalid UTF-8) is refused with its line."""
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise error(f"{path}:{line}: binary content (a NUL byte at offset {nul}); expected {what}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{path}:{line}: binary content, not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                    f"{exc.start}); expected {what}") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_input_text(path: Path, what: str, error: type[ServesimError] = ConfigError) -> str:
    return decode_input(path, read_input_bytes(path, what, error), what, error)


def parse_json_input(path: Path, text: str, what: str, error: type[ServesimError] = ConfigError) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno}); expected {what}") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply; expected {what}") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise error(f"{path}: not readable JSON ({exc}); expected {what}") from None


def parse_toml_input(path: Path, text: str, what: str, error: type[ServesimError] = ConfigError) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        at = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if at:
            raise error(f"{path}:{at[1]}: not valid TOML: {msg[: at.start()].strip()} (column {at[2]}); "
                        f"expected {what}") from None
        raise error(f"{path}: not valid TOML: {msg}; expected {what}") from None
    except (RecursionError, ValueError) as exc:
        raise error(f"{path}: not readable TOML ({type(exc).__name__}); expected {what}") from None


def _json_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def json_offset(text: str, where: tuple[str | int, ...]) -> tuple[int, bool]:
    """(offset where the value at `where` starts in the JSON `text`, whether it was found); when a key or index is
    missing, the offset of the deepest container found. For error messages only: it re-scans the text."""
    dec = json.JSONDecoder()
    pos = _json_ws(text, 0)
    for step in where:
        if pos >= len(text):
            return pos, False
        found = None
        if text[pos] == "{" and isinstance(step, str):
            i = _json_ws(text, pos + 1)
            while i < len(text) and text[i] != "}":
                key, i = dec.raw_decode(text, i)
                i = _json_ws(text, _json_ws(text, i) + 1)  # past the ':'
                if key == step:
                    found = i  # the last duplicate wins, as in json.loads
                _, i = dec.raw_decode(text, i)
                i = _json_ws(text, i)
                if i < len(text) and text[i] == ",":
                    i = _json_ws(text, i + 1)
        elif text[pos] == "[" and isinstance(step, int):
            i, n = _json_ws(text, pos + 1), 0
            while i < len(text) and text[i] != "]":
                if n == step:
                    found = i
                    break
                _, i = dec.raw_decode(text, i)
                i = _json_ws(text, i)
                if i < len(text) and text[i] == ",":
                    i = _json_ws(text, i + 1)
                n += 1
        if found is None:
            return pos, False
        pos = found
    return pos, True


_TOML_HEADER = re.compile(r"^\s*\[\s*([^\]\[]+?)\s*\]")


def _toml_key(key: str) -> re.Pattern:
    return re.compile(r"""^\s*["']?""" + re.escape(key) + r"""["']?\s*=""")


def toml_line(text: str, where: tuple[str | int, ...]) -> int | None:
    """Best-effort line of `where` (a key path) in a TOML `text`: `key =` under its `[table]` (or `table.key =` at
    the top), else the table's header; None if neither is found."""
    keys = []
    for part in where:
        if isinstance(part, int):
            break
        keys.append(str(part))
    if not keys:
        return None
    *tables, key = keys
    table, header_line, current = ".".join(tables), None, ""
    own, dotted = _toml_key(key), _toml_key(f"{table}.{key}" if table else key)
    for n, line in enumerate(text.split("\n"), 1):
        head = _TOML_HEADER.match(line)
        if head:
            current = head[1].replace('"', "").replace("'", "")
            if current == table:
                header_line = n
            continue
        if (current == table and own.match(line)) or (current == "" and dotted.match(line)):
            return n
    return header_line


@dataclass(frozen=True, slots=True)
class InputDoc:
    """A parsed input file, to refuse a value in it with `FILE:LINE: field: what was expected`."""

    path: Path | str
    text: str | None = None
    error: type[ServesimError] = ConfigError
    kind: str = "json"  # json | toml
    prefix: tuple[str | int, ...] = ()  # the part of the file read (a multimodal config's text_config)

    def line(self, where: tuple[str | int, ...]) -> int | None:
        """The line of the value at `where`; for a missing key, of the object that lacks it (None at the top)."""
        if self.text is None:
            return None
        if self.kind == "toml":
            return toml_line(self.text, where)
        try:
            pos, found = json_offset(self.text, where)
        except (ValueError, IndexError, RecursionError):
            return None
        if not found and pos == _json_ws(self.text, 0):
            return None  # the whole document lacks it: no line says more than the file name
        return self.text.count("\n", 0, pos) + 1

    def fail(self, where: tuple[str | int, ...], expected: str,
             error: type[ServesimError] | None = None) -> NoReturn:
        where = (*self.prefix, *where)
        line = self.line(where)
        loc = f"{self.path}:{line}" if line else f"{self.path}"
        field = field_name(where)
        msg = f"{loc}: {field}: {expected}" if field else f"{loc}: {expected}"
        raise (error or self.error)(msg.replace("\n", "\\n").replace("\r", "\\r"))  # one line, whatever it quotes

    def fail_type(self, where: tuple[str | int, ...], value: Any, expected: str,
                  error: type[ServesimError] | None = None) -> NoReturn:
        self.fail(where, f"expected {expected}, got {show(value)}", error)


def check_keys(doc: InputDoc, table: dict, where: tuple[str | int, ...], known: tuple[str, ...],
               error: type[ServesimError] | None = None) -> None:
    """Refuse a key the format does not have (a typo would otherwise be silently ignored)."""
    for key in table:
        if key not in known:
            doc.fail((*where, key), f"unknown key; expected one of {', '.join(known)}", error)


# -- model specs -----------------------------------------------------------------------------------------------

MODEL_SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                     "intermediate_size", "vocab_size")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a decoder-only transformer, with Hugging Face `config.json` names."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int | None = None  # the model's context length: vLLM's default max_model_len
    torch_dtype: str = "bfloat16"
    num_local_experts: int = 0  # routed experts of each MoE layer; 0 = dense MLP
    num_experts_per_tok: int = 0
    gated_mlp: bool = True
    tie_word_embeddings: bool = False
    # MoE (Qwen3-MoE's, DeepSeek's, Qwen2-MoE's names): an expert's width (0: intermediate_size, as Mixtral and
    # MiniMax-M2 give it), the shared experts' total width (0: none), and the layers with a dense MLP of
    # intermediate_size instead of experts (DeepSeek's first_k_dense_replace; Qwen's mlp_only_layers and
    # decoder_sparse_step counted)
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    num_dense_layers: int = 0
    # Multi-head latent attention (DeepSeek-V2/V3's names; kv_lora_rank 0: not MLA): the KV latent's rank, the
    # query's (0: queries projected from the hidden states directly), and the per-head dims
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    # the checkpoint's own quantization (`quantization_config`, which vLLM and SGLang read without
    # --quantization): "fp8", and its weight_block_size for block-wise scales (DeepSeek-V3's [128, 128])
    quant_method: str = ""
    weight_block_size: tuple[int, int] | None = None
    # compressed-tensors' 4-bit integer weights (W4A16, symmetric, one 16-bit scale per group): the group size,
    # and whether only the routed experts are quantized (Kimi-K2's checkpoints leave attention, the shared
    # experts and the dense MLPs in 16 bits); 0: not such a checkpoint
    int4_group_size: int = 0
    int4_experts_only: bool = False
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # sliding-window attention (`layer_types`' "sliding_attention", gpt-oss's and Gemma's): the layers that attend
    # to the last `sliding_window` positions only (the query's own included), and hold no KV before them
    sliding_window: int = 0
    num_sliding_layers: int = 0
    # Gated DeltaNet linear attention (`layer_types`' "linear_attention", Qwen3-Next's and Qwen3.5's names): its
    # layers, heads and head dims, the causal conv's kernel, and the recurrent state's dtype (`mamba_ssm_dtype`);
    # a layer holds a conv state and a recurrent state per request, whatever its length
    num_linear_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    mamba_ssm_dtype: str = "float32"
    # full attention's output gate (Qwen3-Next, Qwen3.5: q_proj also projects a gate per head, `attn_output_gate`)
    attn_output_gate: bool = False
    # DeepSeek sparse attention (DSA: DeepSeek-V3.2's and GLM-5's names; 0: none): each query attends to the
    # `index_topk` cached tokens a lightning indexer of `index_n_heads` heads of `index_head_dim` picks, scoring
    # every cached token against its own small key (one `index_head_dim` key a token a layer)
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    # families of linear layers a quantized checkpoint keeps in 16 bits (`UNQUANTIZED_FAMILIES`; ModelOpt's NVFP4
    # checkpoints' `ignore`: nvidia/Qwen3.5-397B-A17B-NVFP4 keeps attention, linear attention, shared experts)
    unquantized: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """The rules `from_config` applies with the file's line numbers, for a spec built in Python."""

        def bad(field: str, value: Any, expected: str) -> NoReturn:
            raise ConfigError(f"model {self.name}: {field}: expected {expected}, got {show(value)}")

        for field in MODEL_SIZE_FIELDS:
            value = getattr(self, field)
            if not is_int(value) or value <= 0:
                bad(field, value, "a positive integer")
        if self.num_attention_heads % self.num_key_value_heads:
            bad("num_key_value_heads", self.num_key_value_heads,
                f"a divisor of num_attention_heads ({self.num_attention_heads})")
        mpe = self.max_position_embeddings
        if mpe is not None and (not is_int(mpe) or mpe <= 0):
            bad("max_position_embeddings", mpe, "a positive integer or None")
        if not isinstance(self.torch_dtype, str) or self.torch_dtype not in DTYPE_BYTES:
            bad("torch_dtype", self.torch_dtype, f"one of {', '.join(DTYPE_BYTES)}")
        for field in ("num_local_experts", "num_experts_per_tok"):
            if not is_int(getattr(self, field)) or getattr(self, field) < 0:
                bad(field, getattr(self, field), "an integer >= 0")
        if self.num_local_experts and not 0 < self.num_experts_per_tok <= self.num_local_experts:
            bad("num_experts_per_tok", self.num_experts_per_tok,
                f"an integer in 1..num_local_experts ({self.num_local_experts})")
        for field in ("moe_intermediate_size", "shared_expert_intermediate_size", "num_dense_layers", "kv_lora_rank",
                      "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if not is_int(getattr(self, field)) or getattr(self, field) < 0:
                bad(field, getattr(self, field), "an integer >= 0")
        if self.quant_method not in QUANT_METHODS:
            bad("quant_method", self.quant_method, "'' (the model's dtype), fp8, compressed-tensors or mxfp4")
        if (self.quant_method == "compressed-tensors") != (is_int(self.int4_group_size) and self.int4_group_size > 0):
            bad("int4_group_size", self.int4_group_size, "a group size > 0 exactly for compressed-tensors")
        wbs = self.weight_block_size
        if wbs is not None and not (isinstance(wbs, tuple) and len(wbs) == 2 and all(is_int(b) and b > 0
                                                                                  for b in wbs)):
            bad("weight_block_size", wbs, "None or two positive integers")
        if self.kv_lora_rank and not (self.qk_nope_head_dim and self.qk_rope_head_dim and self.v_head_dim):
            bad("qk_nope_head_dim", self.qk_nope_head_dim, "MLA's head dims (qk_nope, qk_rope, v) all > 0")
        for field in ("sliding_window", "num_sliding_layers"):
            if not is_int(getattr(self, field)) or getattr(self, field) < 0:
                bad(field, getattr(self, field), "an integer >= 0")
        if bool(self.sliding_window) != bool(self.num_sliding_layers) or \
                self.num_sliding_layers >= self.num_hidden_layers:
            bad("num_sliding_layers", self.num_sliding_layers, "sliding layers (fewer than num_hidden_layers) exactly "
                "when sliding_window > 0")
        for field in LINEAR_FIELDS:
            if not is_int(getattr(self, field)) or getattr(self, field) < 0:
                bad(field, getattr(self, field), "an integer >= 0")
        if self.num_linear_layers and not all(getattr(self, f) for f in LINEAR_FIELDS):
            bad("linear_num_key_heads", self.linear_num_key_heads, "Gated DeltaNet's heads, head dims and conv kernel "
                "all > 0 with linear-attention layers")
        if self.num_linear_layers + self.num_sliding_layers >= self.num_hidden_layers:
            bad("num_linear_layers", self.num_linear_layers, "fewer linear and sliding layers than num_hidden_layers "
                "(at least one full-attention layer)")
        for field in ("index_topk", "index_n_heads", "index_head_dim"):
            if not is_int(getattr(self, field)) or getattr(self, field) < 0:
                bad(field, getattr(self, field), "an integer >= 0")
        if self.index_topk and not (self.is_mla and self.index_n_heads and self.index_head_dim):
            bad("index_topk", self.index_topk, "0, or DSA's index_n_heads and index_head_dim > 0 on an MLA model")
        if self.mamba_ssm_dtype not in STATE_DTYPE_BYTES:
            bad("mamba_ssm_dtype", self.mamba_ssm_dtype, f"one of {', '.join(STATE_DTYPE_BYTES)}")
        if not isinstance(self.unquantized, tuple) or not set(self.unquantized) <= set(UNQUANTIZED_FAMILIES):
            bad("unquantized", self.unquantized, f"a tuple of {', '.join(UNQUANTIZED_FAMILIES)}")
        if self.quant_method == "mxfp4" and not self.num_local_experts:
            bad("quant_method", self.quant_method, "mxfp4 for a MoE model's experts (a model with experts)")
        if self.num_local_experts and self.num_dense_layers >= self.num_hidden_layers:
            bad("num_dense_layers", self.num_dense_layers, f"fewer than num_hidden_layers ({self.num_hidden_layers})")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.torch_dtype]

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def expert_intermediate_size(self) -> int:
        """One routed expert's width."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_parameters(self) -> int:
        """One layer's attention weights. MLA (DeepSeek-V3's modules): q_a_proj (hidden x q_lora_rank) and
        q_b_proj (q_lora_rank x heads x (nope + rope)), or q_proj; kv_a_proj_with_mqa (hidden x (kv_lora_rank +
        rope)); kv_b_proj (kv_lora_rank x heads x (nope + v)); o_proj (heads x v x hidden)."""
        h, heads = self.hidden_size, self.num_attention_heads
        if not self.is_mla:
            q = heads * (2 if self.attn_output_gate else 1)
            return h * (q + 2 * self.num_key_value_heads) * self.head_dim + heads * self.head_dim * h
        r, ql, qk = self.kv_lora_rank, self.q_lora_rank, self.qk_nope_head_dim + self.qk_rope_head_dim
        q = h * ql + ql * heads * qk if ql else h * heads * qk
        return (q + h * (r + self.qk_rope_head_dim) + r * heads * (self.qk_nope_head_dim + self.v_head_dim)
                + heads * self.v_head_dim * h + self.indexer_parameters)

    @property
    def indexer_parameters(self) -> int:
        """DSA's lightning indexer a layer: wq_b (q_lora_rank -> heads x head dim), wk (hidden -> head dim),
        weights_proj (hidden -> a weight a head)."""
        if not self.index_topk:
            return 0
        n, dh, h = self.index_n_heads, self.index_head_dim, self.hidden_size
        return (self.q_lora_rank or h) * n * dh + h * dh + h * n

    @property
    def num_full_attention_layers(self) -> int:
        """Layers that attend to every position before the query (and cache every token)."""
        return self.num_hidden_layers - self.num_sliding_layers - self.num_linear_layers

    @property
    def linear_conv_dim(self) -> int:
        """Gated DeltaNet's causal conv channels: q, k and v (`conv_dim` = 2 x key dim + value dim)."""
        return (2 * self.linear_num_key_heads * self.linear_key_head_dim
                + self.linear_num_value_heads * self.linear_value_head_dim)

    def linear_state_bytes(self, tp: int = 1) -> int:
        """One Gated DeltaNet layer's state per request on each of `tp` GPUs (heads split by TP): the conv state,
        conv_dim x (kernel - 1) in the model's dtype, and the recurrent state, a key x value matrix per value head
        in `mamba_ssm_dtype`."""
        conv = self.linear_conv_dim // tp * (self.linear_conv_kernel_dim - 1) * self.dtype_bytes
        ssm = (self.linear_num_value_heads // tp * self.linear_key_head_dim * self.linear_value_head_dim
               * STATE_DTYPE_BYTES[self.mamba_ssm_dtype])
        return conv + ssm

    @property
    def kv_bytes_per_token_layer(self) -> int:
        """KV cache bytes a token takes in one attention layer, in the model's dtype: K and V of every KV head, or
        MLA's one latent (kv_lora_rank + qk_rope_head_dim)."""
        per_layer = self.kv_lora_rank + self.qk_rope_head_dim if self.is_mla else \
            2 * self.num_key_value_heads * self.head_dim
        return per_layer * self.dtype_bytes + self.index_key_bytes

    @property
    def index_key_bytes(self) -> int:
        """DSA's indexer key a token a layer, as vLLM and SGLang cache it: FP8, with a 4-byte scale per 128."""
        return self.index_head_dim + self.index_head_dim // 128 * 4 if self.index_topk else 0

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes each token of a request adds, over the full-attention layers (a sliding-window layer holds
        at most its window's, whatever the request's length)."""
        return self.num_full_attention_layers * self.kv_bytes_per_token_layer

    @property
    def linear_attention_parameters(self) -> int:
        """One Gated DeltaNet layer's projections: in_proj_qkvz (hidden -> q, k, v and the output gate z),
        in_proj_ba (hidden -> a decay and a beta per value head), out_proj (value dim -> hidden); the conv and
        per-head scalars left out, as norms are."""
        h, vd = self.hidden_size, self.linear_num_value_heads * self.linear_value_head_dim
        return h * (self.linear_conv_dim + vd) + h * 2 * self.linear_num_value_heads + vd * h

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is experts (0 for a dense model)."""
        return self.num_hidden_layers - self.num_dense_layers if self.num_local_experts else 0

    @property
    def num_parameters(self) -> int:
        """Weights counted from the shapes (norms and biases omitted: < 0.1 % of any listed model)."""
        h, L, lm = self.hidden_size, self.num_hidden_layers, self.num_moe_layers
        attn = self.attention_parameters
        dense = self.mlp_matrices * h * self.intermediate_size
        moe = (self.num_local_experts * self.mlp_matrices * h * self.expert_intermediate_size  # routed experts
               + h * self.num_local_experts  # the router
               + self.mlp_matrices * h * self.shared_expert_intermediate_size)
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        linear = self.num_linear_layers
        return (L - linear) * attn + linear * self.linear_attention_parameters + (L - lm) * dense + lm * moe + embed

    @property
    def num_active_parameters(self) -> int:
        """Weights one token goes through: its top-k routed experts instead of all of them."""
        lm, k = self.num_moe_layers, self.num_experts_per_tok
        idle = self.num_local_experts - k
        return self.num_parameters - lm * idle * self.mlp_matrices * self.hidden_size * self.expert_intermediate_size

    @classmethod
    def from_config(cls, config: dict, name: str, source: str = "config.json", text: str | None = None) -> ModelSpec:
        """Read a Hugging Face config dict; BLOOM's `n_embed`/`n_layer`/`n_head` are accepted as HF does. `text`,
        the file's JSON, lets an error name its line."""
        doc = InputDoc(source, text)
        if not isinstance(config, dict):
            doc.fail_type((), config, "a JSON object (a Hugging Face config.json)")
        if isinstance(config.get("text_config"), dict) and "hidden_size" not in config:
            # a multimodal model's language model (transformers' `get_text_config`: Kimi-K2.5, Llama 4, Qwen-VL);
            # its vision tower's weights are not counted
            # (the composite config's tie_word_embeddings where the text config has none: Qwen3.5's)
            config = {"quantization_config": config.get("quantization_config"),
                      "tie_word_embeddings": config.get("tie_word_embeddings"), **config["text_config"]}
            doc = InputDoc(source, text, prefix=("text_config",))

        def key_of(*keys: str) -> str | None:
            return next((k for k in keys if config.get(k) is not None), None)  # null counts as absent, as in HF

        def integer(*keys: str, minimum: int = 1, default: int | None = None, label: str | None = None,
                    maximum: int | None = MAX_DIMENSION) -> int:
            key = key_of(*keys)
            if key is None:
                if default is not None:
                    return default
                label = label or keys[0]
                others = [k for k in keys if k != label]
                also = f" (also read as {' or '.join(others)})" if others else ""
                doc.fail((label,), f"missing field; expected an integer >= {minimum}{also}")
            value = config[key]
            if not is_int(value) or value < minimum:
                doc.fail_type((key,), value, f"an integer >= {minimum}")
            if maximum is not None and value > maximum:
                doc.fail_type((key,), value, f"an integer in {minimum}..{maximum}")
            return int(value)

        # BloomConfig: `n_embed`, when given, overrides `hidden_size` (it is the older name the checkpoints use).
        hidden = integer("n_embed", "hidden_size", label="hidden_size")
        heads = integer("num_attention_heads", "n_head")
        layers = integer("num_hidden_layers", "n_layer")
        kv_heads = integer("num_key_value_heads", default=heads)
        if heads % kv_heads:
            doc.fail_type(("num_key_value_heads",), kv_heads, f"a divisor of num_attention_heads ({heads})")
        if key_of("head_dim") is None and heads > hidden:
            doc.fail_type((key_of("num_attention_heads", "n_head"),), heads,
                          f"at most hidden_size ({hidden}) heads, as head_dim = hidden_size // num_attention_heads")
        head_dim = integer("head_dim", default=hidden // heads)
        # MLP width when absent: BLOOM/GPT-style 4 x hidden (BLOOM has no intermediate_size field).
        inter = integer("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)
        vocab = integer("vocab_size")
        mpe = integer("max_position_embeddings", default=0, maximum=None) or None
        _refuse_unmodelled(doc, config)
        window = _sliding_layers(doc, config, integer, layers) | _linear_layers(doc, config, integer, layers)
        # routed experts under Mixtral's and MiniMax's name, Qwen-MoE's, DeepSeek's
        experts_key = key_of("num_local_experts", "num_experts", "n_routed_experts") or "num_local_experts"
        experts = integer(experts_key, minimum=0, default=0)
        per_tok = integer("num_experts_per_tok", minimum=0, default=0)
        if experts and not 0 < per_tok <= experts:
            where = ("num_experts_per_tok",)
            expected = f"an integer in 1..{experts_key} ({experts})"
            if key_of("num_experts_per_tok") is None:
                doc.fail(where, f"missing field; expected {expected}")
            doc.fail_type(where, per_tok, expected)
        moe_inter = integer("moe_intermediate_size", minimum=0, default=0) if experts else 0
        shared, dense_layers = _shared_and_dense(doc, config, integer, experts, moe_inter or inter, layers)
        quant = _quantization_config(doc, config)
        mla: dict = {}
        if key_of("kv_lora_rank") is not None:  # DeepSeek-V2/V3's multi-head latent attention
            mla = {"kv_lora_rank": integer("kv_lora_rank"),
                   "q_lora_rank": integer("q_lora_rank", minimum=0, default=0),
                   **{k: integer(k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}}
            if key_of("index_topk") is not None:  # DeepSeek sparse attention's indexer (DeepSeek-V3.2, GLM-5)
                mla |= {k: integer(k) for k in ("index_topk", "index_n_heads", "index_head_dim")}
        elif key_of("index_topk") is not None:
            doc.fail(("index_topk",), "DeepSeek sparse attention without MLA: expected kv_lora_rank and the MLA "
                     "head dims beside it")
        model_type = config.get("model_type") or ""
        if not isinstance(model_type, str):
            doc.fail_type(("model_type",), model_type, "a string")
        dtype_key = key_of("torch_dtype", "dtype")  # transformers >= 4.56 writes `dtype`
        dtype = config[dtype_key] if dtype_key else "bfloat16"
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            doc.fail_type((dtype_key or "torch_dtype",), dtype, f"one of {', '.join(DTYPE_BYTES)}")
        tied = config.get("tie_word_embeddings")
        if tied is None:
            tied = model_type not in UNTIED_MODEL_TYPES
        elif not isinstance(tied, bool):
            doc.fail_type(("tie_word_embeddings",), tied, "true or false")
        try:
            return cls(
                name=name, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv_heads, head_dim=head_dim, intermediate_size=inter, vocab_size=vocab,
                max_position_embeddings=mpe, torch_dtype=dtype, num_local_experts=experts,
                num_experts_per_tok=per_tok, gated_mlp=model_type not in NON_GATED_MODEL_TYPES,
                tie_word_embeddings=tied, moe_intermediate_size=moe_inter, shared_expert_intermediate_size=shared,
                num_dense_layers=dense_layers, **mla, **quant, **window,
            )
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


# Keys of architectures whose attention servesim does not model yet: a config that sets one is refused, naming
# it, rather than read as the plain attention it is not.
UNMODELLED_KEYS = {
    "attention_chunk_size": "chunked local attention (Llama 4)",
    "interleave_moe_layer_step": "interleaved MoE layers (Llama 4)",
}
ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention")
LINEAR_FIELDS = ("num_linear_layers", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                 "linear_value_head_dim", "linear_conv_kernel_dim")
# the recurrent state's dtypes (`mamba_ssm_dtype`), bytes an element
STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
QUANT_METHODS = ("", "fp8", "compressed-tensors", "mxfp4", "modelopt_fp4")
UNQUANTIZED_FAMILIES = ("attention", "linear_attention", "shared_experts", "dense")


def _refuse_unmodelled(doc: InputDoc, config: dict) -> None:
    for key, what in UNMODELLED_KEYS.items():
        if config.get(key) is not None:
            doc.fail((key,), f"{what} is not modelled yet; expected a config without {key}")
    kinds = config.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
            doc.fail_type(("layer_types",), kinds, "a list of layer kinds")
        other = sorted(set(kinds) - set(ATTENTION_LAYER_TYPES))
        if other:
            doc.fail(("layer_types",), f"{other[0]} layers are not modelled yet; expected only "
                     f"{', '.join(ATTENTION_LAYER_TYPES)}")


def _sliding_layers(doc: InputDoc, config: dict, integer, layers: int) -> dict:
    """`layer_types`' sliding-window layers (transformers' GptOssConfig, Gemma's) and their `sliding_window`;
    a config without layer_types has none (Mistral-7B's `sliding_window` alone, as vLLM reads it for its
    layers, is left out here: servesim reads it as full attention)."""
    kinds = config.get("layer_types")
    if kinds is None:
        return {}
    if len(kinds) != layers:
        doc.fail_type(("layer_types",), kinds, f"one kind per layer (num_hidden_layers {layers})")
    sliding = kinds.count("sliding_attention")
    if not sliding:
        return {}
    if sliding == layers:
        doc.fail(("layer_types",), "every layer sliding_attention: expected at least one full_attention layer "
                 "(vLLM's hybrid KV cache manager needs one)")
    return {"sliding_window": integer("sliding_window"), "num_sliding_layers": sliding}


def _linear_layers(doc: InputDoc, config: dict, integer, layers: int) -> dict:
    """Gated DeltaNet layers (Qwen3-Next's and Qwen3.5's configs): `layer_types`' linear_attention, or, without
    layer_types, every layer but each `full_attention_interval`-th (transformers' Qwen3NextConfig default); their
    `linear_*` shapes and `mamba_ssm_dtype` (absent: the model's dtype), and full attention's `attn_output_gate`
    (absent: true where there are linear layers, as Qwen3-Next's attention always gates)."""
    kinds = config.get("layer_types")
    if kinds is not None:
        linear = kinds.count("linear_attention")
    elif config.get("linear_num_key_heads") is not None:
        interval = integer("full_attention_interval", maximum=layers)
        linear = layers - layers // interval
    else:
        return {}
    if not linear:
        return {}
    if linear == layers:
        doc.fail(("layer_types",), "every layer linear_attention: expected at least one full_attention layer")
    out = {k: integer(k) for k in LINEAR_FIELDS[1:]}
    dtype = config.get("mamba_ssm_dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if dtype not in STATE_DTYPE_BYTES:
        doc.fail_type(("mamba_ssm_dtype",), dtype, f"one of {', '.join(STATE_DTYPE_BYTES)}")
    gate = config.get("attn_output_gate", True)
    if not isinstance(gate, bool):
        doc.fail_type(("attn_output_gate",), gate, "true or false")
    return out | {"num_linear_layers": linear, "mamba_ssm_dtype": dtype, "attn_output_gate": gate}


def _quantization_config(doc: InputDoc, config: dict) -> dict:
    """The checkpoint's `quantization_config`, as vLLM reads it: quant_method fp8 (`Fp8Config.from_config`:
    weight_block_size [n, k] for block-wise scales, absent for per-tensor) or compressed-tensors (`_int4_config`).
    Any other method is refused."""
    q = config.get("quantization_config")
    if q is None:
        return {}
    if not isinstance(q, dict):
        doc.fail_type(("quantization_config",), q, "an object")
    if q.get("quant_method") == "compressed-tensors":
        return _int4_config(doc, q)
    if q.get("quant_method") == "mxfp4":
        return _mxfp4_config(doc, q)
    if q.get("quant_method") == "modelopt":
        return _modelopt_config(doc, q, config)
    if q.get("quant_method") != "fp8":
        doc.fail(("quantization_config", "quant_method"), f"{show(q.get('quant_method'))} checkpoints are not "
                 "modelled yet; expected fp8, compressed-tensors, mxfp4 or modelopt (NVFP4)")
    block = q.get("weight_block_size")
    if block is not None and not (isinstance(block, list) and len(block) == 2 and all(is_int(b) and b > 0
                                                                                     for b in block)):
        doc.fail_type(("quantization_config", "weight_block_size"), block, "two positive integers")
    return {"quant_method": "fp8", "weight_block_size": tuple(block) if block else None}


# The modules an MXFP4 checkpoint leaves in 16 bits, as gpt-oss's `modules_to_not_convert` names them: attention,
# the router, the embedding and the LM head (the experts alone are MXFP4)
MXFP4_UNCONVERTED = ("model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head")


def _mxfp4_config(doc: InputDoc, q: dict) -> dict:
    """MXFP4 (OCP microscaling: 4-bit E2M1 weights, one E8M0 scale per 32), as vLLM's `Mxfp4Config` serves it:
    the MoE experts only, every other module in 16 bits (the checkpoint's `modules_to_not_convert`, which must
    keep attention, the router, the embedding and the LM head out)."""
    kept = q.get("modules_to_not_convert") or []
    if not isinstance(kept, list) or not set(MXFP4_UNCONVERTED) <= set(kept):
        doc.fail(("quantization_config", "modules_to_not_convert"), f"expected at least {', '.join(MXFP4_UNCONVERTED)}"
                 " (MXFP4 experts, everything else in 16 bits: the one MXFP4 scheme modelled)")
    return {"quant_method": "mxfp4"}


def _modelopt_config(doc: InputDoc, q: dict, config: dict) -> dict:
    """ModelOpt's NVFP4 checkpoints (`quant_method` modelopt, `quant_algo` NVFP4; vLLM's `--quantization
    modelopt_fp4`): 4-bit weights and activations with an FP8 scale per 16; its `ignore` globs (fnmatch, as
    ModelOpt writes them) tried on a module of each family at the first layer of its kind keep that family in 16
    bits. The routed experts must be 4-bit (the one split modelled beside every linear layer)."""
    if q.get("quant_algo") != "NVFP4":
        doc.fail(("quantization_config", "quant_algo"), f"{show(q.get('quant_algo'))}: only NVFP4 is modelled yet")
    ignore = q.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        doc.fail_type(("quantization_config", "ignore"), ignore, "a list of module name patterns")
    kinds = config.get("layer_types") or []
    first = {kind: kinds.index(kind) if kind in kinds else 0 for kind in ("full_attention", "linear_attention")}
    dense = int(config.get("first_k_dense_replace") or 0)
    moe = dense if dense else 0
    modules = {"attention": f"layers.{first['full_attention']}.self_attn.q_proj",
               "linear_attention": f"layers.{first['linear_attention']}.linear_attn.in_proj_qkvz",
               "shared_experts": f"layers.{moe}.mlp.shared_expert.gate_proj",
               "dense": "layers.0.mlp.gate_proj", "experts": f"layers.{moe}.mlp.experts.0.gate_proj"}

    def kept(module: str) -> bool:
        return any(fnmatch.fnmatchcase(f"{prefix}{module}", p) for p in ignore
                   for prefix in ("model.", "model.language_model."))

    if kept(modules["experts"]):
        doc.fail(("quantization_config", "ignore"), "routed experts kept in 16 bits: only NVFP4 experts are "
                 "modelled")
    return {"quant_method": "modelopt_fp4",
            "unquantized": tuple(f for f in UNQUANTIZED_FAMILIES if kept(modules[f]))}


# A module of each family, named as vLLM's DeepSeek-style models name them, to try a checkpoint's `ignore` on
INT4_FAMILIES = {"attention": "model.layers.1.self_attn.q_proj", "dense": "model.layers.0.mlp.gate_proj",
                 "shared": "model.layers.1.mlp.shared_experts.gate_proj",
                 "experts": "model.layers.1.mlp.experts.0.gate_proj"}


def _int4_config(doc: InputDoc, q: dict) -> dict:
    """compressed-tensors as vLLM's `CompressedTensorsConfig` reads it, for the one scheme modelled: a single
    config group of symmetric 4-bit integer weights quantized per group, activations left in 16 bits (W4A16,
    its `pack-quantized` format); `ignore` (exact names, or `re:` patterns matched from the name's start) keeps
    some modules in 16 bits: every linear layer quantized, or the routed experts only."""
    where = ("quantization_config", "config_groups")
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        doc.fail(where, "expected one config group (one quantization scheme)")
    (name, group), = groups.items()
    w = group.get("weights") if isinstance(group, dict) else None
    ok = isinstance(w, dict) and w.get("num_bits") == 4 and w.get("type") == "int" and w.get("strategy") == "group" \
        and is_int(w.get("group_size")) and w["group_size"] > 0 and w.get("symmetric", True) is True
    if not ok or group.get("input_activations") is not None:
        doc.fail((*where, name), "only 4-bit symmetric integer weights per group with 16-bit activations (W4A16) "
                 "are modelled yet")
    ignore = q.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        doc.fail_type(("quantization_config", "ignore"), ignore, "a list of module names or re: patterns")

    def ignored(module: str) -> bool:
        return any(re.match(p[3:], module) if p.startswith("re:") else p == module for p in ignore)

    kept = {family for family, module in INT4_FAMILIES.items() if not ignored(module)}
    if kept not in (set(INT4_FAMILIES), {"experts"}):
        doc.fail(("quantization_config", "ignore"), f"4-bit {', '.join(sorted(kept)) or 'nothing'}: only every "
                 "linear layer or the routed experts alone are modelled yet")
    return {"quant_method": "compressed-tensors", "int4_group_size": w["group_size"], "int4_experts_only":
            kept == {"experts"}}


def _shared_and_dense(doc: InputDoc, config: dict, integer, experts: int, expert_width: int,
                      layers: int) -> tuple[int, int]:
    """(the shared experts' total width, the layers with a dense MLP) of a MoE config, under each family's keys:
    Qwen2-MoE's `shared_expert_intermediate_size`, DeepSeek's `n_shared_experts` (each an expert's width),
    `first_k_dense_replace` and `moe_layer_freq` (layer i has experts from there when i % freq == 0), MiniMax-M2's
    `shared_intermediate_size`, Qwen-MoE's `mlp_only_layers` and `decoder_sparse_step` (layer i has experts
    when i is not listed and (i + 1) % step == 0)."""
    if not experts:
        return 0, 0
    shared = integer("shared_expert_intermediate_size", minimum=0, default=0)
    shared += integer("shared_intermediate_size", minimum=0, default=0)
    shared += integer("n_shared_experts", minimum=0, default=0) * expert_width
    first_dense = integer("first_k_dense_replace", minimum=0, default=0, maximum=layers - 1)
    step = integer("decoder_sparse_step", minimum=1, default=1, maximum=layers)
    freq = integer("moe_layer_freq", minimum=1, default=1, maximum=layers)  # DeepSeek's: i % freq == 0
    only = config.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(is_int(i) and 0 <= i < layers for i in only):
        doc.fail_type(("mlp_only_layers",), only, f"a list of layer indices in 0..{layers - 1}")
    sparse = [i for i in range(first_dense, layers) if i not in only and (i + 1) % step == 0 and i % freq == 0]
    if not sparse:
        doc.fail(("mlp_only_layers",), "no layer has experts; expected a MoE layer (or no experts)")
    return shared, layers - len(sparse)


# -- GPU specs -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator's datasheet numbers (SI units) and the default efficiencies the roofline applies to them."""

    name: str
    description: str
    peak_flops: float  # dense bf16, FLOP/s
    memory_bandwidth: float  # bytes/s
    memory_bytes: int
    interconnect_bandwidth: float  # bytes/s, both directions together, as datasheets state it
    pcie_bandwidth: float  # bytes/s, both directions together
    compute_efficiency: float = 0.7
    memory_efficiency: float = 0.8
    interconnect_efficiency: float = 0.55
    allreduce_latency: float = 30e-6  # seconds
    kernel_latency: float = 5e-6  # seconds
    step_overhead: float = 1e-3  # seconds
    aliases: tuple[str, ...] = ()
    fp8_flops: float | None = None  # dense FP8 tensor-core FLOP/s; None: no FP8 tensor cores (A100)
    fp4_flops: float | None = None  # dense FP4 (NVFP4) tensor-core FLOP/s; None: none (before Blackwell)
    kernels: KernelFit | None = None  # per-operator constants (the file's [kernels]); None: `KernelFit.uniform`
    # NCCL all-reduce protocols per TP size (the file's [allreduce]): ((tp, ((latency s, efficiency), ...)), ...);
    # a TP size not listed gets (allreduce_latency, interconnect_efficiency).
    allreduce_by_tp: tuple[tuple[int, tuple[tuple[float, float], ...]], ...] = ()
    # The fabric (`servesim.cost.comm`): GPUs that reach one another over `interconnect_bandwidth` (an HGX
    # board's 8, an NVL72 rack's 72), and each GPU's network link to other nodes (its NIC, bytes/s one way)
    nvlink_domain: int = 8
    network_bandwidth: float = 50e9
    network_efficiency: float = NETWORK_EFFICIENCY
    network_latency: float = NETWORK_LATENCY_US * 1e-6  # seconds

    def __post_init__(self) -> None:
        """The rules `from_toml` applies with the file's line numbers, for a spec built in Python (NaN refused)."""

        def bad(field: str, expected: str) -> NoReturn:
            raise ConfigError(f"gpu {self.name}: {field}: expected {expected}, got {show(getattr(self, field))}")

        for field in ("peak_flops", "memory_bandwidth", "interconnect_bandwidth", "pcie_bandwidth",
                      "network_bandwidth"):
            value = getattr(self, field)
            if not (is_finite(value) and value > 0):
                bad(field, "a finite number > 0")
        if not is_int(self.memory_bytes) or not 0 < self.memory_bytes <= MAX_MEMORY_GIB * 2**30:
            bad("memory_bytes", f"an integer in (0, {MAX_MEMORY_GIB * 2**30}]")
        for field in ("compute_efficiency", "memory_efficiency", "interconnect_efficiency", "network_efficiency"):
            value = getattr(self, field)
            if not (is_real(value) and 0 < value <= 1):
                bad(field, "a fraction in (0, 1]")
        if not (is_int(self.nvlink_domain) and 1 <= self.nvlink_domain <= MAX_NVLINK_DOMAIN):
            bad("nvlink_domain", f"an integer in [1, {MAX_NVLINK_DOMAIN}]")
        for field in ("allreduce_latency", "kernel_latency", "step_overhead", "network_latency"):
            value = getattr(self, field)
            if not (is_finite(value) and value >= 0):
                bad(field, "a finite number of seconds >= 0")
        if not isinstance(self.aliases, tuple) or not all(isinstance(a, str) for a in self.aliases):
            bad("aliases", "a tuple of strings")
        for field in ("fp8_flops", "fp4_flops"):
            value = getattr(self, field)
            if value is not None and not (is_finite(value) and value > 0):
                bad(field, "a finite number > 0 or None")
        for tp, protocols in self.allreduce_by_tp:
            if not (is_int(tp) and tp >= 2 and protocols and all(
                    is_finite(lat) and lat >= 0 and is_real(eff) and 0 < eff <= 1 for lat, eff in protocols)):
                bad("allreduce_by_tp", "(tp >= 2, ((latency s >= 0, efficiency in (0, 1]), ...)) pairs")

    @property
    def kernel_fit(self) -> KernelFit:
        """The per-operator constants: the file's, or one efficiency and floor for all (`KernelFit.uniform`)."""
        if self.kernels is not None:
            return self.kernels
        return KernelFit.uniform(self.compute_efficiency, self.memory_efficiency, self.kernel_latency)

    def allreduce_protocols(self, tp: int) -> tuple[tuple[float, float], ...]:
        """NCCL's (latency s, efficiency) protocols at this TP size: the fitted ones where the file has them."""
        return dict(self.allreduce_by_tp).get(tp, ((self.allreduce_latency, self.interconnect_efficiency),))

    @classmethod
    def from_toml(cls, data: dict, source: str, text: str | None = None) -> GpuSpec:
        """Datasheet units in the file (TFLOP/s, GB/s, GiB, us, ms); SI units in the spec. `text`, the file's TOML,
        lets an error name its line."""
        doc = InputDoc(source, text, kind="toml")
        check_keys(doc, data, (), GPU_KEYS)
        eff = data.get("efficiency", {})
        if not isinstance(eff, dict):
            doc.fail_type(("efficiency",), eff, "a table [efficiency]")
        check_keys(doc, eff, ("efficiency",), GPU_EFFICIENCY_KEYS)

        def number(*where: str, default: float | None = None, kind: str = "positive") -> float:
            table = eff if where[0] == "efficiency" else data
            value = table.get(where[-1], default)
            expected = {"positive": "a finite number > 0", "fraction": "a fraction in (0, 1]",
                        "time": "a finite number >= 0", "memory": f"a number in (0, {MAX_MEMORY_GIB}]"}[kind]
            if value is None:
                doc.fail(where, f"missing field; expected {expected}")
            ok = is_finite(value) and (value >= 0 if kind == "time" else value > 0)
            if not ok or (kind == "fraction" and value > 1) or (kind == "memory" and value > MAX_MEMORY_GIB):
                doc.fail_type(where, value, expected)
            return float(value)

        for key in ("name", "description"):
            if not isinstance(data.get(key, ""), str):
                doc.fail_type((key,), data[key], "a string")
        aliases = data.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            doc.fail_type(("aliases",), aliases, "a list of strings")
        fields = dict(
            name=data.get("name") or Path(source).stem,
            description=data.get("description", ""),
            peak_flops=number("dense_bf16_tflops") * 1e12,
            memory_bandwidth=number("memory_bandwidth_gb_s") * 1e9,
            memory_bytes=int(number("memory_gib", kind="memory") * 2**30),
            interconnect_bandwidth=number("interconnect_gb_s") * 1e9,
            pcie_bandwidth=number("pcie_gb_s") * 1e9,
            compute_efficiency=number("efficiency", "compute", default=0.7, kind="fraction"),
            memory_efficiency=number("efficiency", "memory", default=0.8, kind="fraction"),
            interconnect_efficiency=number("efficiency", "interconnect", default=0.55, kind="fraction"),
            allreduce_latency=number("efficiency", "allreduce_latency_us", default=30.0, kind="time") * 1e-6,
            kernel_latency=number("efficiency", "kernel_latency_us", default=5.0, kind="time") * 1e-6,
            step_overhead=number("efficiency", "step_overhead_ms", default=1.0, kind="time") * 1e-3,
            aliases=tuple(aliases),
            fp8_flops=number("dense_fp8_tflops") * 1e12 if "dense_fp8_tflops" in data else None,
            fp4_flops=number("dense_fp4_tflops") * 1e12 if "dense_fp4_tflops" in data else None,
            kernels=_kernels_table(doc, data, source),
            allreduce_by_tp=_allreduce_table(doc, data),
            nvlink_domain=_domain(doc, data),
            network_bandwidth=number("network_gb_s", default=50.0) * 1e9,
            network_efficiency=number("efficiency", "network", default=NETWORK_EFFICIENCY, kind="fraction"),
            network_latency=number("efficiency", "network_latency_us", default=NETWORK_LATENCY_US,
                                   kind="time") * 1e-6,
        )
        try:  # a unit conversion can still under- or overflow (1e-320 TFLOP/s)
            return cls(**fields)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def _domain(doc: InputDoc, data: dict) -> int:
    """`nvlink_domain`: the GPUs one NVLink (or Infinity Fabric, PCIe switch) domain holds; 8 when not given."""
    value = data.get("nvlink_domain", 8)
    if not (is_int(value) and 1 <= value <= MAX_NVLINK_DOMAIN):
        doc.fail_type(("nvlink_domain",), value, f"an integer in [1, {MAX_NVLINK_DOMAIN}] (GPUs per NVLink domain)")
    return int(value)


def _number_list(doc: InputDoc, value: Any, where: tuple[str | int, ...], fields: tuple[str, ...]) -> list[float]:
    """A TOML array of len(fields) numbers: efficiencies in (0, 1], the rest >= 0."""
    spelled = f"[{', '.join(fields)}]"
    if not isinstance(value, list) or len(value) != len(fields):
        doc.fail_type(where, value, f"an array {spelled}")
    for i, (field, v) in enumerate(zip(fields, value)):
        eff = field == "efficiency"
        if not (is_finite(v) and (0 < v <= 1 if eff else v >= 0)):
            doc.fail_type((*where, i), v, f"{field} {'a fraction in (0, 1]' if eff else 'a finite number >= 0'}"
                                          f" (of {spelled})")
    return [float(v) for v in value]


def _kernels_table(doc: InputDoc, data: dict, source: str) -> KernelFit | None:
    """[kernels]: every operator of `KERNEL_FIELDS` or none (a partial fit would mix two models silently)."""
    table = data.get("kernels")
    if table is None:
        return None
    if not isinstance(table, dict):
        doc.fail_type(("kernels",), table, "a table [kernels]")
    check_keys(doc, table, ("kernels",), tuple(KERNEL_FIELDS))
    for name, fields in KERNEL_FIELDS.items():
        if name not in table:
            doc.fail(("kernels", name), f"missing field; expected [{', '.join(fields)}] (all of "
                                        f"{', '.join(KERNEL_FIELDS)}, or no [kernels] table)")
        table[name] = _number_list(doc, table[name], ("kernels", name), fields)
    return KernelFit.from_file(table, source)


def _allreduce_table(doc: InputDoc, data: dict) -> tuple:
    """[allreduce]: `tp2 = [[latency_us, efficiency], ...]` per TP size."""
    table = data.get("allreduce", {})
    if not isinstance(table, dict):
        doc.fail_type(("allreduce",), table, "a table [allreduce]")
    out = []
    for key, protocols in table.items():
        tp = key[2:] if key.startswith("tp") else ""
        if not (tp.isdigit() and int(tp) >= 2):
            doc.fail(("allreduce", key), "unknown key; expected tpN (N >= 2 GPUs), e.g. tp2")
        if not isinstance(protocols, list) or not protocols:
            doc.fail_type(("allreduce", key), protocols, "a non-empty array of [latency_us, efficiency]")
        pairs = [_number_list(doc, p, ("allreduce", key, i), ("latency_us", "efficiency"))
                 for i, p in enumerate(protocols)]
        out.append((int(tp), tuple((lat * 1e-6, eff) for lat, eff in pairs)))
    return tuple(sorted(out))


def _data_dir(kind: str):
    return resources.files("servesim") / "data" / kind


def builtin_models() -> list[str]:
    return sorted(p.name[: -len(".json")] for p in _data_dir("models").iterdir() if p.name.endswith(".json"))


def builtin_for_hf_id(model_id: str) -> str | None:
    """The built-in model a Hugging Face id names (`meta-llama/Llama-3.1-8B-Instruct` -> `llama-3.1-8b`): the one
    whose config.json was read from that repository (its `_source`), an `-Instruct` or `-chat` variant (and the
    `-hf` conversions) sharing its base's shape; None when servesim has none."""
    def base(repo: str) -> str:
        return re.sub(r"-(instruct|chat)(?=-|$)", "", repo.strip().lower().removesuffix("-hf"))

    for name in builtin_models():
        source = json.loads((_data_dir("models") / f"{name}.json").read_text()).get("_source", "")
        repo = re.match(r"https://huggingface\.co/([^/]+/[^/]+)/", source)
        if repo and base(repo[1]) == base(model_id):
            return name
    return None


def builtin_gpus() -> dict[str, GpuSpec]:
    gpus = {}
    for p in sorted(_data_dir("gpus").iterdir(), key=lambda p: p.name):
        if p.name.endswith(".toml"):
            text = p.read_text()
            gpus[p.name[: -len(".toml")]] = GpuSpec.from_toml(tomllib.loads(text), p.name, text)
    return gpus


def _path_kind(path: Path) -> str:
    """"file", "dir", or "" (nothing there, or not a usable path: too long, an embedded NUL)."""
    try:
        return "file" if path.is_file() else "dir" if path.is_dir() else ""
    except (OSError, ValueError):
        return ""


def load_model(spec: str | ModelSpec) -> ModelSpec:
    """A built-in name (`llama-3-8b`) or a path to a Hugging Face `config.json`."""
    if isinstance(spec, ModelSpec):
        return spec
    if not isinstance(spec, str):
        raise ConfigError(f"model: expected a built-in name or a path to a config.json, got {show(spec)}")
    name = spec.lower()
    if name in builtin_models():
        text = (_data_dir("models") / f"{name}.json").read_text()
        return ModelSpec.from_config(json.loads(text), name, f"{name}.json", text)
    path = Path(spec)
    kind = _path_kind(path)
    if kind != "file":
        if kind == "dir":
            raise ConfigError(f"{path}: is a directory; expected a Hugging Face config.json file, e.g. "
                              f"{path / 'config.json'}")
        raise ConfigError(f"unknown model {spec!r}: not a file; built-in models: {', '.join(builtin_models())}")
    what = "a Hugging Face config.json (a JSON object)"
    text = read_input_text(path, what)
    config = parse_json_input(path, text, what)
    name = (path.parent.name or path.resolve().parent.name) if path.name == "config.json" else path.stem
    return ModelSpec.from_config(config, name, str(path), text)


def load_gpu(spec: str | GpuSpec) -> GpuSpec:
    """A built-in name or alias (`h100` -> `h100-80gb`) or a path to a TOML file shaped like the built-ins."""
    if isinstance(spec, GpuSpec):
        return spec
    if not isinstance(spec, str):
        raise ConfigError(f"gpu: expected a built-in name or a path to a GPU TOML, got {show(spec)}")
    gpus = builtin_gpus()
    name = spec.lower()
    for key, gpu in gpus.items():
        if name == key or name in gpu.aliases:
            return gpu
    path = Path(spec)
    kind = _path_kind(path)
    if kind != "file":
        if kind == "dir":
            raise ConfigError(f"{path}: is a directory; expected a GPU spec TOML file")
        names = ", ".join(f"{k} ({', '.join(g.aliases)})" if g.aliases else k for k, g in gpus.items())
        raise ConfigError(f"unknown GPU {spec!r}: not a file; built-in GPUs: {names}")
    what = "a GPU spec TOML shaped like the built-ins"
    text = read_input_text(path, what)
    return GpuSpec.from_toml(parse_toml_input(path, text, what), str(path), text)
