"""What /healthz reports: can we reach the database and the Celery broker?"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connection


def check_database() -> dict:
    started = time.perf_counter()
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
    except Exception as exc:
        return {"ok": False, "error": exc.__class__.__name__}
    return {"ok": True, "engine": connection.vendor, "ms": round((time.perf_counter() - started) * 1000, 2)}


def check_broker() -> dict:
    """The Celery broker. On Redis (the embedded one or REDIS_URL's) a PING within 2 s."""
    url = settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://", "redis+socket://")):
        return {"ok": True, "transport": url.split("://", 1)[0]}
    import redis

    target = settings.REDIS_URL if url.startswith("redis+socket://") else url
    try:
        client = redis.Redis.from_url(target, socket_connect_timeout=2, socket_timeout=2)
        client.ping()
        client.close()
    except Exception as exc:
        return {"ok": False, "transport": "redis", "error": exc.__class__.__name__}
    return {"ok": True, "transport": "redis", "embedded": bool(settings.PORTAL_EMBEDDED_REDIS)}
