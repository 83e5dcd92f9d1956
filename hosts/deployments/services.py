"""Deployment workflows: validate and save a spec, the command it runs, its VRAM fit.

Called by the deployment form, the API serializer and launch jobs alike.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from typing import Any

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.utils import timezone

from .. import backends, fit
from ..models import GPU, Deployment, Host
from ..remote import commands, ssh
from ..remote.ssh import Remote

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def generate_upstream_key() -> str:
    return "gpk-" + secrets.token_urlsafe(32)


def clean_deployment(
    *,
    host: Host,
    backend: str,
    model_path: str,
    served_model_name: str,
    gpu_indices: Any,
    port: Any,
    options: dict | None,
    extra_args: Any,
    instance: Deployment | None = None,
) -> dict[str, Any]:
    """Validate a deployment spec; returns cleaned values or raises a ValidationError by field."""
    errors: dict[str, list[str]] = {}
    try:
        impl = backends.get(backend)
    except KeyError as exc:
        raise ValidationError({"backend": [str(exc)]}) from None
    if not isinstance(gpu_indices, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in gpu_indices
    ):
        errors["gpu_indices"] = ["A list of GPU indices, e.g. [0, 1]."]
        gpu_indices = []
    elif len(set(gpu_indices)) != len(gpu_indices):
        errors["gpu_indices"] = ["Each GPU once."]
    else:
        known = set(GPU.objects.filter(host=host).values_list("index", flat=True))
        missing = sorted(set(gpu_indices) - known)
        if missing:
            errors["gpu_indices"] = [
                f"GPU {', '.join(map(str, missing))} not on {host} (known: {sorted(known) or 'none yet; refresh'})."
            ]
    try:
        port = int(port)
        if not 1024 <= port <= 65535:
            raise ValueError
    except (TypeError, ValueError):
        errors["port"] = ["A port between 1024 and 65535."]
    else:
        clash = Deployment.objects.filter(host=host, port=port)
        if instance is not None and instance.pk:
            clash = clash.exclude(pk=instance.pk)
        if clash.exists():
            errors["port"] = [f"Port {port} is already used by deployment {clash.first()} on this host."]
    try:
        options, extra = impl.clean(
            model_path=model_path,
            served_model_name=served_model_name,
            options=options,
            extra_args=extra_args,
            gpu_count=len(gpu_indices),
        )
    except ValidationError as exc:
        for key, messages in exc.message_dict.items():
            errors.setdefault(key, []).extend(messages)
        options, extra = {}, []
    if errors:
        raise ValidationError(errors)
    return {
        "backend": backend,
        "model_path": model_path,
        "served_model_name": served_model_name,
        "gpu_indices": gpu_indices,
        "port": port,
        "options": options,
        "extra_args": extra,
    }


def save_deployment(
    *, host: Host, name: str, fit_override: bool = False, user=None, instance=None, **spec
) -> Deployment:
    """Create or update a deployment from a spec validated by `clean_deployment`."""
    cleaned = clean_deployment(host=host, instance=instance, **spec)
    deployment = instance or Deployment(host=host, created_by=user, upstream_api_key=generate_upstream_key())
    deployment.name = name
    deployment.host = host
    deployment.fit_override = fit_override
    for key, value in cleaned.items():
        setattr(deployment, key, value)
    deployment.full_clean(exclude=["upstream_api_key"])
    deployment.save()
    return deployment


def launch_spec(deployment: Deployment) -> backends.LaunchSpec:
    """The backend's input. A host registered by a loopback address only needs a loopback server."""
    return backends.LaunchSpec(
        bind_host="127.0.0.1" if deployment.host.address in LOOPBACK else "0.0.0.0",
        model_path=deployment.model_path,
        served_model_name=deployment.served_model_name,
        gpu_indices=list(deployment.gpu_indices),
        port=deployment.port,
        options=dict(deployment.options),
        extra_args=list(deployment.extra_args),
        api_key=deployment.upstream_api_key,
    )


def command_preview(deployment: Deployment) -> str:
    """The exact command the job will run, with the API key masked."""
    impl = backends.get(deployment.backend)
    spec = launch_spec(deployment)
    return backends.preview(impl.argv(spec), spec.env, spec.api_key)


def fit_request(deployment: Deployment, arch: fit.Architecture) -> fit.FitRequest:
    impl = backends.get(deployment.backend)
    params = impl.fit_params(deployment.options)
    gpus = [
        fit.GPUMemory(index=g.index, total_mib=g.memory_total_mib or 0, free_mib=g.memory_free_mib or 0)
        for g in GPU.objects.filter(host=deployment.host, index__in=deployment.gpu_indices)
    ]
    if deployment.backend == "llamacpp" and not arch.quant:
        arch.quant = fit.quant_from_name(deployment.model_path)
    return fit.FitRequest(arch=arch, backend=deployment.backend, gpus=gpus, **params)


def check_fit(
    deployment: Deployment, remote: Remote | None = None, *, arch: fit.Architecture | None = None
) -> dict[str, Any]:
    """Estimate and store it on the deployment. Without `remote` or `arch` only presets are used."""
    if arch is None and remote is not None:
        arch = commands.read_architecture(remote, deployment.backend, deployment.model_path)
    arch = arch or fit.preset_for(deployment.model_path)
    if arch is None:
        result = {
            "verdict": "unknown",
            "notes": ["Unknown model: no config.json/GGUF readable on the host and no preset matches its name."],
        }
    else:
        request = fit_request(deployment, arch)
        estimate = fit.estimate(request)
        result = estimate.as_dict()
        result["advice"] = fit_advice(deployment, request, estimate)
    result["checked"] = timezone.now().isoformat()
    Deployment.objects.filter(pk=deployment.pk).update(last_fit=result)
    deployment.last_fit = result
    return result


# What to change in the form for the estimate to fit: (option, flag) of the context and the KV type.
_CONTEXT_OPTION = {"vllm": ("max_model_len", "--max-model-len"), "llamacpp": ("ctx_size", "-c")}
_SMALLER_KV = {"vllm": ("fp8", "use --kv-cache-dtype fp8"), "llamacpp": ("q8_0", "use KV cache type q8_0")}


def fit_advice(deployment: Deployment, request: fit.FitRequest, estimate: fit.Estimate) -> list[str]:
    """The changes that make a deployment that does not fit (or is tight) fit, each tried with the
    same estimate: a smaller context, a smaller KV cache type, more GPUs. Plain text."""
    if estimate.verdict == "fits":
        return []
    advice: list[str] = []
    option, flag = _CONTEXT_OPTION.get(deployment.backend, ("", ""))
    if option and estimate.max_context and estimate.max_context < request.context:
        advice.append(f"Lower the context ({flag}) to {estimate.max_context:,} tokens.")
    kv = _SMALLER_KV.get(deployment.backend)
    if kv and request.kv_dtype not in ("fp8", "q8_0", "q4_0"):
        smaller = fit.estimate(dataclasses.replace(request, kv_dtype=kv[0]))
        if smaller.fits:
            tight = " (tightly)" if smaller.verdict == "tight" else ""
            advice.append(f"Or {kv[1]}: the KV cache halves and {request.context:,} tokens fit{tight}.")
    chosen = set(deployment.gpu_indices)
    spare = sorted(
        (g for g in GPU.objects.filter(host=deployment.host) if g.index not in chosen),
        key=lambda g: -(g.memory_free_mib or 0),
    )
    gpus = list(request.gpus)
    for g in spare:
        gpus.append(fit.GPUMemory(index=g.index, total_mib=g.memory_total_mib or 0, free_mib=g.memory_free_mib or 0))
        if fit.estimate(dataclasses.replace(request, gpus=gpus)).verdict == "fits":
            names = ", ".join(f"#{m.index}" for m in gpus)
            advice.append(f"Or pick {len(gpus)} GPUs ({names}).")
            break
    return advice


ARCHITECTURE_CACHE_SECONDS = 600


def host_architecture(deployment: Deployment) -> fit.Architecture | None:
    """The model's architecture read from its files on the host, remembered for a while per host
    and path, so the deploy form's live estimate connects once per model, not once per keystroke.
    None when the host cannot be reached or the files say nothing (the estimate then uses presets)."""
    host = deployment.host
    if not host.host_key_fingerprint:
        return None
    digest = hashlib.sha256(f"{deployment.backend}\0{deployment.model_path}".encode()).hexdigest()[:32]
    key = f"hosts:architecture:{host.pk}:{digest}"
    cached = cache.get(key)
    if cached is not None:
        return cached[0]
    try:
        with ssh.connect(host) as remote:
            arch = commands.read_architecture(remote, deployment.backend, deployment.model_path)
    except ssh.SSHError:
        return None
    cache.set(key, (arch,), ARCHITECTURE_CACHE_SECONDS)
    return arch
