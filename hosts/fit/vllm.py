"""vLLM: `gpu-memory-utilization` x total on every GPU holds weights, the profiling run's activation
peak and CUDA/NCCL overhead; the KV cache gets the rest. It refuses to start when a GPU has less
free memory than that share."""

from __future__ import annotations

from .preallocating import Split, estimate_devices
from .types import Device, FitRequest, GPUMemory, MiB, Verdict


def _gpu(req: FitRequest, g: GPUMemory, s: Split) -> tuple[float, float, float, Verdict | None]:
    budget = g.total_mib * MiB * req.gpu_memory_utilization
    pool = budget - s.weights - s.act - s.overhead
    need = s.weights + s.act + s.overhead + s.per_seq
    return need, budget, pool, Verdict.DOES_NOT_FIT if g.free_mib * MiB < budget else None


def devices(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
    return estimate_devices(req, context, _gpu)
