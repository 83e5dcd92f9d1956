"""What the gateway and the workers tell each other about on-demand deployments, through Redis.

The gateway (every replica) adds each request it admits for an on-demand model to a sorted set
(`busy`, scored by when the entry expires, so a replica that died leaves nothing behind for
longer than `LEASE_SECONDS`), in its admission script, and removes it when the request ends,
writing the time (`last`). The placement and the idle sweep read both here with redis-py; the key
names are spelled once. Before a deployment is stopped, the gateway's routes generation is bumped
here (`bump_routes`, the key `gateway.cache.generation_keys` names): see `services.take_out`.

The other way: whenever an on-demand deployment's status or cold start moves, its id is
published on `events_channel()` (`announce`); every gateway process subscribes and wakes the
requests waiting for that model at once instead of at their next poll (which stays, slower, for
when Redis cannot deliver).
"""

from __future__ import annotations

import logging
import os
import secrets
import time

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

LEASE_SECONDS = 3600  # at least; longer when a request may take longer (`gateway.ondemand.busy`)


def namespace() -> str:
    """The gateway's Redis prefix (`gateway.cache.namespace`: tests give each run its own)."""
    return os.environ.get("GATEWAY_REDIS_NAMESPACE") or "gw"


def events_channel() -> str:
    return f"{namespace()}:od:events"


def busy_key(deployment_id: int) -> str:
    return f"{namespace()}:od:busy:{deployment_id}"


def last_key(deployment_id: int) -> str:
    return f"{namespace()}:od:last:{deployment_id}"


def routes_generation_key() -> str:
    """The gateway's routes generation (the second of `gateway.cache.generation_keys`, which this
    app may not import; a test holds the two to the same name)."""
    return f"{namespace()}:gen:routes"


_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        timeout = float(settings.PORTAL_REDIS_TIMEOUT)
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)
    return _client


def in_flight(deployment_id: int) -> int | None:
    """Requests the gateway has in flight to the deployment; None when Redis cannot say (then the
    deployment counts as busy: it is never evicted or stopped on a guess). Redis cannot say for a
    lease after it started: a restart without its data emptied the sets, and the gateways put
    their requests still running back only at their next lease renewal (`gateway.limits.RENEW_LUA`,
    every third of GATEWAY_LEASE_SECONDS)."""
    try:
        count = int(_redis().zcount(busy_key(deployment_id), time.time(), "+inf"))
    except Exception as exc:
        logger.warning("on-demand activity of deployment %s unreadable: %r", deployment_id, exc)
        return None
    started = redis_started()  # None: INFO refused (a renamed command); the count is all there is
    if started is not None and time.time() - started < float(settings.GATEWAY_LEASE_SECONDS):
        logger.info("on-demand activity of deployment %s not known yet: Redis has just started", deployment_id)
        return None
    return count


def last_request(deployment_id: int) -> float | None:
    """Epoch seconds of the last request that ended (None: none seen, or Redis away)."""
    try:
        value = _redis().get(last_key(deployment_id))
    except Exception as exc:
        logger.warning("on-demand activity of deployment %s unreadable: %r", deployment_id, exc)
        return None
    return float(value) if value else None


def redis_started() -> float | None:
    """Epoch seconds when Redis started (None: Redis away, or INFO refused). What it says of requests begins then: a
    restart without its data forgot the last requests before it."""
    try:
        uptime = int(_redis().info("server")["uptime_in_seconds"])
    except Exception as exc:
        logger.warning("Redis's uptime unreadable: %r", exc)
        return None
    return time.time() - uptime


def touch(deployment_id: int, when: float | None = None) -> None:
    """Count the deployment as used now (it just became ready: its waiting requests follow)."""
    try:
        _redis().set(last_key(deployment_id), str(when or time.time()), ex=30 * 86400)
    except Exception as exc:
        logger.warning("could not mark deployment %s as used: %r", deployment_id, exc)


def announce(deployment_id: int) -> None:
    """Tell the gateway processes that the deployment's cold start or status moved (best effort:
    without Redis they see it at their next poll)."""
    try:
        _redis().publish(events_channel(), str(deployment_id))
    except Exception as exc:
        logger.warning("could not announce on-demand deployment %s: %r", deployment_id, exc)


def bump_routes() -> bool:
    """Make every gateway replica's next admission find its routing snapshot stale (it loads the
    catalog again), now, not after a commit; False when Redis did not take it."""
    try:
        # a value it never held (`gateway.cache.new_generation`: a counter would repeat itself after
        # a Redis restart without its data)
        _redis().set(routes_generation_key(), secrets.token_hex(8))
    except Exception as exc:
        logger.warning("could not bump the gateway's routes generation: %r", exc)
        return False
    return True
