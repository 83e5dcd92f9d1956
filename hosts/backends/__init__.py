"""Inference-server backends behind a small registry: one module per kind.

A backend turns a deployment (model, GPUs, port, typed options, extra tokens, API key) into the
argument list that starts its server, validates everything a person typed on the way, and knows
how to ask the running server for its context window.

    backend = get("llamacpp")
    options = backend.clean(model_path, options, extra_args, gpu_count)   # raises ValidationError
    argv = backend.argv(spec)
"""

from __future__ import annotations

from .base import Backend, LaunchSpec, Option, Secret, mask, preview
from .llamacpp import LlamaCpp
from .sglang import SGLang
from .vllm import VLLM

REGISTRY: dict[str, Backend] = {b.kind: b for b in (VLLM(), SGLang(), LlamaCpp())}


def get(kind: str) -> Backend:
    try:
        return REGISTRY[kind]
    except KeyError:
        raise KeyError(f"unknown backend {kind!r}; known: {', '.join(REGISTRY)}") from None


__all__ = ["REGISTRY", "Backend", "LaunchSpec", "Option", "Secret", "get", "mask", "preview"]
