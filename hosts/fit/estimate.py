"""The estimate and its advice, over the per-backend estimators (`ESTIMATORS`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.utils.translation import gettext_noop

from portal.i18n import Message

from . import llamacpp, sglang, vllm
from .architecture import Architecture
from .preallocating import parallel_messages
from .types import (
    BYTES_PER_WEIGHT,
    GGUF_LADDER,
    KV_BYTES,
    Device,
    Estimate,
    FitRequest,
    GiB,
    Verdict,
    judge,
    weights_bytes,
    worst,
)

Estimator = Callable[[FitRequest, int], tuple[list[Device], dict[str, float]]]
# One estimator per backend: the devices it needs at a context, and the parts of the total.
ESTIMATORS: dict[str, Estimator] = {"llamacpp": llamacpp.devices, "vllm": vllm.devices, "sglang": sglang.devices}


def _largest_context(arch: Architecture, fits_at: Callable[[int], bool]) -> int | None:
    """The largest context (a multiple of 256, at most the trained one) for which `fits_at` holds."""
    lo, hi = 0, max(arch.max_context // 256, 0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits_at(mid * 256):
            lo = mid
        else:
            hi = mid - 1
    return lo * 256 if lo else None


def _devices(req: FitRequest, context: int) -> tuple[list[Device], dict[str, float]]:
    devices, parts = ESTIMATORS[req.backend](req, context)
    corrected = req.correction_samples > 0 and 0.5 <= req.correction <= 2.0
    for d in devices:
        if corrected and d.name != "RAM":
            d.need_gib *= req.correction
        if not d.verdict:
            d.verdict = judge(d.need_gib, d.have_gib)
    return devices, parts


def estimate(req: FitRequest, *, advise: bool = True) -> Estimate:
    """Estimate `req` against its GPUs (or RAM); see the module docstring for the model."""
    arch = req.arch
    notes: list[Message] = []
    problems: list[Message] = []
    devices, parts = _devices(req, req.context)
    if req.backend != "llamacpp":
        if not req.gpus:
            problems.append(
                Message(
                    gettext_noop("%(backend)s needs at least one GPU."),
                    backend="SGLang" if req.backend == "sglang" else "vLLM",
                )
            )
        else:
            problems += parallel_messages(arch, len(req.gpus), int(parts["tp"]), int(parts["pp"]))
        for g in req.gpus if req.backend == "vllm" else []:
            util = req.gpu_memory_utilization
            if g.free_mib < g.total_mib * util:
                notes.append(
                    Message(
                        gettext_noop(
                            "GPU %(gpu)s has %(free).1f GiB free but vLLM asks for %(asked).1f GiB (%(share)g of it): "
                            "vLLM will refuse to start. Lower gpu-memory-utilization to %(lower).2f or free the GPU."
                        ),
                        gpu=g.index,
                        free=g.free_mib / 1024,
                        asked=g.total_mib * util / 1024,
                        share=util,
                        lower=max(math.floor(g.free_mib / g.total_mib * 100) / 100 - 0.01, 0),
                    )
                )
    verdict = Verdict.DOES_NOT_FIT if problems else worst([d.verdict or Verdict.UNKNOWN for d in devices])
    short = next((d for d in devices if d.verdict == Verdict.DOES_NOT_FIT), None)
    if short is not None and not problems:
        what = Message(gettext_noop("the host's RAM")) if short.name == "RAM" else short.name
        if short.need_gib > short.have_gib or not short.reason:
            notes.insert(
                0,
                Message(
                    gettext_noop("%(device)s is short: needs about %(need).1f GiB, has %(has).1f GiB."),
                    device=what,
                    need=short.need_gib,
                    has=short.have_gib,
                ),
            )
        else:  # enough memory in all, refused by the server's own rule (a busy GPU, a KV pool too small)
            notes.insert(0, short.reason)
    if any(d.verdict == Verdict.UNKNOWN for d in devices):
        notes.append(
            Message(
                gettext_noop(
                    "The host's free RAM is not known yet (refresh the inventory); judged against it once known."
                )
            )
        )

    def fits_at(ctx: int) -> bool:
        return all(d.verdict != Verdict.DOES_NOT_FIT for d in _devices(req, ctx)[0])

    max_context = None if problems or not devices else _largest_context(arch, fits_at)
    if req.context > arch.max_context:
        notes.append(
            Message(
                gettext_noop("The model was trained for %(trained)s tokens of context; %(context)s asks for more."),
                trained=arch.max_context,
                context=req.context,
            )
        )
    fa = ""
    if req.backend == "llamacpp":
        fa = llamacpp.flash_attention_of(req)
        if req.flash_attention == "auto" and parts.get("on_gpu"):
            if req.flash_attention_auto_on is False:
                notes.append(
                    Message(
                        gettext_noop(
                            "-fa auto is counted as off: this host's llama.cpp build ran it off at its last launch. "
                            "-fa on saves the attention-score buffer."
                        )
                    )
                )
            elif req.flash_attention_auto_on is None:
                notes.append(
                    Message(
                        gettext_noop(
                            "-fa auto is counted as %(flash)s, as llama.cpp decides it on a %(device)s GPU; "
                            "the first launch's log tells the portal what this build did."
                        ),
                        flash=fa,
                        device=req.device_backend.upper(),
                    )
                )
    if req.correction_samples and 0.5 <= req.correction <= 2.0:
        notes.append(
            Message(
                gettext_noop(
                    "Corrected by %(factor).2fx: what %(backend)s allocated on this host over "
                    "%(launches)s launch(es), compared with the estimate."
                ),
                factor=req.correction,
                backend=req.backend,
                launches=req.correction_samples,
            )
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
                Message(
                    gettext_noop(
                        "This leaves room for %(sequences)g concurrent sequences of %(context)s tokens "
                        "(%(tokens)s tokens of KV cache per GPU)."
                    ),
                    sequences=result.max_concurrency,
                    context=req.context,
                    tokens=result.kv_cache_tokens,
                )
            )
    if advise and verdict == Verdict.DOES_NOT_FIT and not problems:
        result.advice = advice(req)
        if result.advice:
            first = result.advice[0]
            change = Message.from_stored(first["change"], first["change_code"], first["change_params"])
            notes.append(Message(gettext_noop("Smallest change that fits: %(change)s."), change=change))
    result.set_messages(notes, problems)
    return result


# advice ------------------------------------------------------------------------------------------------------
def advice(req: FitRequest) -> list[dict[str, Any]]:
    """Changes that turn "does not fit" into "fits", smallest first: each {change, cost, fields, estimate}."""
    a = req.arch
    tries: list[tuple[Message, float, dict[str, Any], FitRequest]] = []
    base = estimate(req, advise=False)
    if base.max_context and base.max_context < req.context:
        lost = 1 - base.max_context / req.context
        tries.append(
            (
                Message(gettext_noop("lower the context to %(context)s"), context=base.max_context),
                lost,
                {"context": base.max_context},
                replace(req, context=base.max_context),
            )
        )
    kv_steps = ["q8_0", "q4_0"] if req.backend == "llamacpp" else ["fp8"]
    if req.kv_dtype in ("fp16", "bf16"):
        for cost, kv in zip((0.15, 0.35), kv_steps, strict=False):
            tries.append(
                (
                    Message(gettext_noop("KV cache type %(kv)s"), kv=kv),
                    cost,
                    {"kv_dtype": kv},
                    replace(req, kv_dtype=kv),
                )
            )
    if req.backend == "llamacpp" and req.gpus:
        ngl = min(a.layers if req.n_gpu_layers is None else req.n_gpu_layers, a.layers)
        lo, hi = 0, ngl - 1
        while lo < hi:  # the most layers that still fit
            mid = (lo + hi + 1) // 2
            if estimate(replace(req, n_gpu_layers=mid), advise=False).verdict != Verdict.DOES_NOT_FIT:
                lo = mid
            else:
                hi = mid - 1
        if lo > 0:
            tries.append(
                (
                    Message(
                        gettext_noop("-ngl %(layers)s (keep %(cpu)s layers on the CPU)"), layers=lo, cpu=a.layers - lo
                    ),
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
            (
                Message(gettext_noop("add GPU %(gpus)s (%(count)s in all)"), gpus=label, count=len(gpus)),
                0.25 * extra,
                {"gpu_indices": [g.index for g in gpus]},
                more,
            )
        )
    if req.backend == "llamacpp" and a.quant in GGUF_LADDER:
        here, size = BYTES_PER_WEIGHT[a.quant], weights_bytes(a, a.quant)
        for step, q in enumerate(GGUF_LADDER[GGUF_LADDER.index(a.quant) + 1 :], start=1):
            smaller_size = int(size * BYTES_PER_WEIGHT[q] / here)
            smaller = replace(a, quant=q, weights_bytes=smaller_size)
            tries.append(
                (
                    Message(
                        gettext_noop("a %(quant)s file of the model (about %(size).1f GiB)"),
                        quant=q,
                        size=smaller_size / GiB,
                    ),
                    0.3 * step,
                    {"quant": q},
                    replace(req, arch=smaller),
                )
            )
    elif req.backend != "llamacpp" and not a.quant and req.weights_dtype in ("bf16", "fp16"):
        tries.append(
            (
                Message(gettext_noop("FP8 weights (--quantization fp8 or an FP8 checkpoint)")),
                0.3,
                {"weights_dtype": "fp8"},
                replace(req, weights_dtype="fp8"),
            )
        )
    found = []
    for change, cost, fields_, candidate in tries:
        est = estimate(candidate, advise=False)
        if est.verdict != Verdict.DOES_NOT_FIT:
            found.append(
                {
                    **change.columns("change"),  # English, and its msgid and values for the reader's language
                    "cost": round(cost, 3),
                    "fields": fields_,
                    "verdict": est.verdict,
                    "total_gib": round(est.total_gib, 2),
                }
            )
    return sorted(found, key=lambda f: f["cost"])
