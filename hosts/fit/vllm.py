"""vLLM: `gpu-memory-utilization` x total on every GPU holds weights, the profiling run's activation
peak and CUDA/NCCL overhead; the KV cache gets the rest. It refuses to start when a GPU has less
free memory than that share."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from portal.i18n import Message

from .preallocating import Split, estimate_devices
from .types import Device, FitRequest, GiB, GPUMemory, MiB


def _gpu(req: FitRequest, g: GPUMemory, s: Split) -> tuple[float, float, float, Message | None]:
    util = req.gpu_memory_utilization
    budget = g.total_mib * MiB * util
    pool = budget - s.weights - s.act - s.overhead
    need = s.weights + s.act + s.overhead + s.per_seq
    reason = None
    if g.free_mib * MiB < budget:
        reason = Message(
            gettext_noop(
                "GPU %(gpu)s has %(free).1f GiB free, but vLLM reserves %(reserved).1f GiB "
                "(%(share)g of its memory) when it starts: another process holds the rest."
            ),
            gpu=g.index,
            free=g.free_mib / 1024,
            reserved=budget / GiB,
            share=util,
        )
    return need, budget, pool, reason


def devices(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
    return estimate_devices(req, context, _gpu)
