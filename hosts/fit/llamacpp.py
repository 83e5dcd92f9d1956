"""llama.cpp's memory: layers offloaded with -ngl, the KV cache, and its compute buffers."""

from __future__ import annotations

from .types import (
    BYTES_PER_WEIGHT,
    CUDA_CONTEXT,
    KV_BYTES,
    UBATCH,
    Device,
    FitRequest,
    GiB,
    MiB,
    Verdict,
    weights_bytes,
)

# Device backends whose flash-attention kernels llama.cpp's `-fa auto` turns on (it resolves auto at
# start to on when the device holding the KV cache supports the FLASH_ATTN_EXT op: CUDA, ROCm/HIP
# (the CUDA code), Metal, Vulkan and the CPU do).
FLASH_ATTENTION_BACKENDS = {"cuda", "rocm", "hip", "metal", "vulkan", "cpu"}


def flash_attention_of(req: FitRequest) -> str:
    """llama.cpp's -fa as the estimate takes it. `auto` is what this host's build did at its last
    launch when known, else what llama.cpp decides: on where the device backend supports it."""
    fa = req.flash_attention
    if isinstance(fa, bool):
        return "on" if fa else "off"
    if fa == "auto":
        if req.flash_attention_auto_on is not None:
            return "on" if req.flash_attention_auto_on else "off"
        on_gpu = bool(req.gpus) and req.n_gpu_layers != 0
        backend = req.device_backend.lower() if on_gpu else "cpu"
        return "on" if backend in FLASH_ATTENTION_BACKENDS else "off"
    return "on" if fa == "on" else "off"


def devices(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
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
        devices.append(Device("RAM", None, ram_need / GiB, 0.0, verdict=Verdict.UNKNOWN))
    parts["on_gpu"] = on_gpu
    return devices, parts
