"""Liveness and readiness of a web process, answered by the gateway (no Django middleware, no
database thread to wait behind).

- `GET /healthz`: the process answers (its event loop runs). For restarts, never for routing.
- `GET /readyz`: whether to route traffic here. The database and Redis are each asked within
  READY_DEADLINE; the answer says what is degraded and how stale the gateway's snapshot is. While
  the database is away but the snapshot is within GATEWAY_DB_OUTAGE_GRACE the gateway still serves
  its known keys, so the answer stays 200 with `"status": "degraded"`; without Redis (every limit
  lives there) or past the grace it is 503.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.db import connection

from .cache import DatabaseUnavailable, db_health, outage_grace, run_db, snapshot
from .http import Request, send_json
from .state import process

READY_DEADLINE = 2.0


async def healthz(req: Request) -> None:
    await send_json(req.send, 200, {"status": "ok"}, headers=[(b"cache-control", b"no-store")])


def _select_one() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchone()


async def _timed(check: Callable[[], Awaitable[None]]) -> dict[str, object]:
    started = time.perf_counter()
    try:
        await asyncio.wait_for(check(), READY_DEADLINE)
    except TimeoutError:
        return {"ok": False, "error": f"no answer within {READY_DEADLINE:g} s"}
    except DatabaseUnavailable:
        return {"ok": False, "error": "unreachable"}
    except Exception as exc:
        return {"ok": False, "error": exc.__class__.__name__}
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 2)}


async def readyz(req: Request) -> None:
    if not process.started:
        await process.start()
    limiter = process.limiter
    assert limiter is not None

    async def database() -> None:
        await run_db(_select_one)

    async def redis() -> None:
        await limiter.redis.call("PING")

    db, rd = await asyncio.gather(_timed(database), _timed(redis))
    db["engine"] = connection.vendor
    staleness = db_health.staleness()
    snapshot_usable = snapshot.last_catalog is not None and staleness <= outage_grace()
    degraded = [name for name, check in (("database", db), ("redis", rd)) if not check["ok"]]
    serving = rd["ok"] and (db["ok"] or snapshot_usable)
    body = {
        "status": "ok" if not degraded else ("degraded" if serving else "unavailable"),
        "degraded": degraded,
        "database": db,
        "redis": rd,
        "snapshot": {
            "staleness_seconds": round(staleness, 1),
            "outage_grace_seconds": outage_grace(),
            "serving_from_snapshot": not db["ok"] and snapshot_usable,
        },
        "usage_journal": process.usage.journaled,
        "embedded_redis": bool(settings.PORTAL_EMBEDDED_REDIS),
    }
    await send_json(req.send, 200 if serving else 503, body, headers=[(b"cache-control", b"no-store")])
