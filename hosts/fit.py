"""Will it fit? A VRAM estimate for a deployment, before anything is launched.

    total = weights on GPU + KV cache + runtime overhead

- weights: the model files' size when the host tells us (safetensors / GGUF), else parameter
  count x bytes per weight (bf16/fp16 2, fp8/int8 1, int4 0.5, GGUF types by their bits/weight);
  with llama.cpp only the offloaded share (`-ngl` of the layers);
- KV cache = 2 (K and V) x layers on GPU x KV heads x head dim x bytes per element x context x
  parallel sequences (llama.cpp's `-c` already counts all slots);
- overhead: CUDA context and compute buffers. llama.cpp without flash attention keeps the f32
  attention scores of one 512-token micro-batch per context token (heads x 512 x 4 B), which is
  what makes a longer context cost more than its KV cache alone.

Compared with what the GPUs have: the free memory (llama.cpp) or total x gpu-memory-utilization
(vLLM, which pre-allocates that share and fails when another process already holds it). "tight"
means within 10 % of the limit. The figures the issue quotes are calibration tests
(tests/hosts/test_fit.py); memory figures read off nvidia-smi are MiB, so sizes here are GiB.

The architecture comes from the model's config.json or GGUF metadata read over SSH, else from
`PRESETS` matched on the model name.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import asdict, dataclass, field, replace
from typing import Any

GiB = 1024**3
MiB = 1024**2
TIGHT = 0.90
UBATCH = 512

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
    quant: str = ""  # GGUF file type when known


def _a(params_b, layers, heads, kv_heads, head_dim, vocab, max_context) -> Architecture:
    return Architecture(params_b, layers, heads, kv_heads, head_dim, vocab, max_context)


# Published configs (config.json of each model); names are matched as substrings of the model path.
PRESETS: dict[str, Architecture] = {
    "llama-3.1-8b": _a(8.03, 32, 32, 8, 128, 128256, 131072),
    "llama-3.1-70b": _a(70.6, 80, 64, 8, 128, 128256, 131072),
    "llama-3.3-70b": _a(70.6, 80, 64, 8, 128, 128256, 131072),
    "llama-3.2-3b": _a(3.21, 28, 24, 8, 128, 128256, 131072),
    "llama-3.2-1b": _a(1.24, 16, 32, 8, 64, 128256, 131072),
    "llama-2-7b": _a(6.74, 32, 32, 32, 128, 32000, 4096),
    "mistral-7b": _a(7.25, 32, 32, 8, 128, 32768, 32768),
    "qwen2.5-7b": _a(7.62, 28, 28, 4, 128, 152064, 32768),
    "qwen2.5-coder-7b": _a(7.62, 28, 28, 4, 128, 152064, 32768),
    "qwen2.5-32b": _a(32.8, 64, 40, 8, 128, 152064, 32768),
    "qwen2.5-coder-32b": _a(32.8, 64, 40, 8, 128, 152064, 32768),
    "qwen2.5-72b": _a(72.7, 80, 64, 8, 128, 152064, 32768),
    "qwen3-8b": _a(8.19, 36, 32, 8, 128, 151936, 40960),
    "qwen3-14b": _a(14.8, 40, 40, 8, 128, 151936, 40960),
    "qwen3-32b": _a(32.8, 64, 64, 8, 128, 151936, 40960),
    "qwen3-30b-a3b": _a(30.5, 48, 32, 4, 128, 151936, 40960),
    "qwen3-coder-30b-a3b": _a(30.5, 48, 32, 4, 128, 151936, 262144),
    "gpt-oss-20b": _a(20.9, 24, 64, 8, 64, 201088, 131072),
    "gpt-oss-120b": _a(117.0, 36, 64, 8, 64, 201088, 131072),
    "gemma-3-27b": _a(27.4, 62, 32, 16, 128, 262208, 131072),
    "deepseek-r1-distill-qwen-32b": _a(32.8, 64, 40, 8, 128, 152064, 131072),
}


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


# --- reading the architecture from the host's files ---------------------------------------------
def estimate_params_b(cfg: dict[str, Any]) -> float:
    """Parameter count from a config.json's shape (dense or mixture of experts)."""
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    vocab = cfg.get("vocab_size", 32000)
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0
    if experts:
        moe_ff = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
        mlp = experts * 3 * hidden * moe_ff + hidden * experts
        shared = cfg.get("shared_expert_intermediate_size") or 0
        mlp += 3 * hidden * shared
    else:
        mlp = 3 * hidden * cfg["intermediate_size"]
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return (cfg["num_hidden_layers"] * (attn + mlp) + embeddings) / 1e9


def from_config_json(text: str, *, weights_bytes: int | None = None) -> Architecture:
    """An `Architecture` from a Hugging Face config.json (text models, or a VLM's text_config)."""
    cfg = json.loads(text)
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        arch = Architecture(
            params_b=estimate_params_b(cfg),
            layers=int(cfg["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            vocab=int(cfg.get("vocab_size", 32000)),
            max_context=int(cfg.get("max_position_embeddings", 4096)),
            source="config.json",
            weights_bytes=weights_bytes or None,
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"config.json lacks what the estimate needs ({exc})") from None
    return arch


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


def from_gguf_metadata(meta: dict[str, Any], *, file_size: int | None = None) -> Architecture:
    arch = meta.get("general.architecture")
    if not arch:
        raise ValueError("GGUF metadata has no general.architecture")

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    try:
        heads = int(get("attention.head_count"))
        hidden = int(get("embedding_length"))
        kv_heads = get("attention.head_count_kv") or heads
        head_dim = get("attention.key_length") or hidden // heads
        tokens = meta.get("tokenizer.ggml.tokens")
        vocab = get("vocab_size") or (tokens or {}).get("array_length") or 32000
        layers = int(get("block_count"))
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError("GGUF metadata lacks the attention shape") from None
    quant = GGUF_FILE_TYPES.get(meta.get("general.file_type", -1), "")
    # GGUF does not store a parameter count; the file size gives the weights directly.
    bpw = BYTES_PER_WEIGHT.get(quant, 0.6)
    params_b = (file_size / bpw / 1e9) if file_size else 0.0
    return Architecture(
        params_b=params_b,
        layers=layers,
        heads=heads,
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        vocab=int(vocab),
        max_context=int(get("context_length") or 4096),
        source="GGUF metadata",
        weights_bytes=file_size,
        quant=quant,
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
    backend: str  # "vllm" or "llamacpp"
    context: int
    gpus: list[GPUMemory]
    parallel: int = 1
    weights_dtype: str = "bf16"  # a BYTES_PER_WEIGHT key; GGUF files use their type
    kv_dtype: str = "fp16"
    n_gpu_layers: int | None = None  # llama.cpp -ngl; None: all
    gpu_memory_utilization: float = 0.9  # vLLM
    flash_attention: bool = True


@dataclass
class Estimate:
    weights_gib: float
    kv_cache_gib: float
    overhead_gib: float
    total_gib: float
    available_gib: float
    verdict: str  # fits / tight / does_not_fit
    max_context: int | None
    context: int
    layers_on_gpu: int
    kv_bytes_per_token: int
    source: str
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.verdict != "does_not_fit"

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def weights_bytes(arch: Architecture, dtype: str) -> float:
    if arch.weights_bytes:
        return float(arch.weights_bytes)
    per = BYTES_PER_WEIGHT.get(dtype) or BYTES_PER_WEIGHT.get(dtype.upper())
    if per is None:
        raise ValueError(f"unknown weight type {dtype!r}")
    return arch.params_b * 1e9 * per


def estimate(req: FitRequest) -> Estimate:
    """Estimate `req` against its GPUs; see the module docstring for the model."""
    arch = req.arch
    notes: list[str] = []
    n_gpus = max(len(req.gpus), 1)
    if req.backend == "llamacpp":
        ngl = arch.layers + 1 if req.n_gpu_layers is None else req.n_gpu_layers
        layers_on_gpu = min(ngl, arch.layers)
        share = 1.0 if ngl > arch.layers else layers_on_gpu / arch.layers
    else:
        layers_on_gpu, share = arch.layers, 1.0
    weights = weights_bytes(arch, arch.quant or req.weights_dtype) * share
    kv_per_token = int(2 * layers_on_gpu * arch.kv_heads * arch.head_dim * KV_BYTES.get(req.kv_dtype, 2))
    kv_tokens_per_ctx = req.parallel

    available: float
    if req.backend == "llamacpp":
        base = 0.25 * GiB * n_gpus
        # The output layer (and its f32 logits for one micro-batch) is on the GPU only when every
        # layer is offloaded; without flash attention the KQ scores grow with the context.
        compute_fixed = UBATCH * arch.vocab * 4 if share == 1.0 and ngl > arch.layers else 0
        compute_per_token = 0 if req.flash_attention or layers_on_gpu == 0 else arch.heads * UBATCH * 4
        available = sum(g.free_mib for g in req.gpus) * MiB
    else:
        base = 1.0 * GiB * n_gpus  # activations at the profiling run, CUDA graphs, NCCL buffers
        compute_fixed, compute_per_token = 0, 0
        util = req.gpu_memory_utilization
        available = sum(g.total_mib * util for g in req.gpus) * MiB
        for g in req.gpus:
            if g.free_mib < g.total_mib * util:
                notes.append(
                    f"GPU {g.index} has {g.free_mib / 1024:.1f} GiB free but vLLM asks for "
                    f"{g.total_mib * util / 1024:.1f} GiB ({util:g} of it): vLLM will refuse to start. Lower "
                    f"gpu-memory-utilization to {max(math.floor(g.free_mib / g.total_mib * 100) / 100 - 0.01, 0):.2f}"
                    " or free the GPU."
                )
    fixed = weights + base + compute_fixed
    per_ctx_token = kv_per_token * kv_tokens_per_ctx + compute_per_token
    kv = kv_per_token * req.context * kv_tokens_per_ctx
    overhead = base + compute_fixed + compute_per_token * req.context
    total = weights + kv + overhead

    if not req.gpus:
        verdict, notes = "does_not_fit", [*notes, "Choose at least one GPU."]
    elif total <= TIGHT * available:
        verdict = "fits"
    elif total <= available:
        verdict = "tight"
    else:
        verdict = "does_not_fit"
    if req.backend == "vllm" and notes:
        verdict = "does_not_fit"
    max_context: int | None = None
    if per_ctx_token > 0 and available > fixed:
        max_context = int((available - fixed) // per_ctx_token) // 256 * 256
        max_context = min(max_context, arch.max_context)
        if max_context < 256:
            max_context = None
    if req.context > arch.max_context:
        notes.append(f"The model was trained for {arch.max_context} tokens of context; {req.context} asks for more.")
    return Estimate(
        weights_gib=weights / GiB,
        kv_cache_gib=kv / GiB,
        overhead_gib=overhead / GiB,
        total_gib=total / GiB,
        available_gib=available / GiB,
        verdict=verdict,
        max_context=max_context,
        context=req.context,
        layers_on_gpu=layers_on_gpu,
        kv_bytes_per_token=kv_per_token,
        source=arch.source,
        notes=notes,
    )
