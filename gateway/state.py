"""The gateway's per-process state, opened and closed by the ASGI lifespan (`gateway.asgi`): one
pooled upstream HTTP session, the limiter, the usage writer and the catalog refresher.

aiohttp rather than httpx: measured on this machine against the same fake upstream (see
`bench/client_compare.py`), aiohttp's client costs well under half of httpx's CPU per request, and
the client is most of a proxy's own work.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys

import aiohttp
import orjson
from django.conf import settings

from channels.health import passive

from . import metrics
from .cache import close_db, snapshot
from .limits import RedisLimiter, make_limiter
from .payloads import PayloadWriter
from .usage import UsageWriter

# llama-server (cpp-httplib), vLLM and SGLang (uvicorn) close a connection idle for 5 s. A request
# written on one as the server closes it is lost unread (aiohttp replays no POST): the client got a
# 502, the channel a failure, and its breaker opened. The gateway lets their idle connections go
# first; a cloud's it keeps 30 s (a new TLS connection costs tens of milliseconds).
MODEL_SERVER_KINDS = frozenset({"vllm", "llamacpp", "sglang"})
MODEL_SERVER_KEEPALIVE = 4.0
KEEPALIVE = 30.0


def open_session(keepalive: float = KEEPALIVE) -> aiohttp.ClientSession:
    """An upstream client: no overall deadline (streams run long), the connect deadline from
    settings, no redirects followed, idle connections kept `keepalive` seconds. Reads are bounded by
    `call`/`relay` themselves (headers, first token, idle gap, total), each naming its setting when
    it fires."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=float(settings.GATEWAY_CONNECT_TIMEOUT))
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=keepalive)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        json_serialize=lambda o: orjson.dumps(o).decode(),
        skip_auto_headers=("User-Agent",),
        auto_decompress=True,
    )


logger = logging.getLogger(__name__)

WARM_UP_REQUESTS = 2_000


def settle_heap() -> None:
    """Move everything loaded at start (Django, the apps, the libraries: ~1M objects) out of the
    collector's sight and make full collections rarer. Measured under load (bench/, c=32): without
    it a full collection walked that heap every ~0.7 s, pausing the event loop for up to 190 ms,
    which was the gateway's p99; with it the pauses are gone (see bench/README.md)."""
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, 10_000), gen1, gen2)


class ProcessState:
    """Per-process state: the upstream session, the limiter and the usage writer."""

    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None  # clouds and other servers
        self.model_servers: aiohttp.ClientSession | None = None  # vLLM, llama.cpp, SGLang
        self.limiter: RedisLimiter | None = None
        # Its own thread and connection: key and model lookups never wait behind a slow write.
        self.usage = UsageWriter()
        self.payloads = PayloadWriter()  # request logs (opt-in); its thread starts with the first
        self.started = False
        self._refresher: asyncio.Task[None] | None = None
        self._settler: asyncio.Task[None] | None = None
        self._passive: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        snapshot.reset()
        snapshot.restore()  # the fallback if the database is down now
        self.upstream()
        self.limiter = make_limiter()
        self.limiter.start()
        await self._learn_generations(self.limiter)
        self.usage.start()
        loop = asyncio.get_running_loop()
        self._refresher = loop.create_task(snapshot.refresh_forever())
        # The usage writer and the database thread hand the GIL back to the event loop within 1 ms
        # (default 5 ms): their batches no longer show up as the hot path's p99 (bench/README.md).
        sys.setswitchinterval(0.001)
        passive.use_own_flusher()
        self._passive = loop.create_task(self._flush_passive_forever())
        settle_heap()
        self._settler = loop.create_task(self._settle_after_warm_up())

    @staticmethod
    async def _learn_generations(limiter: RedisLimiter) -> None:
        """Learn the cache generations before anything is loaded. Without them the first request's
        answer from Redis has nothing to compare with, so a catalog loaded by the background
        refresh before a change and kept past it was served until the next refresh (a channel an
        admin had just marked healthy stayed down for this process for up to GATEWAY_CACHE_TTL)."""
        if await snapshot.learn_generations(limiter.generations) is None:  # the first admission tells them instead
            logger.warning("reading the cache generations from Redis failed")

    async def _flush_passive_forever(self) -> None:
        """Passive health outcomes to Redis on the gateway's own connection, every
        PORTAL_PASSIVE_FLUSH_SECONDS (0: tests collect them in-process)."""
        while True:
            interval = float(settings.PORTAL_PASSIVE_FLUSH_SECONDS)
            await asyncio.sleep(interval if interval > 0 else 1.0)
            if interval > 0:
                await self.flush_passive()

    async def flush_passive(self) -> None:
        count, items = passive.take_flush()
        if not count or self.limiter is None:
            return
        try:
            await self.limiter.redis.call("RPUSH", passive.REDIS_KEY, *items)
            await self.limiter.redis.call("EXPIRE", passive.REDIS_KEY, passive.EXPIRE_SECONDS)
        except Exception as exc:  # evidence, not accounting: a lost interval is fine, a crash is not
            logger.warning("passive health flush failed: %s", exc.__class__.__name__)

    async def _settle_after_warm_up(self) -> None:
        """The first requests import and cache more (surfaces, translators, connection pools):
        settle the heap once more when they have run, so those objects are not scanned either."""
        while self.usage.recorded < WARM_UP_REQUESTS:  # noqa: ASYNC110 - a counter, no event on the hot path
            await asyncio.sleep(1.0)
        settle_heap()

    def upstream(self, kind: str = "") -> aiohttp.ClientSession:
        """The session for a channel of this kind, opened on first use: the model servers' lets
        idle connections go before the servers do (`MODEL_SERVER_KEEPALIVE`)."""
        if kind in MODEL_SERVER_KINDS:
            if self.model_servers is None or self.model_servers.closed:
                self.model_servers = open_session(MODEL_SERVER_KEEPALIVE)
            return self.model_servers
        if self.session is None or self.session.closed:
            self.session = open_session()
        return self.session

    async def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        for task in (self._refresher, self._settler, self._passive):
            if task is not None:
                task.cancel()
        self._refresher = self._settler = self._passive = None
        await self.flush_passive()
        if self.limiter is not None:
            await self.limiter.close()
        await self.usage.stop()
        await self.payloads.stop()
        await snapshot.save()
        for session in (self.session, self.model_servers):
            if session is not None:
                await session.close()
        self.session = self.model_servers = None
        await close_db()


process = ProcessState()
metrics.QUEUE_DEPTH.set_function(lambda: process.usage.pending)
metrics.JOURNAL_DEPTH.set_function(lambda: process.usage.journaled)
