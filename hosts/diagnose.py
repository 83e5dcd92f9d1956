"""Why a server died, in words an admin can act on, from its exit code and the end of its log.

The patterns are llama.cpp's and vLLM's own phrasings (tests/hosts/test_launch.py has real lines).
"""

from __future__ import annotations

import re

from . import backends
from .models import Deployment

_REASONS = [
    (re.compile(r"address already in use|couldn't bind|Errno 98|bind\(\) failed", re.I), "port"),
    (
        re.compile(
            r"out of memory|OutOfMemoryError|cudaMalloc failed|failed to allocate|No available memory for the cache"
            r"|insufficient memory|CUDA error: out of memory",
            re.I,
        ),
        "oom",
    ),
    (re.compile(r"command not found|No such file or directory.*(vllm|llama-server)", re.I), "binary"),
    (
        re.compile(
            r"failed to load model|error loading model|not a valid model|Repository Not Found|No such file", re.I
        ),
        "model",
    ),
]


def explain_failure(log: str, exit_code: int | None, deployment: Deployment) -> str:
    """Why a server died, in words, from its exit code and log (llama.cpp and vLLM phrasings)."""
    impl = backends.get(deployment.backend)
    kinds = [kind for pattern, kind in _REASONS if pattern.search(log)]
    code = f" (exit code {exit_code})" if exit_code is not None else ""
    if exit_code == 127 or "binary" in kinds:
        why = f"{impl.binary} was not found on the host's PATH{code}: install it for {deployment.host.username}."
    elif "port" in kinds:
        why = f"Port {deployment.port} is in use on {deployment.host}{code}: choose another port or stop what holds it."
    elif "oom" in kinds:
        why = f"Out of memory{code}: lower the context, the GPU layers or gpu-memory-utilization, or choose more GPUs."
    elif "model" in kinds:
        why = f"The model could not be loaded{code}: check the path {deployment.model_path}."
    else:
        why = f"The server exited{code}."
    last = [line for line in log.strip().splitlines() if line.strip()][-5:]
    return why + (" Last log lines:\n" + "\n".join(last) if last else "")
