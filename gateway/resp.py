"""A minimal pipelined Redis client for the gateway's two scripts.

redis-py's asyncio client costs ~150 µs of CPU per command here (connection checkout, retries,
observability hooks); the admission script runs on every request, so the gateway speaks RESP itself
over one persistent connection: commands are written as they come and replies are matched in
order (Redis answers one connection strictly in order), so concurrent requests share the socket
without waiting for each other. Only what the scripts need is implemented.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import ssl
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import unquote, urlsplit

logger = logging.getLogger(__name__)


class RespError(Exception):
    """An error reply from Redis."""


def encode(args: Sequence[object]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode()
        else:
            b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def parse(buf: bytes | bytearray, pos: int) -> tuple[Any, int] | None:
    """One reply from `buf` at `pos`: (value, next position), or None when incomplete."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return None
    kind = buf[pos]
    line = bytes(buf[pos + 1 : end])
    nxt = end + 2
    if kind == 43:  # +
        return line.decode(), nxt
    if kind == 45:  # -
        return RespError(line.decode()), nxt
    if kind == 58:  # :
        return int(line), nxt
    if kind == 36:  # $
        n = int(line)
        if n < 0:
            return None, nxt
        if len(buf) < nxt + n + 2:
            return None
        return bytes(buf[nxt : nxt + n]), nxt + n + 2
    if kind == 42:  # *
        n = int(line)
        if n < 0:
            return None, nxt
        items = []
        for _ in range(n):
            got = parse(buf, nxt)
            if got is None:
                return None
            items.append(got[0])
            nxt = got[1]
        return items, nxt
    raise RespError(f"unexpected reply type {chr(kind)!r}")


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.buf = bytearray()
        self.closed = False
        self.wbuf: list[bytes] = []
        self.flush_scheduled = False

    def flush(self) -> None:
        self.flush_scheduled = False
        if self.wbuf and not self.closed and self.transport is not None:
            data = b"".join(self.wbuf) if len(self.wbuf) > 1 else self.wbuf[0]
            self.wbuf.clear()
            self.transport.write(data)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        pos = 0
        buf = self.buf
        while pos < len(buf):
            got = parse(buf, pos)
            if got is None:
                break
            value, pos = got
            fut = self.waiters.popleft()
            if fut.done():
                continue
            if isinstance(value, RespError):
                fut.set_exception(value)
            else:
                fut.set_result(value)
        if pos:
            del self.buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        err = ConnectionError(f"Redis connection lost: {exc!r}")
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(err)


class RespClient:
    """One pipelined connection to the Redis of `url` (redis://, rediss:// or unix://)."""

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        self.scheme = u.scheme
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 6379
        self.path = u.path
        self.password = unquote(u.password) if u.password else None
        self.username = unquote(u.username) if u.username else None
        db = (u.path or "/0").lstrip("/") if u.scheme != "unix" else ""
        if u.scheme == "unix":
            from urllib.parse import parse_qs

            db = (parse_qs(u.query).get("db") or ["0"])[0]
        self.db = int(db or 0)
        self._proto: _Protocol | None = None
        self._lock = asyncio.Lock()
        self._shas: dict[str, str] = {}

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        if self.scheme == "unix":
            _t, proto = await loop.create_unix_connection(_Protocol, self.path)
        else:
            ctx = ssl.create_default_context() if self.scheme == "rediss" else None
            _t, proto = await asyncio.wait_for(
                loop.create_connection(_Protocol, self.host, self.port, ssl=ctx), timeout=5
            )
        self._proto = proto
        if self.password:
            auth = ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
            await self._send(proto, auth)
        if self.db:
            await self._send(proto, ("SELECT", self.db))
        return proto

    async def _conn(self) -> _Protocol:
        proto = self._proto
        if proto is not None and not proto.closed:
            return proto
        async with self._lock:
            proto = self._proto
            if proto is None or proto.closed:
                proto = await self._connect()
            return proto

    @staticmethod
    def _send(proto: _Protocol, args: Sequence[object]) -> asyncio.Future[Any]:
        """Queue a command; everything queued in one loop iteration goes out in one write."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        proto.waiters.append(fut)
        proto.wbuf.append(encode(args))
        if not proto.flush_scheduled:
            proto.flush_scheduled = True
            loop.call_soon(proto.flush)
        return fut

    async def call(self, *args: object) -> Any:
        proto = await self._conn()
        return await self._send(proto, args)

    async def evalsha(self, script: str, keys: list[str], args: list[object]) -> Any:
        """EVALSHA, loading the script on first use or after a Redis restart (NOSCRIPT)."""
        sha = self._shas.get(script) or hashlib.sha1(script.encode()).hexdigest()  # noqa: S324 - Redis's id
        self._shas[script] = sha
        try:
            return await self.call("EVALSHA", sha, len(keys), *keys, *args)
        except RespError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            await self.call("SCRIPT", "LOAD", script)
            return await self.call("EVALSHA", sha, len(keys), *keys, *args)

    def evalsha_nowait(self, script: str, keys: list[str], args: list[object]) -> None:
        """Fire and forget (settles): written at once when connected, errors are logged."""
        proto = self._proto
        sha = self._shas.get(script)
        if proto is None or proto.closed or sha is None:
            task = asyncio.get_running_loop().create_task(self.evalsha(script, keys, args))
            task.add_done_callback(_log_failure)
            return
        fut = self._send(proto, ("EVALSHA", sha, len(keys), *keys, *args))

        def done(f: asyncio.Future[Any]) -> None:
            exc = f.exception()
            if exc is None:
                return
            if isinstance(exc, RespError) and str(exc).startswith("NOSCRIPT"):
                retry = asyncio.get_running_loop().create_task(self.evalsha(script, keys, args))
                retry.add_done_callback(_log_failure)
            else:
                logger.error("Redis script failed: %r", exc)

        fut.add_done_callback(done)

    async def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("Redis script failed: %r", task.exception())
