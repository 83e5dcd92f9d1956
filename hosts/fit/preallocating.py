"""vLLM and SGLang: servers that take a fixed share of every GPU up front and fill it with KV cache."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from django.utils.translation import gettext_noop

from portal.i18n import Message

from .architecture import Architecture
from .types import KV_BYTES, NCCL_BUFFERS, VLLM_NON_TORCH, Device, FitRequest, GiB, GPUMemory, Verdict, weights_bytes


def _divisors_upto(n: int, limit: int) -> list[int]:
    return [d for d in range(1, max(limit, 1) + 1) if n % d == 0]


def parallel_problems(arch: Architecture, n_gpus: int, tp: int, pp: int) -> list[str]:
    """What vLLM/SGLang would refuse about this tensor x pipeline split, in English."""
    return [m.english for m in parallel_messages(arch, n_gpus, tp, pp)]


def parallel_messages(arch: Architecture, n_gpus: int, tp: int, pp: int) -> list[Message]:
    """`parallel_problems` as messages, to show in the reader's language."""
    problems = []
    if tp * pp != n_gpus:
        problems.append(
            Message(
                gettext_noop(
                    "Tensor parallel %(tp)s x pipeline parallel %(pp)s = %(product)s, but %(gpus)s GPU(s) are chosen."
                ),
                tp=tp,
                pp=pp,
                product=tp * pp,
                gpus=n_gpus,
            )
        )
    if arch.heads % tp:
        ok = ", ".join(map(str, _divisors_upto(arch.heads, max(n_gpus, 8))))
        problems.append(
            Message(
                gettext_noop(
                    "Tensor parallel size %(tp)s does not divide the model's %(heads)s attention heads; "
                    "use one of %(sizes)s."
                ),
                tp=tp,
                heads=arch.heads,
                sizes=ok,
            )
        )
    elif not arch.mla and arch.kv_heads % tp and tp % arch.kv_heads:
        problems.append(
            Message(
                gettext_noop(
                    "Tensor parallel size %(tp)s neither divides the model's %(kv_heads)s KV heads "
                    "nor is a multiple of them."
                ),
                tp=tp,
                kv_heads=arch.kv_heads,
            )
        )
    if pp > arch.layers:
        problems.append(
            Message(
                gettext_noop("Pipeline parallel size %(pp)s is more than the model's %(layers)s layers."),
                pp=pp,
                layers=arch.layers,
            )
        )
    return problems


def default_batched_tokens(backend: str, gpus: list[GPUMemory]) -> int:
    """vLLM's default max-num-batched-tokens for `vllm serve` (8192 on GPUs of 70 GiB or more, else
    2048); SGLang's chunked-prefill-size default is 8192 (2048 below 20 GiB)."""
    smallest = min((g.total_mib for g in gpus), default=0) / 1024
    if backend == "sglang":
        return 8192 if smallest >= 20 else 2048
    return 8192 if smallest >= 70 else 2048


@dataclass
class Split:
    """One GPU's share of a pre-allocating server: weights, one sequence's KV, activations, overhead."""

    weights: float
    per_seq: float
    act: float
    overhead: float


# A backend's rule for one GPU: (what it needs, what the server reserves, its KV pool, and why the
# rule refuses it when it does, None to judge need against the reservation).
GPURule = Callable[[FitRequest, GPUMemory, Split], tuple[float, float, float, Message | None]]


def estimate_devices(req: FitRequest, context: int, rule: GPURule) -> tuple[list[Device], dict[str, float]]:
    """The split over TP x PP shared by vLLM and SGLang; `rule` is what differs per backend."""
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
    split = Split(weights=w, per_seq=per_seq, act=act, overhead=overhead)
    devices, pools = [], []
    for g in req.gpus:
        need, budget, pool, reason = rule(req, g, split)
        if not reason and pool < per_seq:
            reason = Message(
                gettext_noop(
                    "GPU %(gpu)s: the KV cache gets %(pool).1f GiB after the weights and activations, "
                    "less than one sequence of %(context)s tokens needs (%(need).1f GiB)."
                ),
                gpu=g.index,
                pool=max(pool, 0) / GiB,
                context=context,
                need=per_seq / GiB,
            )
        pools.append(pool)
        verdict = Verdict.DOES_NOT_FIT if reason else None
        devices.append(
            Device(g.label or f"GPU {g.index}", g.index, need / GiB, budget / GiB, verdict=verdict, reason=reason)
        )
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
