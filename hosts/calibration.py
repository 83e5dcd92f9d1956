"""What the server actually allocated, from its own start-up log, next to what the estimate said.

After a launch is healthy the job reads the head of the server's log and parses its memory report:

- llama.cpp: `load_tensors: CUDA0 model buffer size = … MiB`, `llama_kv_cache: CUDA0 KV buffer
  size = … MiB`, `… CUDA0 compute buffer size = … MiB` per device (older builds: `llm_load_tensors`,
  `llama_kv_cache_init`, `llama_new_context_with_model`), and whether `-fa auto` turned flash
  attention on;
- vLLM: `Model loading took … GiB`, `Available KV cache memory: … GiB` (V0: `kv_cache_size=…GiB`),
  `GPU KV cache size: … tokens`, `Maximum concurrency for … tokens per request: …x`;
- SGLang: `Load weight end. … mem usage=… GB`, `KV Cache is allocated. #tokens: …, K size: … GB,
  V size: … GB`, `max_total_num_tokens=…`.

`compare` puts actual and estimate side by side (the deployment page shows it); `record` folds the
ratio into the host's per-backend correction (`Host.fit_calibration`), which later estimates on
that host apply and the host page shows. Ratios outside 0.5-2 are shown but not applied.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils.translation import gettext_noop

from portal.i18n import Message

if TYPE_CHECKING:
    from .models import Deployment, Host

KEEP_SAMPLES = 10
APPLIED = (0.5, 2.0)  # ratios outside are a misread log or a different build: shown, not applied

# llama.cpp -----------------------------------------------------------------------------------------------
_LLAMA_BUFFER = re.compile(
    r"(?P<dev>[A-Za-z][\w]*)\s+(?P<kind>model|KV|compute|output)\s+buffer size\s*=\s*(?P<mib>[\d.]+)\s*MiB"
)
_LLAMA_OLD_MODEL = re.compile(r"llm_load_tensors:\s+(?P<dev>[A-Za-z][\w]*)\s+buffer size\s*=\s*(?P<mib>[\d.]+)\s*MiB")
_LLAMA_FA = re.compile(
    r"Flash Attention (?P<word>enabled|disabled)|flash_attn\s*=\s*(?P<value>\w+)(?:\s*->\s*(?P<resolved>\w+))?"
)
_GPU_DEVICE = re.compile(r"^(CUDA|ROCm|HIP|Vulkan|Metal|SYCL|MUSA|CANN)\d*$")


def parse_llamacpp_log(log: str) -> dict[str, Any]:
    """Buffer sizes per device (MiB) and the flash-attention setting llama.cpp reports."""
    devices: dict[str, dict[str, float]] = {}
    for m in _LLAMA_BUFFER.finditer(log):
        kind = m["kind"].lower()
        per = devices.setdefault(m["dev"], {})
        mib = float(m["mib"])
        per[kind] = per.get(kind, 0.0) + mib if kind == "model" else mib  # several model files add up
    if not any("model" in d for d in devices.values()):
        for m in _LLAMA_OLD_MODEL.finditer(log):
            per = devices.setdefault(m["dev"], {})
            per["model"] = per.get("model", 0.0) + float(m["mib"])
    if not devices:
        return {}
    fa = ""
    for m in _LLAMA_FA.finditer(log):
        if m["word"]:
            fa = "on" if m["word"] == "enabled" else "off"
        else:
            value = (m["resolved"] or m["value"]).lower()
            fa = {
                "1": "on",
                "enabled": "on",
                "true": "on",
                "on": "on",
                "0": "off",
                "disabled": "off",
                "off": "off",
            }.get(value, fa)
    gpu = {d: v for d, v in devices.items() if _GPU_DEVICE.match(d)}
    host = {d: v for d, v in devices.items() if d not in gpu}
    return {
        "backend": "llamacpp",
        "devices": devices,
        "gpu": {k: round(sum(v.get(k, 0.0) for v in gpu.values()), 2) for k in ("model", "kv", "compute")},
        "host": {k: round(sum(v.get(k, 0.0) for v in host.values()), 2) for k in ("model", "kv", "compute")},
        "flash_attention": fa,
    }


# vLLM -------------------------------------------------------------------------------------------------------
_NUM = r"([\d][\d,]*\.?\d*)"
_VLLM = {
    "weights_gib": re.compile(r"(?:Loading model weights took|Model loading took)\s+" + _NUM + r"\s*Gi?B"),
    "kv_pool_gib": re.compile(
        r"(?:Available KV cache memory:\s*|kv_cache_size=|reserved for KV Cache is\s*)" + _NUM + r"\s*GiB"
    ),
    "kv_cache_tokens": re.compile(r"GPU KV cache size:\s*" + _NUM + r"\s*tokens"),
    "gpu_blocks": re.compile(r"# GPU blocks:\s*" + _NUM),
}
_VLLM_CONCURRENCY = re.compile(r"Maximum concurrency for\s*" + _NUM + r"\s*tokens per request:\s*" + _NUM + r"x")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse_vllm_log(log: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, pattern in _VLLM.items():
        m = pattern.search(log)
        if m:
            found[key] = _number(m.group(1))
    m = _VLLM_CONCURRENCY.search(log)
    if m:
        found["context"] = int(_number(m.group(1)))
        found["max_concurrency"] = _number(m.group(2))
    for key in ("kv_cache_tokens", "gpu_blocks"):
        if key in found:
            found[key] = int(found[key])
    return {"backend": "vllm", **found} if found else {}


# SGLang -----------------------------------------------------------------------------------------------------
_SGLANG_WEIGHTS = re.compile(r"Load weight end\..*?mem usage=\s*" + _NUM + r"\s*GB")
_SGLANG_KV = re.compile(
    r"KV Cache is allocated\. #tokens:\s*" + _NUM + r", K size:\s*" + _NUM + r"\s*GB, V size:\s*" + _NUM
)
_SGLANG_TOKENS = re.compile(r"max_total_num_tokens=" + _NUM)


def parse_sglang_log(log: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if m := _SGLANG_WEIGHTS.search(log):
        found["weights_gib"] = _number(m.group(1))
    if m := _SGLANG_KV.search(log):
        found["kv_cache_tokens"] = int(_number(m.group(1)))
        found["kv_pool_gib"] = round(_number(m.group(2)) + _number(m.group(3)), 2)
    if m := _SGLANG_TOKENS.search(log):
        found["kv_cache_tokens"] = int(_number(m.group(1)))
    return {"backend": "sglang", **found} if found else {}


# compare and record --------------------------------------------------------------------------------------------
def _row(what: str, estimate: float | None, actual: float | None) -> dict[str, Any]:
    ratio = round(actual / estimate, 2) if estimate and actual is not None else None
    return {
        "what": what,
        "estimate": None if estimate is None else round(estimate, 2),
        "actual": actual,
        "ratio": ratio,
    }


def compare(estimate: dict[str, Any], actual: dict[str, Any]) -> dict[str, Any]:
    """Estimate and allocation side by side; `ratio` is actual / estimate of what both cover."""
    if not actual or not estimate.get("verdict") or estimate.get("total_gib") is None:
        return {}
    rows: list[dict[str, Any]] = []
    notes: list[Message] = []
    if actual["backend"] == "llamacpp":
        on_gpu = (estimate.get("layers_on_gpu") or 0) > 0
        if on_gpu and not any(actual["gpu"].values()):
            on_gpu = False
            notes.append(
                Message(
                    gettext_noop(
                        "The estimate put layers on a GPU but llama.cpp allocated nothing there: is this build "
                        "CPU-only (no CUDA backend)? Compared with what it allocated in RAM."
                    )
                )
            )
        side = actual["gpu" if on_gpu else "host"]
        weights = estimate.get("weights_gib") if on_gpu else estimate.get("model_gib", estimate.get("weights_gib"))
        parts = [
            (gettext_noop("Weights (MiB)"), weights, side["model"]),
            (gettext_noop("KV cache (MiB)"), estimate.get("kv_cache_gib"), side["kv"]),
            (gettext_noop("Compute buffers (MiB)"), estimate.get("compute_gib"), side["compute"]),
        ]
        for what, est_gib, act_mib in parts:
            rows.append(_row(what, None if est_gib is None else est_gib * 1024, act_mib))
        est_sum = sum((r["estimate"] or 0) for r in rows)
        act_sum = sum((r["actual"] or 0) for r in rows)
        rows.append(_row(gettext_noop("Total of the buffers (MiB)"), est_sum, round(act_sum, 2)))
        ratio = round(act_sum / est_sum, 3) if est_sum else None
    else:
        n = max(len(estimate.get("devices") or []), 1)
        rows.append(
            _row(
                gettext_noop("Weights per GPU (GiB)"), (estimate.get("weights_gib") or 0) / n, actual.get("weights_gib")
            )
        )
        rows.append(
            _row(gettext_noop("KV cache memory per GPU (GiB)"), estimate.get("kv_pool_gib"), actual.get("kv_pool_gib"))
        )
        rows.append(
            _row(gettext_noop("KV cache tokens"), estimate.get("kv_cache_tokens"), actual.get("kv_cache_tokens"))
        )
        rows.append(
            _row(gettext_noop("Maximum concurrency"), estimate.get("max_concurrency"), actual.get("max_concurrency"))
        )
        budget = (estimate.get("devices") or [{}])[0].get("have_gib")
        ratio = None
        if budget and actual.get("kv_pool_gib") is not None and estimate.get("kv_pool_gib") is not None:
            est_rest, act_rest = budget - estimate["kv_pool_gib"], budget - actual["kv_pool_gib"]
            ratio = round(act_rest / est_rest, 3) if est_rest > 0 else None  # weights + activations + overhead
    return {
        "rows": rows,  # each row's `what` in English; the page translates it
        "ratio": ratio,
        "flash_attention": actual.get("flash_attention", ""),
        "notes": [n.english for n in notes],
        "note_items": [n.as_item() for n in notes],  # the same notes as messages, for the reader's language
    }


def record(deployment: Deployment, actual: dict[str, Any]) -> dict[str, Any]:
    """Store the comparison on the deployment and fold its ratio into the host's correction."""
    from .models import Deployment, Host

    result = {"actual": actual, **compare(deployment.last_fit or {}, actual)}
    Deployment.objects.filter(pk=deployment.pk).update(last_allocation=result)
    deployment.last_allocation = result
    with transaction.atomic():
        host = Host.objects.select_for_update().get(pk=deployment.host_id)
        calibration = dict(host.fit_calibration or {})
        entry = dict(calibration.get(deployment.backend) or {})
        if result.get("ratio") and APPLIED[0] <= result["ratio"] <= APPLIED[1]:
            samples = [*entry.get("samples", []), result["ratio"]][-KEEP_SAMPLES:]
            entry.update(samples=samples, ratio=round(sum(samples) / len(samples), 3))
        elif result.get("ratio"):  # shown, kept apart, never averaged into later estimates
            entry["rejected"] = [*entry.get("rejected", []), result["ratio"]][-KEEP_SAMPLES:]
        if result.get("flash_attention") and (deployment.options or {}).get("flash_attn", "auto") == "auto":
            entry["flash_attention_auto"] = result["flash_attention"]
        if entry:
            calibration[deployment.backend] = entry
            Host.objects.filter(pk=host.pk).update(fit_calibration=calibration)
            deployment.host.fit_calibration = calibration
    return result


def correction_for(host: Host, backend: str) -> dict[str, Any]:
    """FitRequest fields from the host's calibration for `backend`."""
    entry = (getattr(host, "fit_calibration", None) or {}).get(backend) or {}
    fields: dict[str, Any] = {}
    if entry.get("ratio"):
        fields.update(correction=float(entry["ratio"]), correction_samples=len(entry.get("samples", [])))
    if entry.get("flash_attention_auto") in ("on", "off"):
        fields["flash_attention_auto_on"] = entry["flash_attention_auto"] == "on"
    return fields
