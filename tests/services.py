"""Reaching the real services tests need, and skipping (or failing in CI) when they are missing.

With PORTAL_REQUIRE_SERVICES=1 (CI) a missing service fails the test instead of skipping it, so
no service test can silently skip there.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import shutil
import socket
import threading
from pathlib import Path

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


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_share() -> range:
    """This test process's own share of the ports below the kernel's ephemeral range.

    The kernel hands ports of that range to every outgoing connection, so a port picked there and
    bound a moment later can meanwhile be some connection's local end (CI: "address already in
    use" for a gateway's port). Below it, only a process that asks for a port by number takes
    one, and each pytest-xdist worker asks only in its own share."""
    low, high = 10000, _ephemeral_start()
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % workers
    size = (high - low) // workers
    return range(low + worker * size, low + (worker + 1) * size)


# From a random place in the share, in steps of a random size: pytest sessions run side by side (a
# developer's two terminals) then rarely meet, as with ports the kernel picks. With steps of one,
# two sessions whose walks met stayed in step: 3 tests in a row of one session found their port
# answered by the other's server.
_next_port = itertools.count(random.randrange(1 << 16))
_step = random.randrange(1, 1 << 16)
_port_lock = threading.Lock()


def _stride(size: int, step: int | None = None) -> int:
    """This session's step (`_step`) through a share of `size` ports, made coprime with it so that
    the walk hands out every port once before any again."""
    step = (_step if step is None else step) % size or 1
    while math.gcd(step, size) != 1:
        step += 1
    return step


def free_port() -> int:
    """A port nothing listens on, on any address: the test servers bind 127.0.0.1, but the multi-node
    fakes bind 127.0.0.2 and 127.0.0.3 (sshd, the Ray head) or all addresses (`vllm serve --host
    0.0.0.0`), and a port free on 127.0.0.1 alone could be one of theirs. The ports come in turn from
    this process's share (`_port_share`), so none is handed out twice while a test could still hold it."""
    share = _port_share()
    stride = _stride(len(share))
    with _port_lock:
        for _ in range(len(share)):
            port = share[next(_next_port) * stride % len(share)]
            with socket.socket() as s:
                try:
                    s.bind(("0.0.0.0", port))
                except OSError:  # in use, or still in TIME_WAIT: the next one
                    continue
                return port
    raise RuntimeError(f"no free port in {share}")
