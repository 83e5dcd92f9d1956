"""The estimate and its advice, over the per-backend estimators (`ESTIMATORS`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from . import llamacpp, sglang, vllm
from .architecture import Architecture
from .preallocating import parallel_problems
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
    verdict = Verdict.DOES_NOT_FIT if problems else worst([d.verdict or Verdict.UNKNOWN for d in devices])
    short = next((d for d in devices if d.verdict == Verdict.DOES_NOT_FIT), None)
    if short is not None and not problems:
        what = "the host's RAM" if short.name == "RAM" else short.name
        if short.need_gib > short.have_gib or not short.reason:
            notes.insert(0, f"{what} is short: needs about {short.need_gib:.1f} GiB, has {short.have_gib:.1f} GiB.")
        else:  # enough memory in all, refused by the server's own rule (a busy GPU, a KV pool too small)
            notes.insert(0, short.reason)
    if any(d.verdict == Verdict.UNKNOWN for d in devices):
        notes.append("The host's free RAM is not known yet (refresh the inventory); judged against it once known.")

    def fits_at(ctx: int) -> bool:
        return all(d.verdict != Verdict.DOES_NOT_FIT for d in _devices(req, ctx)[0])

    max_context = None if problems or not devices else _largest_context(arch, fits_at)
    if req.context > arch.max_context:
        notes.append(f"The model was trained for {arch.max_context} tokens of context; {req.context} asks for more.")
    fa = ""
    if req.backend == "llamacpp":
        fa = llamacpp.flash_attention_of(req)
        if req.flash_attention == "auto" and parts.get("on_gpu"):
            if req.flash_attention_auto_on is False:
                notes.append(
                    "-fa auto is counted as off: this host's llama.cpp build ran it off at its last launch. "
                    "-fa on saves the attention-score buffer."
                )
            elif req.flash_attention_auto_on is None:
                notes.append(
                    f"-fa auto is counted as {fa}, as llama.cpp decides it on a {req.device_backend.upper()} GPU; "
                    "the first launch's log tells the portal what this build did."
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
    if advise and verdict == Verdict.DOES_NOT_FIT and not problems:
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
            if estimate(replace(req, n_gpu_layers=mid), advise=False).verdict != Verdict.DOES_NOT_FIT:
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
        if est.verdict != Verdict.DOES_NOT_FIT:
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
