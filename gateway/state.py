"""The gateway's per-process state, opened and closed by the ASGI lifespan (`gateway.asgi`): one
pooled upstream HTTP session, the limiter, the usage writer and the catalog refresher.

aiohttp rather than httpx: measured on this machine against the same fake upstream (see
`bench/client_compare.py`), aiohttp's client costs well under half of httpx's CPU per request, and
the client is most of a proxy's own work.
"""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
from django.conf import settings

from .cache import close_db, db_executor, snapshot
from .limits import RedisLimiter, make_limiter
from .usage import UsageWriter


def open_session() -> aiohttp.ClientSession:
    """The process's one upstream client: no overall deadline (streams run long), connect and
    read deadlines from settings, no redirects followed."""
    timeout = aiohttp.ClientTimeout(
        total=None,
        sock_connect=float(settings.GATEWAY_CONNECT_TIMEOUT),
        sock_read=float(settings.GATEWAY_READ_TIMEOUT),
    )
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=30)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        json_serialize=lambda o: orjson.dumps(o).decode(),
        skip_auto_headers=("User-Agent",),
        auto_decompress=True,
    )


class ProcessState:
    """Per-process state: the upstream session, the limiter and the usage writer."""

    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None
        self.limiter: RedisLimiter | None = None
        self.usage = UsageWriter(executor=db_executor())
        self.started = False
        self._refresher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        snapshot.reset()
        self.upstream()
        self.limiter = make_limiter()
        self.usage.start()
        self._refresher = asyncio.get_running_loop().create_task(snapshot.refresh_forever())

    def upstream(self) -> aiohttp.ClientSession:
        """The upstream session, opened on first use."""
        if self.session is None or self.session.closed:
            self.session = open_session()
        return self.session

    async def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        if self._refresher is not None:
            self._refresher.cancel()
            self._refresher = None
        if self.limiter is not None:
            await self.limiter.close()
        await self.usage.stop()
        if self.session is not None:
            await self.session.close()
            self.session = None
        await close_db()


process = ProcessState()
