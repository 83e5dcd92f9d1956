"""Will it fit? A memory estimate for a deployment, before anything is launched.

The model's own description comes first: its Hugging Face `config.json` (read over SSH from the
model folder, or pasted into `/api/fit-estimate/`) or its GGUF metadata; `PRESETS` (partial
config.json files of public models, read by the same code) only when neither is available.
From it `Architecture` keeps what memory depends on: parameters split into embeddings, routed
experts and the rest (MoE layers counted only where they are: `first_k_dense_replace`,
`interleave_moe_layer_step`, `mlp_only_layers`), the KV layout (grouped-query heads, or MLA's
compressed `kv_lora_rank + qk_rope_head_dim` per layer), sliding-window and KV-free (linear
attention / Mamba) layers, and the checkpoint's own quantisation (`quantization_config`).

Per backend (`estimate`):

- llama.cpp: weights of the offloaded layers (`-ngl`; the output layer only with every layer),
  the KV cache of those layers for `-c` tokens (all slots together; sliding layers keep their
  window), a CUDA context, and the compute buffer. Without flash attention that buffer holds the
  f32 attention scores of one 512-token micro-batch against the whole context (heads x ctx x 512
  x 4 B), which is what makes a long context cost more than its KV cache. `-fa auto` is counted as
  off unless the host's calibration saw this build turn it on. Layers are split over GPUs in
  proportion to their free memory, as llama.cpp does; with no GPU layer the budget is the host's
  RAM.
- vLLM: it pre-allocates `gpu-memory-utilization` x total on every GPU; weights (split over TP x PP)
  and the activation peak of the profiling run (max-num-batched-tokens) come out of that and the KV
  cache gets the rest, so the estimate says how many sequences of max-model-len fit ("Maximum
  concurrency", the figure vLLM prints). TP must divide the attention heads, and the KV heads
  unless TP is a multiple of them (then they are replicated); TP x PP must equal the GPUs.
- SGLang: `--mem-fraction-static` x total holds weights and the KV pool; activations live in the
  rest.

Verdicts are per GPU and the GPU that is short is named; "tight" means within 10 % of the limit.
When something does not fit, `advice` lists the smallest changes (context, KV dtype, -ngl, GPU
count, quantisation) that make it fit. Memory figures read off nvidia-smi are MiB, so sizes here
are GiB. The published figures this is checked against are in tests/hosts/test_fit.py.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

GiB = 1024**3
MiB = 1024**2
TIGHT = 0.90
UBATCH = 512  # llama.cpp's default -ub
CUDA_CONTEXT = 0.25 * GiB  # llama.cpp per GPU: CUDA context, cuBLAS workspace
VLLM_NON_TORCH = 0.4 * GiB  # vLLM per GPU: CUDA context and allocator slack outside PyTorch's pool
NCCL_BUFFERS = 0.25 * GiB  # per GPU once tensors are split over several

BYTES_PER_WEIGHT: dict[str, float] = {
    "fp32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
    "int4": 0.5,
    # GGUF file types: average bits per weight of the whole file / 8.
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "Q8_0": 8.5 / 8,
    "Q6_K": 6.56 / 8,
    "Q5_K_M": 5.69 / 8,
    "Q5_K_S": 5.52 / 8,
    "Q5_0": 5.5 / 8,
    "Q4_K_M": 4.85 / 8,
    "Q4_K_S": 4.58 / 8,
    "Q4_0": 4.5 / 8,
    "IQ4_XS": 4.25 / 8,
    "IQ4_NL": 4.5 / 8,
    "Q3_K_L": 4.27 / 8,
    "Q3_K_M": 3.91 / 8,
    "Q3_K_S": 3.5 / 8,
    "IQ3_XXS": 3.06 / 8,
    "Q2_K": 3.35 / 8,
    "IQ2_XXS": 2.06 / 8,
}
# Smaller GGUF files to suggest, largest first.
GGUF_LADDER = ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS", "Q3_K_M", "Q2_K"]
KV_BYTES: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "q8_0": 8.5 / 8, "q4_0": 4.5 / 8}
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


def from_config(cfg: dict[str, Any], *, source: str = "config.json", weights_bytes: int | None = None) -> Architecture:
    """An `Architecture` from a Hugging Face config.json (as a dict). Raises ValueError."""
    cfg = text_config(cfg)
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        kv_heads = int(_n(cfg, "num_key_value_heads", default=heads))
        vocab = int(_n(cfg, "vocab_size", default=32000))
        head_dim = int(_n(cfg, "head_dim", default=hidden // heads))
        max_context = int(_n(cfg, "max_position_embeddings", "max_sequence_length", "seq_length", default=4096))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"config.json lacks what the estimate needs ({exc})") from None
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
    """An `Architecture` from the text of a config.json."""
    try:
        cfg = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"config.json is not JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise ValueError("config.json is not a JSON object")
    return from_config(cfg, weights_bytes=weights_bytes)


def estimate_params_b(cfg: dict[str, Any]) -> float:
    """Parameter count (billions) from a config.json's shape."""
    return from_config(cfg).params_b


# Partial config.json files of public models (the fields the estimate reads, copied from each model's
# config.json on Hugging Face), read by the same code; names are matched as substrings of the path.
PRESET_CONFIGS: dict[str, dict[str, Any]] = json.loads((Path(__file__).with_name("fit_presets.json")).read_text())
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


# --- the estimate ----------------------------------------------------------------------------------
@dataclass
class GPUMemory:
    index: int
    total_mib: int
    free_mib: int


@dataclass
class FitRequest:
    arch: Architecture
    backend: str  # "vllm", "sglang" or "llamacpp"
    context: int
    gpus: list[GPUMemory]
    parallel: int = 1
    weights_dtype: str = "bf16"  # a BYTES_PER_WEIGHT key; GGUF files and quantised checkpoints use theirs
    kv_dtype: str = "fp16"
    n_gpu_layers: int | None = None  # llama.cpp -ngl; None: all
    gpu_memory_utilization: float = 0.9  # vLLM; SGLang's --mem-fraction-static
    flash_attention: str | bool = "auto"  # llama.cpp -fa: on / off / auto
    flash_attention_auto_on: bool = False  # this build turns `-fa auto` on (seen in its log)
    tensor_parallel: int = 0  # 0: GPUs / pipeline_parallel
    pipeline_parallel: int = 1
    max_num_batched_tokens: int | None = None  # vLLM; SGLang's --chunked-prefill-size
    ram_mib: int | None = None  # the host's available RAM, for layers llama.cpp keeps on the CPU
    spare_gpus: list[GPUMemory] = field(default_factory=list)  # the host's other GPUs, for advice
    correction: float = 1.0  # actual / estimate measured on this host for this backend
    correction_samples: int = 0


@dataclass
class Device:
    """One GPU (or the host's RAM) and what the deployment needs of it."""

    name: str
    index: int | None
    need_gib: float
    have_gib: float
    verdict: str = ""


@dataclass
class Estimate:
    weights_gib: float
    kv_cache_gib: float
    overhead_gib: float
    total_gib: float
    available_gib: float
    verdict: str  # fits / tight / does_not_fit / unknown
    max_context: int | None
    context: int
    layers_on_gpu: int
    kv_bytes_per_token: int
    source: str
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # settings the server would refuse
    devices: list[Device] = field(default_factory=list)
    short: str = ""  # the device that does not fit, named
    flash_attention: str = ""  # llama.cpp: what the estimate assumed
    activation_gib: float = 0.0  # vLLM/SGLang: activation peak per GPU
    kv_pool_gib: float | None = None  # vLLM/SGLang: KV memory per GPU the server will allocate
    kv_cache_tokens: int | None = None  # tokens that pool holds ("GPU KV cache size")
    max_concurrency: float | None = None  # sequences of `context` it holds ("Maximum concurrency")
    tensor_parallel: int = 0
    pipeline_parallel: int = 0
    raw_total_gib: float = 0.0  # before the host's calibration
    compute_gib: float = 0.0  # llama.cpp compute buffers; vLLM/SGLang activations (part of overhead)
    model_gib: float = 0.0  # all the weights, wherever they are
    advice: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.verdict != "does_not_fit"

    def as_dict(self) -> dict[str, Any]:
        def rounded(value: Any) -> Any:
            if isinstance(value, float):  # 4 significant digits: a tiny model's MiB must not round to 0
                return float(f"{value:.4g}") if abs(value) < 100 else round(value, 1)
            if isinstance(value, list):
                return [rounded(v) for v in value]
            if isinstance(value, dict):
                return {k: rounded(v) for k, v in value.items()}
            return value

        return rounded(asdict(self))


def weights_bytes(arch: Architecture, dtype: str) -> float:
    """The weights' bytes: the files when known, else parameters x the checkpoint's (or `dtype`'s) size."""
    if arch.weights_bytes:
        return float(arch.weights_bytes)
    params = arch.params_b * 1e9
    if arch.quant_bits and not arch.quant.isupper():  # a quantised checkpoint, per its quantization_config
        if arch.quant_scope == "experts":
            experts = arch.expert_params_b * 1e9
            return experts * arch.quant_bits / 8 + (params - experts) * 2
        embeddings = arch.embed_params_b * 1e9
        return embeddings * 2 + (params - embeddings) * arch.quant_bits / 8
    per = BYTES_PER_WEIGHT.get(dtype) or BYTES_PER_WEIGHT.get(dtype.upper())
    if per is None:
        raise ValueError(f"unknown weight type {dtype!r}")
    return params * per


def _verdict(need: float, have: float) -> str:
    if need <= TIGHT * have:
        return "fits"
    return "tight" if need <= have else "does_not_fit"


_ORDER = {"fits": 0, "unknown": 1, "tight": 2, "does_not_fit": 3}


def _worst(verdicts: list[str]) -> str:
    return max(verdicts, key=_ORDER.__getitem__) if verdicts else "does_not_fit"


def flash_attention_of(req: FitRequest) -> str:
    """llama.cpp's -fa as the estimate takes it: auto is off unless this build is known to turn it on."""
    fa = req.flash_attention
    if isinstance(fa, bool):
        return "on" if fa else "off"
    if fa == "auto":
        return "on" if req.flash_attention_auto_on else "off"
    return "on" if fa == "on" else "off"


def _largest_context(arch: Architecture, fits_at) -> int | None:
    """The largest context (a multiple of 256, at most the trained one) for which `fits_at` holds."""
    lo, hi = 0, max(arch.max_context // 256, 0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits_at(mid * 256):
            lo = mid
        else:
            hi = mid - 1
    return lo * 256 if lo else None


# llama.cpp --------------------------------------------------------------------------------------------
def _llamacpp(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
    a = req.arch
    kvb = KV_BYTES.get(req.kv_dtype, 2)
    total_w = weights_bytes(a, a.quant or req.weights_dtype)
    ngl = a.layers + 1 if req.n_gpu_layers is None else req.n_gpu_layers
    gpus = req.gpus if ngl > 0 else []
    on_gpu = min(ngl, a.layers) if gpus else 0
    output_on_gpu = bool(gpus) and ngl > a.layers
    bpw = total_w / (a.params_b * 1e9) if a.params_b else BYTES_PER_WEIGHT.get(a.quant, 0.6)
    embedding = a.vocab * a.hidden * bpw  # token_embd stays in RAM; the output matrix is as large
    repeating = max(total_w - embedding * (1 if a.tied_embeddings else 2), total_w * 0.5)
    gpu_w = repeating * on_gpu / a.layers + (embedding if output_on_gpu else 0)
    kv_gpu = a.kv_bytes(context, kvb, layers=on_gpu)
    fa = flash_attention_of(req)
    span = context if a.full_layers else min(context, a.sliding_window or context)
    kq = a.heads * UBATCH * 4 * span if fa == "off" else 0  # f32 attention scores of one micro-batch
    logits = UBATCH * a.vocab * 4
    parts = {"weights": gpu_w, "kv": kv_gpu, "overhead": 0.0, "compute": 0.0}
    devices: list[Device] = []
    free_total = sum(g.free_mib for g in gpus) * MiB
    for i, g in enumerate(gpus):
        share = g.free_mib * MiB / free_total if free_total else 1 / len(gpus)
        compute = (kq if on_gpu else 0) + (logits if output_on_gpu and i == len(gpus) - 1 else 0)
        overhead = CUDA_CONTEXT + compute
        parts["overhead"] += overhead
        parts["compute"] += compute
        devices.append(
            Device(f"GPU {g.index}", g.index, ((gpu_w + kv_gpu) * share + overhead) / GiB, g.free_mib / 1024)
        )
    cpu_layers = a.layers - on_gpu
    ram_need = (total_w - gpu_w) + a.kv_bytes(context, kvb, layers=cpu_layers)
    ram_need += (kq if cpu_layers else 0) + (0 if output_on_gpu else logits)
    if not gpus:
        kv_all = a.kv_bytes(context, kvb)
        parts = {"weights": total_w, "kv": kv_all, "overhead": ram_need - total_w - kv_all}
        parts["compute"] = parts["overhead"]
    if req.ram_mib is not None and (not gpus or cpu_layers):
        devices.append(Device("RAM", None, ram_need / GiB, req.ram_mib / 1024))
    elif not gpus:
        devices.append(Device("RAM", None, ram_need / GiB, 0.0, verdict="unknown"))
    parts["on_gpu"] = on_gpu
    return devices, parts


# vLLM and SGLang -----------------------------------------------------------------------------------------
def _divisors_upto(n: int, limit: int) -> list[int]:
    return [d for d in range(1, max(limit, 1) + 1) if n % d == 0]


def parallel_problems(arch: Architecture, n_gpus: int, tp: int, pp: int) -> list[str]:
    """What vLLM/SGLang would refuse about this tensor x pipeline split."""
    problems = []
    if tp * pp != n_gpus:
        problems.append(f"Tensor parallel {tp} x pipeline parallel {pp} = {tp * pp}, but {n_gpus} GPU(s) are chosen.")
    if arch.heads % tp:
        ok = ", ".join(map(str, _divisors_upto(arch.heads, max(n_gpus, 8))))
        problems.append(
            f"Tensor parallel size {tp} does not divide the model's {arch.heads} attention heads; use one of {ok}."
        )
    elif not arch.mla and arch.kv_heads % tp and tp % arch.kv_heads:
        problems.append(
            f"Tensor parallel size {tp} neither divides the model's {arch.kv_heads} KV heads nor is a multiple of them."
        )
    if pp > arch.layers:
        problems.append(f"Pipeline parallel size {pp} is more than the model's {arch.layers} layers.")
    return problems


def default_batched_tokens(backend: str, gpus: list[GPUMemory]) -> int:
    """vLLM's default max-num-batched-tokens for `vllm serve` (8192 on GPUs of 70 GiB or more, else
    2048); SGLang's chunked-prefill-size default is 8192 (2048 below 20 GiB)."""
    smallest = min((g.total_mib for g in gpus), default=0) / 1024
    if backend == "sglang":
        return 8192 if smallest >= 20 else 2048
    return 8192 if smallest >= 70 else 2048


def _preallocating(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
    a = req.arch
    pp = max(req.pipeline_parallel or 1, 1)
    tp = req.tensor_parallel or max(len(req.gpus) // pp, 1)
    kvb = KV_BYTES.get(req.kv_dtype, 2)
    w = weights_bytes(a, a.quant or req.weights_dtype) / (tp * pp)
    layers = math.ceil(a.layers / pp)
    per_seq = a.kv_bytes(context, kvb, layers=layers, tp=tp)
    batched = req.max_num_batched_tokens or default_batched_tokens(req.backend, req.gpus)
    act = batched * a.act_bytes_per_token() / tp if a.hidden else 0.6 * GiB
    overhead = VLLM_NON_TORCH + (NCCL_BUFFERS if tp * pp > 1 else 0)
    util = req.gpu_memory_utilization
    devices, pools = [], []
    for g in req.gpus:
        budget = g.total_mib * MiB * util
        if req.backend == "sglang":  # the static share holds weights + KV; activations live outside it
            pool = budget - w
            need = w + per_seq
            outside = g.total_mib * MiB * (1 - util)
            verdict = "does_not_fit" if act + overhead > outside else ""
        else:
            pool = budget - w - act - overhead
            need = w + act + overhead + per_seq
            verdict = ""
        if g.free_mib * MiB < budget * (0.0 if req.backend == "sglang" else 1.0) or pool < per_seq:
            verdict = "does_not_fit"
        pools.append(pool)
        devices.append(Device(f"GPU {g.index}", g.index, need / GiB, budget / GiB, verdict=verdict))
    pool = min(pools) if pools else 0.0
    per_token = a.kv_layer_token_bytes(kvb, tp) * layers * (a.layers - a.stateless_layers) / a.layers
    return devices, {
        "weights": w * len(req.gpus),
        "kv": per_seq * len(req.gpus),
        "overhead": (act + overhead) * len(req.gpus),
        "compute": act * len(req.gpus),
        "act": act,
        "pool": pool,
        "per_seq": per_seq,
        "per_token": per_token,
        "tp": tp,
        "pp": pp,
    }


# the estimate -------------------------------------------------------------------------------------------
def _devices(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
    devices, parts = (_llamacpp if req.backend == "llamacpp" else _preallocating)(req, context)
    corrected = req.correction_samples > 0 and 0.5 <= req.correction <= 2.0
    for d in devices:
        if corrected and d.name != "RAM":
            d.need_gib *= req.correction
        if not d.verdict:
            d.verdict = _verdict(d.need_gib, d.have_gib)
    return devices, parts


def estimate(req: FitRequest, *, advise: bool = True) -> Estimate:
    """Estimate `req` against its GPUs (or RAM); see the module docstring for the model."""
    arch = req.arch
    notes: list[str] = []
    problems: list[str] = []
    devices, parts = _devices(req, req.context)
    if req.backend != "llamacpp":
        if not req.gpus:
            problems.append(f"{'SGLang' if req.backend == 'sglang' else 'vLLM'} needs at least one GPU.")
        else:
            problems += parallel_problems(arch, len(req.gpus), int(parts["tp"]), int(parts["pp"]))
        for g in req.gpus if req.backend == "vllm" else []:
            util = req.gpu_memory_utilization
            if g.free_mib < g.total_mib * util:
                notes.append(
                    f"GPU {g.index} has {g.free_mib / 1024:.1f} GiB free but vLLM asks for "
                    f"{g.total_mib * util / 1024:.1f} GiB ({util:g} of it): vLLM will refuse to start. Lower "
                    f"gpu-memory-utilization to {max(math.floor(g.free_mib / g.total_mib * 100) / 100 - 0.01, 0):.2f}"
                    " or free the GPU."
                )
    verdict = "does_not_fit" if problems else _worst([d.verdict for d in devices])
    short = next((d for d in devices if d.verdict == "does_not_fit"), None)
    if short is not None and not problems:
        what = "the host's RAM" if short.name == "RAM" else short.name
        notes.insert(0, f"{what} is short: needs about {short.need_gib:.1f} GiB, has {short.have_gib:.1f} GiB.")
    if any(d.verdict == "unknown" for d in devices):
        notes.append("The host's free RAM is not known yet (refresh the inventory); judged against it once known.")

    def fits_at(ctx: int) -> bool:
        return all(d.verdict != "does_not_fit" for d in _devices(req, ctx)[0])

    max_context = None if problems or not devices else _largest_context(arch, fits_at)
    if req.context > arch.max_context:
        notes.append(f"The model was trained for {arch.max_context} tokens of context; {req.context} asks for more.")
    fa = ""
    if req.backend == "llamacpp":
        fa = flash_attention_of(req)
        if req.flash_attention == "auto" and fa == "off" and parts.get("on_gpu"):
            notes.append(
                "-fa auto is counted as off (the build decides at start; the first launch's log tells the portal). "
                "-fa on saves the attention-score buffer."
            )
    if req.correction_samples and 0.5 <= req.correction <= 2.0:
        notes.append(
            f"Corrected by {req.correction:.2f}x: what {req.backend} allocated on this host over "
            f"{req.correction_samples} launch(es), compared with the estimate."
        )
    raw_total = sum(parts[k] for k in ("weights", "kv", "overhead"))
    total = (
        sum(d.need_gib for d in devices if d.name != "RAM") * GiB if req.gpus and parts.get("on_gpu", 1) else raw_total
    )
    if req.backend == "llamacpp" and not parts.get("on_gpu"):
        total = sum(d.need_gib for d in devices) * GiB
    available = sum(d.have_gib for d in devices if (d.name != "RAM") == bool(parts.get("on_gpu", 1))) * GiB
    result = Estimate(
        weights_gib=parts["weights"] / GiB,
        kv_cache_gib=parts["kv"] / GiB,
        overhead_gib=parts["overhead"] / GiB,
        total_gib=total / GiB,
        available_gib=available / GiB,
        verdict=verdict,
        max_context=max_context,
        context=req.context,
        layers_on_gpu=int(parts.get("on_gpu", arch.layers)),
        kv_bytes_per_token=arch.kv_bytes_per_token(KV_BYTES.get(req.kv_dtype, 2)),
        source=arch.source,
        notes=notes,
        problems=problems,
        devices=devices,
        short=short.name if short is not None else "",
        flash_attention=fa,
        raw_total_gib=raw_total / GiB,
        compute_gib=parts.get("compute", 0.0) / GiB,
        model_gib=weights_bytes(arch, arch.quant or req.weights_dtype) / GiB,
    )
    if req.backend != "llamacpp" and req.gpus:
        pool, per_seq = parts["pool"], parts["per_seq"]
        result.activation_gib = parts["act"] / GiB
        result.kv_pool_gib = max(pool, 0) / GiB
        result.kv_cache_tokens = int(max(pool, 0) // parts["per_token"]) if parts["per_token"] else None
        result.max_concurrency = round(max(pool, 0) / per_seq, 2) if per_seq else None
        result.tensor_parallel, result.pipeline_parallel = int(parts["tp"]), int(parts["pp"])
        if result.max_concurrency is not None and not problems:
            notes.append(
                f"This leaves room for {result.max_concurrency:g} concurrent sequences of {req.context} tokens "
                f"({result.kv_cache_tokens} tokens of KV cache per GPU)."
            )
    if advise and verdict == "does_not_fit" and not problems:
        result.advice = advice(req)
        if result.advice:
            notes.append(f"Smallest change that fits: {result.advice[0]['change']}.")
    return result


# advice ------------------------------------------------------------------------------------------------------
def advice(req: FitRequest) -> list[dict[str, Any]]:
    """Changes that turn "does not fit" into "fits", smallest first: each {change, cost, fields, estimate}."""
    a = req.arch
    tries: list[tuple[str, float, dict[str, Any], FitRequest]] = []
    base = estimate(req, advise=False)
    if base.max_context and base.max_context < req.context:
        lost = 1 - base.max_context / req.context
        tries.append(
            (
                f"lower the context to {base.max_context}",
                lost,
                {"context": base.max_context},
                replace(req, context=base.max_context),
            )
        )
    kv_steps = ["q8_0", "q4_0"] if req.backend == "llamacpp" else ["fp8"]
    if req.kv_dtype in ("fp16", "bf16"):
        for cost, kv in zip((0.15, 0.35), kv_steps, strict=False):
            tries.append((f"KV cache type {kv}", cost, {"kv_dtype": kv}, replace(req, kv_dtype=kv)))
    if req.backend == "llamacpp" and req.gpus:
        ngl = min(a.layers if req.n_gpu_layers is None else req.n_gpu_layers, a.layers)
        lo, hi = 0, ngl - 1
        while lo < hi:  # the most layers that still fit
            mid = (lo + hi + 1) // 2
            if estimate(replace(req, n_gpu_layers=mid), advise=False).verdict != "does_not_fit":
                lo = mid
            else:
                hi = mid - 1
        if lo > 0:
            tries.append(
                (
                    f"-ngl {lo} (keep {a.layers - lo} layers on the CPU)",
                    (ngl - lo) / a.layers + 0.1,
                    {"n_gpu_layers": lo},
                    replace(req, n_gpu_layers=lo),
                )
            )
    for extra in range(1, len(req.spare_gpus) + 1):
        gpus = [*req.gpus, *req.spare_gpus[:extra]]
        more = replace(req, gpus=gpus, tensor_parallel=0 if req.backend != "llamacpp" else req.tensor_parallel)
        label = ", ".join(str(g.index) for g in req.spare_gpus[:extra])
        tries.append(
            (f"add GPU {label} ({len(gpus)} in all)", 0.25 * extra, {"gpu_indices": [g.index for g in gpus]}, more)
        )
    if req.backend == "llamacpp" and a.quant in GGUF_LADDER:
        here, size = BYTES_PER_WEIGHT[a.quant], weights_bytes(a, a.quant)
        for step, q in enumerate(GGUF_LADDER[GGUF_LADDER.index(a.quant) + 1 :], start=1):
            smaller_size = int(size * BYTES_PER_WEIGHT[q] / here)
            smaller = replace(a, quant=q, weights_bytes=smaller_size)
            tries.append(
                (
                    f"a {q} file of the model (about {smaller_size / GiB:.1f} GiB)",
                    0.3 * step,
                    {"quant": q},
                    replace(req, arch=smaller),
                )
            )
    elif req.backend != "llamacpp" and not a.quant and req.weights_dtype in ("bf16", "fp16"):
        tries.append(
            (
                "FP8 weights (--quantization fp8 or an FP8 checkpoint)",
                0.3,
                {"weights_dtype": "fp8"},
                replace(req, weights_dtype="fp8"),
            )
        )
    found = []
    for change, cost, fields_, candidate in tries:
        est = estimate(candidate, advise=False)
        if est.verdict != "does_not_fit":
            found.append(
                {
                    "change": change,
                    "cost": round(cost, 3),
                    "fields": fields_,
                    "verdict": est.verdict,
                    "total_gib": round(est.total_gib, 2),
                }
            )
    return sorted(found, key=lambda f: f["cost"])
