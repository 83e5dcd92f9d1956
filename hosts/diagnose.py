"""Why a server died, in words an admin can act on, from its exit code and the end of its log.

The patterns are llama.cpp's and vLLM's own phrasings (tests/hosts/test_launch.py has real lines).
"""

from __future__ import annotations

import re

from django.utils.translation import gettext_noop

from portal.i18n import Message

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


def explain_failure(log: str, exit_code: int | None, deployment: Deployment) -> Message:
    """Why a server died, in words, from its exit code and log (llama.cpp and vLLM phrasings)."""
    impl = backends.get(deployment.backend)
    kinds = [kind for pattern, kind in _REASONS if pattern.search(log)]
    code = Message(gettext_noop(" (exit code %(code)s)"), code=exit_code) if exit_code is not None else ""
    if exit_code == 127 or "binary" in kinds:
        why = Message(
            gettext_noop("%(binary)s was not found on the host's PATH%(code)s: install it for %(user)s."),
            binary=impl.binary,
            code=code,
            user=deployment.host.username,
        )
    elif "port" in kinds:
        why = Message(
            gettext_noop("Port %(port)s is in use on %(host)s%(code)s: choose another port or stop what holds it."),
            port=deployment.port,
            host=deployment.host,
            code=code,
        )
    elif "oom" in kinds:
        why = Message(
            gettext_noop(
                "Out of memory%(code)s: lower the context, the GPU layers or gpu-memory-utilization, or choose "
                "more GPUs."
            ),
            code=code,
        )
    elif "model" in kinds:
        why = Message(
            gettext_noop("The model could not be loaded%(code)s: check the path %(path)s."),
            code=code,
            path=deployment.model_path,
        )
    else:
        why = Message(gettext_noop("The server exited%(code)s."), code=code)
    last = [line for line in log.strip().splitlines() if line.strip()][-5:]
    if not last:
        return why
    return Message(LOG_LINES, why=why, lines="\n".join(last))


LOG_LINES = gettext_noop("%(why)s Last log lines:\n%(lines)s")


def without_log_lines(reason: Message) -> Message:
    """`explain_failure`'s reason without the log lines (kept elsewhere, e.g. on the event)."""
    if reason.code == LOG_LINES and isinstance(why := reason.params.get("why"), Message):
        return why
    if not reason.code:  # stored before messages had codes
        return Message.verbatim(reason.english.split(" Last log lines:", 1)[0])
    return reason
