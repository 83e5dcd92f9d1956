"""Reaching the real services tests need, and skipping (or failing in CI) when they are missing.

With PORTAL_REQUIRE_SERVICES=1 (CI) a missing service fails the test instead of skipping it, so
no service test can silently skip there.
"""

from __future__ import annotations

import os
import shutil
import socket

import pytest

REQUIRED = os.environ.get("PORTAL_REQUIRE_SERVICES", "").lower() in ("1", "true", "yes", "on")


def unavailable(reason: str):
    """Skip with `reason`, or fail when services are required."""
    if REQUIRED:
        pytest.fail(f"required service missing (PORTAL_REQUIRE_SERVICES=1): {reason}", pytrace=False)
    pytest.skip(reason)


def redis_url() -> str:
    """The suite's Redis: REDIS_URL's, else the embedded one tests/conftest.py started."""
    from django.conf import settings

    return settings.REDIS_URL


def require_redis() -> str:
    """Redis is part of every configuration (the embedded one by default): never a skip."""
    import redis

    url = redis_url()
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    finally:
        client.close()
    return url


def require_postgres() -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        unavailable("needs PostgreSQL: set DATABASE_URL=postgres://postgres@127.0.0.1:5432/portal")


def require_binary(name: str, hint: str) -> str:
    path = shutil.which(name) or (name if os.path.isabs(name) and os.path.exists(name) else None)
    if not path:
        unavailable(f"{name} not found ({hint})")
    return path


def free_port() -> int:
    """A port nothing listens on, on any address: the test servers bind 127.0.0.1, but the multi-node
    fakes bind 127.0.0.2 and 127.0.0.3 (sshd, the Ray head) or all addresses (`vllm serve --host
    0.0.0.0`), and a port free on 127.0.0.1 alone could be one of theirs. Choose it just before use:
    another process may take it in between."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]
