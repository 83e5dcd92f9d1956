"""What /healthz reports: can we reach the database and the Celery broker?"""

from __future__ import annotations

import os
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
    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem://"):
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
        ok = os.path.isdir(folder) and os.access(folder, os.W_OK)
        return {"ok": ok, "transport": "filesystem"} if ok else {"ok": False, "error": "queue folder not writable"}
    if url.startswith(("redis://", "rediss://", "unix://")):
        import redis

        try:
            client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
            client.ping()
            client.close()
        except Exception as exc:
            return {"ok": False, "transport": "redis", "error": exc.__class__.__name__}
        return {"ok": True, "transport": "redis"}
    return {"ok": True, "transport": url.split("://", 1)[0]}
