"""What the web side (pages, REST API, tasks) does when Redis misbehaves: one place that knows
which exceptions mean "Redis (the cache or the Celery broker) is unreachable" or "the disk is
full", and the answer a person or a script gets instead of a 500.

Policy per use of Redis outside the gateway (the gateway's own is in ARCHITECTURE.md, "What the
gateway promises"):

- REST API throttles (`portal.api.throttling`, the installer's `RedeemThrottle`): **fail open**.
  They keep a runaway script from hogging the server; they guard no credential (API tokens and
  download tokens are random, and DRF checks the login before the throttle). Failing closed would
  refuse every script, and the revoke an admin needs during the incident, for as long as Redis is
  away. While Redis errs, the throttle is skipped for `OPEN_SECONDS` before it is asked again, so a
  stalled Redis costs one timeout, not one per request.
- Login throttling (django-axes) keeps its counters in the database, not in Redis: it still works
  (stays closed to password guessing) during a Redis fault.
- The probe round's lock (`channels.tasks`): **fail closed**, the round is skipped (two rounds at
  once would double every probe; the next beat tick tries again).
- The host-architecture cache (`hosts.deployments.services`): **fail open**, a miss.
- Changes saved during a fault are committed; the gateway replicas learn of them later
  (`portal.propagation`, `X-Portal-Propagation: unconfirmed`).
- Queuing a task (publishing to the broker) from a page, the API or the gateway waits at most
  CELERY_PUBLISH_TIMEOUT, once (`portal.celery`), so a stalled Redis costs a request about a second,
  not the worker's deadlines and retries. Then:
  - a job that is a row with its own state (a launch job, a download, a cold start's placement) is
    kept, says NOT_SENT, and its sweep sends it once Redis answers (`hosts.deployments.jobs.send`,
    `hosts.downloads.services.send`, `hosts.ondemand.services.not_sent`): the request succeeds;
  - anything else (an inventory refresh) gets 503 with `Retry-After`, as JSON `{"detail", "code"}`
    in the API and as a page in the UI (`FaultMiddleware`, `portal.api.exceptions`), never a 500.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
OPEN_SECONDS = 5.0  # how long a fail-open use skips Redis after an error

# A job the broker did not take says so (its message), and its sweep sends it again once Redis answers.
NOT_SENT = gettext_noop("Redis (the task queue) did not take this job; it is sent again as soon as Redis answers.")
SENT_AGAIN = gettext_noop("Redis answers again; sent to the task queue.")


def redis_errors() -> tuple[type[BaseException], ...]:
    """Exceptions raised by redis-py (the cache, our own clients) and by kombu (the broker)."""
    import kombu.exceptions
    import redis

    return (redis.RedisError, kombu.exceptions.OperationalError)


def is_redis_fault(exc: BaseException) -> bool:
    return isinstance(exc, redis_errors())


def is_disk_full(exc: BaseException | None) -> bool:
    """A full disk, whoever reported it: an OSError ENOSPC/EDQUOT, SQLite's "database or disk is
    full", or Redis/Valkey refusing writes because its append-only file could not be written
    ("MISCONF …", "-ERR … No space left on device")."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(exc).lower()
        if "database or disk is full" in text or "no space left on device" in text:
            return True
        if text.lstrip("-").startswith("misconf"):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def disk_full_message() -> str:
    return str(
        _(
            "The disk holding the portal's data folder (%(folder)s) is full, or Redis could not write its "
            "data there. Free space on it; the portal recovers by itself once there is room."
        )
        % {"folder": settings.DATA_DIR}
    )


def describe(exc: BaseException) -> tuple[str, str]:
    """(code, message) for an error that is the environment's fault, not the request's."""
    if is_disk_full(exc):
        return "disk_full", disk_full_message()
    return "redis_unavailable", str(
        _(
            "Redis (the portal's cache and task queue) did not answer. Nothing was changed by this request "
            "unless it says so; try again in a few seconds."
        )
    )


class FailOpen:
    """A use of Redis that carries on without it: after an error, skip Redis for OPEN_SECONDS."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._skip_until = 0.0
        self._lock = threading.Lock()

    def call(self, fn: Any, fallback: Any) -> Any:
        if time.monotonic() < self._skip_until:
            return fallback
        try:
            return fn()
        except redis_errors() as exc:
            with self._lock:
                first = time.monotonic() >= self._skip_until
                self._skip_until = time.monotonic() + OPEN_SECONDS
            if first:
                logger.warning(
                    "%s: Redis did not answer (%s); carrying on without it for %g s%s",
                    self.name,
                    exc,
                    OPEN_SECONDS,
                    " (the disk is full)" if is_disk_full(exc) else "",
                )
            return fallback


class FaultMiddleware:
    """A page (not the API: its exception handler answers JSON) that failed because Redis did not
    answer, or because the disk is full, gets a 503 page saying so, not a 500."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exc):
        if not (is_redis_fault(exc) or is_disk_full(exc)):
            return None
        from django.shortcuts import render

        code, message = describe(exc)
        logger.error("%s %s: %s (%r)", request.method, request.path, code, exc)
        response = render(request, "503.html", {"code": code, "message": message}, status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
