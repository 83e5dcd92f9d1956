"""SGLang: `--mem-fraction-static` x total holds the weights and the KV pool; activations and CUDA
overhead live in the rest of the GPU."""

from __future__ import annotations

from .preallocating import Split, estimate_devices
from .types import Device, FitRequest, GPUMemory, MiB, Verdict


def _gpu(req: FitRequest, g: GPUMemory, s: Split) -> tuple[float, float, float, Verdict | None]:
    budget = g.total_mib * MiB * req.gpu_memory_utilization
    outside = g.total_mib * MiB * (1 - req.gpu_memory_utilization)
    verdict = Verdict.DOES_NOT_FIT if s.act + s.overhead > outside else None
    return s.weights + s.per_seq, budget, budget - s.weights, verdict


def devices(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
    return estimate_devices(req, context, _gpu)
