"""What the gateway tells the placement about an on-demand deployment's traffic, through Redis.

The gateway (every replica) adds each request it sends to an on-demand model to a sorted set
(`busy`, scored by when the entry expires, so a replica that died leaves nothing behind for
longer than `LEASE_SECONDS`) and removes it when the request ends, writing the time (`last`).
The placement and the idle sweep read both here with redis-py; the key names are spelled once.
"""

from __future__ import annotations

import logging
import os
import time

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

LEASE_SECONDS = 3600  # longer than any request the gateway lets run


def namespace() -> str:
    """The gateway's Redis prefix (`gateway.cache.namespace`: tests give each run its own)."""
    return os.environ.get("GATEWAY_REDIS_NAMESPACE") or "gw"


def busy_key(deployment_id: int) -> str:
    return f"{namespace()}:od:busy:{deployment_id}"


def last_key(deployment_id: int) -> str:
    return f"{namespace()}:od:last:{deployment_id}"


_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        timeout = float(settings.PORTAL_REDIS_TIMEOUT)
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)
    return _client


def in_flight(deployment_id: int) -> int | None:
    """Requests the gateway has in flight to the deployment; None when Redis cannot say (then the
    deployment counts as busy: it is never evicted or stopped on a guess)."""
    try:
        return int(_redis().zcount(busy_key(deployment_id), time.time(), "+inf"))
    except Exception as exc:
        logger.warning("on-demand activity of deployment %s unreadable: %r", deployment_id, exc)
        return None


def last_request(deployment_id: int) -> float | None:
    """Epoch seconds of the last request that ended (None: none seen, or Redis away)."""
    try:
        value = _redis().get(last_key(deployment_id))
    except Exception as exc:
        logger.warning("on-demand activity of deployment %s unreadable: %r", deployment_id, exc)
        return None
    return float(value) if value else None


def touch(deployment_id: int, when: float | None = None) -> None:
    """Count the deployment as used now (it just became ready: its waiting requests follow)."""
    try:
        _redis().set(last_key(deployment_id), str(when or time.time()), ex=30 * 86400)
    except Exception as exc:
        logger.warning("could not mark deployment %s as used: %r", deployment_id, exc)
