"""SGLang: `--mem-fraction-static` x total holds the weights and the KV pool; activations and CUDA
overhead live in the rest of the GPU."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from portal.i18n import Message

from .preallocating import Split, estimate_devices
from .types import Device, FitRequest, GiB, GPUMemory, MiB


def _gpu(req: FitRequest, g: GPUMemory, s: Split) -> tuple[float, float, float, Message | None]:
    budget = g.total_mib * MiB * req.gpu_memory_utilization
    outside = g.total_mib * MiB * (1 - req.gpu_memory_utilization)
    reason = None
    if s.act + s.overhead > outside:
        reason = Message(
            gettext_noop(
                "GPU %(gpu)s: activations and CUDA overhead need %(need).1f GiB outside "
                "SGLang's static share, which leaves %(left).1f GiB: lower --mem-fraction-static."
            ),
            gpu=g.index,
            need=(s.act + s.overhead) / GiB,
            left=outside / GiB,
        )
    return s.weights + s.per_seq, budget, budget - s.weights, reason


def devices(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
    return estimate_devices(req, context, _gpu)
