"""What a model is, for the estimate: its `config.json`, its GGUF header or a preset."""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .types import BYTES_PER_WEIGHT

# llama_ftype numbers in GGUF `general.file_type`.
GGUF_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 7: "Q8_0", 8: "Q5_0", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M",
    13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS",
    23: "IQ3_XXS", 25: "IQ4_NL", 30: "IQ4_XS", 32: "BF16",
}  # fmt: skip
_QUANT_IN_NAME = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d_K_[SML]|I?Q\d_K|IQ\d_[A-Z]+|Q\d_\d|BF16|F16|F32)(?![A-Za-z0-9])", re.I
)
_STATELESS_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "conv", "short_conv", "recurrent"}


@dataclass
class Architecture:
    """What the estimate needs to know about a model."""

    params_b: float  # billions of parameters, all experts included
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int = 32000
    max_context: int = 131072
    source: str = ""
    weights_bytes: int | None = None  # the files' size when known: better than params x bytes
    quant: str = ""  # GGUF file type, or the checkpoint's quantisation ("fp8", "int4", "mxfp4")
    hidden: int = 0
    v_head_dim: int = 0  # 0: same as head_dim
    kv_lora_rank: int = 0  # MLA: a layer keeps kv_lora_rank + qk_rope_head_dim values per token
    qk_rope_head_dim: int = 0
    sliding_window: int = 0
    sliding_layers: int = 0  # layers that keep only the last `sliding_window` tokens
    stateless_layers: int = 0  # linear attention / Mamba layers: no KV growing with the context
    embed_params_b: float = 0.0  # input embeddings + untied output: left at 16 bit by quantisers
    expert_params_b: float = 0.0  # routed experts
    quant_bits: float = 0.0  # bits per weight of the quantised layers (quantization_config)
    quant_scope: str = ""  # "experts" when only the routed experts are quantised (MXFP4)
    ffn_active: int = 0  # feed-forward width one token goes through (MoE: experts used x width)
    tied_embeddings: bool = False
    moe_layers: int = 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def full_layers(self) -> int:
        return max(self.layers - self.sliding_layers - self.stateless_layers, 0)

    def kv_layer_token_bytes(self, dtype_bytes: float, tp: int = 1) -> float:
        """KV bytes one layer keeps per token on one GPU of a TP group."""
        if self.mla:  # one latent per token, the same on every TP rank
            return (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes
        heads = self.kv_heads / tp if self.kv_heads >= tp else 1  # fewer KV heads than ranks: replicated
        return heads * (self.head_dim + (self.v_head_dim or self.head_dim)) * dtype_bytes

    def kv_bytes(self, context: int, dtype_bytes: float, *, layers: int | None = None, tp: int = 1) -> float:
        """KV cache of `layers` (default all) for `context` tokens, sliding layers keeping their window."""
        layers = self.layers if layers is None else layers
        ratio = layers / self.layers if self.layers else 0
        per = self.kv_layer_token_bytes(dtype_bytes, tp)
        window = min(context, self.sliding_window) if self.sliding_window else context
        return ratio * per * (self.full_layers * context + self.sliding_layers * window)

    def kv_bytes_per_token(self, dtype_bytes: float, tp: int = 1) -> int:
        """Per token of context, every attention layer counted (the figure papers publish)."""
        return int(self.kv_layer_token_bytes(dtype_bytes, tp) * (self.layers - self.stateless_layers))

    def act_bytes_per_token(self) -> float:
        """Activation bytes per batched token at a profiling forward pass (bf16)."""
        if not self.hidden:
            return 0.0
        return 2.0 * (6 * self.hidden + 2 * (self.ffn_active or 4 * self.hidden))


def _n(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) not in (None, ""):
            return cfg[key]
    return default


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """A VLM's `text_config` (Llama 4, Gemma 3, Mistral 3) merged over the outer config."""
    inner = cfg.get("text_config") or cfg.get("llm_config")
    if isinstance(inner, dict):
        merged = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config")}
        merged.update(inner)
        if "quantization_config" in cfg:
            merged["quantization_config"] = cfg["quantization_config"]
        return merged
    return cfg


def _quantisation(qc: Any) -> tuple[str, float, str]:
    """(name, bits per quantised weight including scales, scope) from a `quantization_config`."""
    if not isinstance(qc, dict):
        return "", 0.0, ""
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "").lower()
    group = qc.get("group_size") or qc.get("q_group_size") or 128
    group = group if isinstance(group, int) and group > 0 else 128
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8") or qc.get("quant_algo") == "FP8":
        return "fp8", 8.0, ""
    if method == "mxfp4":
        return "mxfp4", 4.25, "experts"  # 4-bit values + one 8-bit scale per 32
    if method in ("nvfp4", "modelopt_fp4") or qc.get("quant_algo") == "NVFP4":
        return "nvfp4", 4.5, ""
    if method == "bitsandbytes":
        return ("int4", 4.5, "") if qc.get("load_in_4bit") else ("int8", 8.0, "")
    if method == "compressed-tensors":
        for group_cfg in (qc.get("config_groups") or {}).values():
            weights = (group_cfg or {}).get("weights") or {}
            bits = weights.get("num_bits")
            if isinstance(bits, int):
                g = weights.get("group_size") or 128
                extra = 16 / g if weights.get("strategy") == "group" and isinstance(g, int) and g else 0
                return (f"int{bits}" if weights.get("type", "int") == "int" else f"fp{bits}"), bits + extra, ""
        return "", 0.0, ""
    bits = qc.get("bits") or qc.get("w_bit")
    if isinstance(bits, int) and method:  # awq, gptq, marlin variants: a 16-bit scale and a zero per group
        return f"int{bits}", bits + (16 + bits) / group, ""
    return "", 0.0, ""


# The sizes `from_config` reads, and the most any of them holds in a real model (a window of
# 10 M tokens is far past any): beyond it, or below zero, the figures are nonsense (a negative
# weight size) or past a float (`1e308` hidden units: an OverflowError, a 500).
SIZES = (
    "hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "vocab_size", "head_dim",
    "max_position_embeddings", "max_sequence_length", "seq_length", "kv_lora_rank", "qk_rope_head_dim",
    "qk_nope_head_dim", "v_head_dim", "q_lora_rank", "num_local_experts", "num_experts", "n_routed_experts",
    "moe_num_experts", "num_experts_per_tok", "num_experts_per_token", "moe_topk", "intermediate_size_mlp",
    "intermediate_size", "moe_intermediate_size", "interleave_moe_layer_step", "first_k_dense_replace",
    "moe_layer_freq", "decoder_sparse_step", "shared_expert_intermediate_size", "n_shared_experts",
    "sliding_window", "sliding_window_pattern", "max_window_layers",
)  # fmt: skip
LARGEST_SIZE = 10**9
POSITIVE_SIZES = ("hidden_size", "num_attention_heads", "num_hidden_layers")


class ConfigError(ValueError):
    """A config.json the estimate cannot use: `reason` says why (a code: "not_json", "not_object",
    "incomplete", "impossible_size") and `params` the details, so the caller can say it in the
    reader's language; the exception's own text is English, for logs."""

    def __init__(self, reason: str, text: str, **params: Any) -> None:
        super().__init__(text)
        self.reason, self.params = reason, params


def _check_sizes(cfg: dict[str, Any]) -> None:
    for name in SIZES:
        value = cfg.get(name)
        if value is None or value == "":
            continue
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        positive = name in POSITIVE_SIZES
        if isinstance(value, bool) and not positive:
            continue  # (`"sliding_window": false` is a config's way to say none)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not positive <= value <= LARGEST_SIZE:
            given = cfg[name]
            text = f"config.json's {name} ({given!r}) is not a size a model has"
            raise ConfigError("impossible_size", text, name=name, value=given)


def from_config(cfg: dict[str, Any], *, source: str = "config.json", weights_bytes: int | None = None) -> Architecture:
    """An `Architecture` from a Hugging Face config.json (as a dict). Raises `ConfigError`
    (also for a size no model has)."""
    cfg = text_config(cfg)
    _check_sizes(cfg)
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        kv_heads = int(_n(cfg, "num_key_value_heads", default=heads))
        vocab = int(_n(cfg, "vocab_size", default=32000))
        head_dim = int(_n(cfg, "head_dim", default=hidden // heads))
        max_context = int(_n(cfg, "max_position_embeddings", "max_sequence_length", "seq_length", default=4096))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ConfigError("incomplete", f"config.json lacks what the estimate needs ({exc})", detail=str(exc)) from None
    model_type = str(cfg.get("model_type") or "")

    # Attention: MLA (DeepSeek V2/V3/R1, Kimi K2) or grouped-query heads.
    kv_lora = int(cfg.get("kv_lora_rank") or 0)
    rope = int(cfg.get("qk_rope_head_dim") or 0)
    v_head = 0
    if kv_lora:
        nope = int(cfg.get("qk_nope_head_dim") or 0)
        v_head = int(cfg.get("v_head_dim") or nope)
        qk_head = nope + rope
        q_lora = int(cfg.get("q_lora_rank") or 0)
        q = hidden * q_lora + q_lora * heads * qk_head if q_lora else hidden * heads * qk_head
        attn = q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_head) + heads * v_head * hidden
        head_dim, kv_heads = qk_head, heads
    else:
        attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2

    # Feed-forward: which layers are mixture-of-experts, and how wide each part is.
    experts = int(_n(cfg, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", default=0))
    per_token = int(_n(cfg, "num_experts_per_tok", "num_experts_per_token", "moe_topk", default=0))
    dense_ff = int(_n(cfg, "intermediate_size_mlp", "intermediate_size", default=4 * hidden))
    moe_ff = int(_n(cfg, "moe_intermediate_size", "intermediate_size", default=dense_ff))
    if experts:
        if isinstance(cfg.get("moe_layers"), list):
            moe_layers = len(cfg["moe_layers"])
        elif cfg.get("interleave_moe_layer_step"):  # Llama 4: every step-th layer is MoE
            moe_layers = len(
                range(int(cfg["interleave_moe_layer_step"]) - 1, layers, int(cfg["interleave_moe_layer_step"]))
            )
        else:
            first_dense = int(cfg.get("first_k_dense_replace") or 0)
            freq = int(cfg.get("moe_layer_freq") or cfg.get("decoder_sparse_step") or 1)
            moe_layers = len([i for i in range(first_dense, layers) if (i - first_dense) % freq == 0])
            moe_layers -= len([i for i in cfg.get("mlp_only_layers") or [] if isinstance(i, int) and i < layers])
        shared_ff = int(cfg.get("shared_expert_intermediate_size") or 0)
        shared_ff += int(cfg.get("n_shared_experts") or 0) * moe_ff
        if model_type.startswith("llama4"):  # one shared expert per MoE layer, not in the config
            shared_ff += moe_ff
        expert_params = moe_layers * experts * 3 * hidden * moe_ff
        moe_mlp = moe_layers * (3 * hidden * shared_ff + hidden * experts)
        dense_mlp = (layers - moe_layers) * 3 * hidden * dense_ff
        ffn_active = (per_token or 1) * moe_ff + shared_ff
    else:
        moe_layers, expert_params, moe_mlp = 0, 0, 0
        dense_mlp = layers * 3 * hidden * dense_ff
        ffn_active = dense_ff
    tied = bool(cfg.get("tie_word_embeddings", False))
    embeddings = vocab * hidden * (1 if tied else 2)
    params = layers * attn + expert_params + moe_mlp + dense_mlp + embeddings

    # Layers that do not keep the whole context.
    window = int(cfg.get("sliding_window") or cfg.get("attention_chunk_size") or 0)
    sliding = stateless = 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        sliding = sum(1 for t in types if t in ("sliding_attention", "chunked_attention"))
        stateless = sum(1 for t in types if t in _STATELESS_LAYER_TYPES)
    elif cfg.get("full_attention_interval"):  # Qwen3-Next: linear attention except every n-th layer
        stateless = layers - layers // int(cfg["full_attention_interval"])
    elif window and cfg.get("sliding_window_pattern"):  # Gemma 3: every n-th layer is global
        sliding = layers - layers // int(cfg["sliding_window_pattern"])
    elif window and cfg.get("sliding_window") and cfg.get("use_sliding_window", True) and not kv_lora:
        # Mistral v0.1 style; Qwen2/3 carry a window but switch it off (use_sliding_window: false).
        max_window_layers = cfg.get("max_window_layers")
        sliding = layers if max_window_layers in (None, layers) else max(layers - int(max_window_layers), 0)
    if not sliding:
        window = 0

    quant, bits, scope = _quantisation(cfg.get("quantization_config"))
    return Architecture(
        params_b=params / 1e9,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        max_context=max_context,
        source=source,
        weights_bytes=weights_bytes or None,
        quant=quant,
        hidden=hidden,
        v_head_dim=v_head,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope if kv_lora else 0,
        sliding_window=window,
        sliding_layers=sliding,
        stateless_layers=stateless,
        embed_params_b=embeddings / 1e9,
        expert_params_b=expert_params / 1e9,
        quant_bits=bits,
        quant_scope=scope,
        ffn_active=ffn_active,
        tied_embeddings=tied,
        moe_layers=moe_layers,
    )


def from_config_json(text: str, *, weights_bytes: int | None = None) -> Architecture:
    """An `Architecture` from the text of a config.json. Raises `ConfigError`."""
    try:
        cfg = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise ConfigError("not_json", f"config.json is not JSON ({exc})", detail=str(exc)) from None
    if not isinstance(cfg, dict):
        raise ConfigError("not_object", "config.json is not a JSON object")
    return from_config(cfg, weights_bytes=weights_bytes)


def estimate_params_b(cfg: dict[str, Any]) -> float:
    """Parameter count (billions) from a config.json's shape."""
    return from_config(cfg).params_b


# Partial config.json files of public models (the fields the estimate reads, copied from each model's
# config.json on Hugging Face), read by the same code; names are matched as substrings of the path.
PRESET_CONFIGS: dict[str, dict[str, Any]] = json.loads((Path(__file__).with_name("presets.json")).read_text())
PRESETS: dict[str, Architecture] = {k: from_config(v, source=f"preset {k}") for k, v in PRESET_CONFIGS.items()}


def _norm(text: str) -> str:
    return re.sub(r"[\s_]+", "-", text.lower())


def preset_for(model_path: str) -> Architecture | None:
    """The longest preset name found in the model path (so `qwen3-coder-30b-a3b` beats `qwen3-30b`)."""
    name = _norm(model_path)
    matches = [k for k in PRESETS if k in name]
    if not matches:
        return None
    key = max(matches, key=len)
    return replace(PRESETS[key], source=f"preset {key}")


def quant_from_name(model_path: str) -> str:
    m = _QUANT_IN_NAME.search(model_path.rsplit("/", 1)[-1])
    return m.group(1).upper() if m else ""


# --- reading GGUF metadata -----------------------------------------------------------------------
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def parse_gguf_metadata(data: bytes) -> dict[str, Any]:
    """The key/value header of a GGUF file, from its first bytes (arrays are skipped, keeping
    their length). Stops quietly where `data` ends: the architecture keys come before the
    tokenizer's large arrays, so the first megabytes are enough."""
    if data[:4] != b"GGUF":
        raise ValueError("not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, pos)
    pos += 20
    meta: dict[str, Any] = {"gguf.version": version, "gguf.tensor_count": n_tensors}

    def string() -> str:
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if pos + n > len(data):
            raise IndexError
        s = data[pos : pos + n].decode(errors="replace")
        pos += n
        return s

    def value(kind: int) -> Any:
        nonlocal pos
        if kind in _GGUF_SCALARS:
            fmt = _GGUF_SCALARS[kind]
            (v,) = struct.unpack_from(fmt, data, pos)
            pos += struct.calcsize(fmt)
            return v
        if kind == 8:
            return string()
        if kind == 9:
            (item_kind, count) = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if item_kind in _GGUF_SCALARS:
                pos += struct.calcsize(_GGUF_SCALARS[item_kind]) * count
                if pos > len(data):
                    raise IndexError
            else:
                for _ in range(count):
                    value(item_kind)
            return {"array_length": count}
        raise ValueError(f"unknown GGUF value type {kind}")

    try:
        for _ in range(n_kv):
            key = string()
            (kind,) = struct.unpack_from("<I", data, pos)
            pos += 4
            meta[key] = value(kind)
    except (IndexError, struct.error):
        pass  # truncated read: keep what we have
    return meta


# Architectures whose sliding-window layer pattern llama.cpp knows without a metadata key.
_GGUF_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "cohere2": 4}


def from_gguf_metadata(meta: dict[str, Any], *, file_size: int | None = None) -> Architecture:
    """An `Architecture` from a GGUF header (`parse_gguf_metadata`); the file size gives the weights."""
    arch = meta.get("general.architecture")
    if not arch:
        raise ValueError("GGUF metadata has no general.architecture")

    def get(key: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{key}", default)
        return default if isinstance(value, dict) else value  # arrays are skipped by the parser

    try:
        heads = int(get("attention.head_count"))
        hidden = int(get("embedding_length"))
        layers = int(get("block_count"))
        kv_heads = int(get("attention.head_count_kv") or heads)
        head_dim = int(get("attention.key_length") or hidden // heads)
        v_dim = int(get("attention.value_length") or 0)
        tokens = meta.get("tokenizer.ggml.tokens")
        vocab = int(get("vocab_size") or (tokens or {}).get("array_length") or 32000)
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError("GGUF metadata lacks the attention shape") from None
    kv_lora = int(get("attention.kv_lora_rank") or 0)
    rope = int(get("rope.dimension_count") or 0) if kv_lora else 0
    window = int(get("attention.sliding_window") or 0)
    pattern = get("attention.sliding_window_pattern") or _GGUF_SWA_PATTERN.get(arch)
    sliding = layers - layers // int(pattern) if window and isinstance(pattern, int) and pattern > 0 else 0
    experts = int(get("expert_count") or 0)
    expert_ff = int(get("expert_feed_forward_length") or get("feed_forward_length") or 0)
    quant = GGUF_FILE_TYPES.get(meta.get("general.file_type", -1), "")
    bpw = BYTES_PER_WEIGHT.get(quant, 0.6)
    params_b = (file_size / bpw / 1e9) if file_size else 0.0  # GGUF does not store a parameter count
    return Architecture(
        params_b=params_b,
        layers=layers,
        heads=heads,
        kv_heads=heads if kv_lora else kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        max_context=int(get("context_length") or 4096),
        source="GGUF metadata",
        weights_bytes=file_size,
        quant=quant,
        hidden=hidden,
        v_head_dim=v_dim if v_dim and v_dim != head_dim else 0,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope,
        sliding_window=window if sliding else 0,
        sliding_layers=sliding,
        embed_params_b=vocab * hidden / 1e9,
        ffn_active=int(get("expert_used_count") or 1) * expert_ff if experts else int(get("feed_forward_length") or 0),
        moe_layers=layers - int(get("leading_dense_block_count") or 0) if experts else 0,
    )
