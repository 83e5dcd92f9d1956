"""SGLang: `--mem-fraction-static` x total holds the weights and the KV pool; activations and CUDA
overhead live in the rest of the GPU."""

from __future__ import annotations

from .preallocating import Split, estimate_devices
from .types import Device, FitRequest, GiB, GPUMemory, MiB


def _gpu(req: FitRequest, g: GPUMemory, s: Split) -> tuple[float, float, float, str]:
    budget = g.total_mib * MiB * req.gpu_memory_utilization
    outside = g.total_mib * MiB * (1 - req.gpu_memory_utilization)
    reason = ""
    if s.act + s.overhead > outside:
        reason = (
            f"GPU {g.index}: activations and CUDA overhead need {(s.act + s.overhead) / GiB:.1f} GiB outside "
            f"SGLang's static share, which leaves {outside / GiB:.1f} GiB: lower --mem-fraction-static."
        )
    return s.weights + s.per_seq, budget, budget - s.weights, reason


def devices(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
    return estimate_devices(req, context, _gpu)
