"""A minimal pipelined Redis client for the gateway's scripts, with a deadline on every command.

Kept instead of redis-py's asyncio client because it is measured 3.6x cheaper per admission
script (`bench/redis_client_compare.py`: 23 against 85 µs of CPU per command, hiredis included),
and the script runs on every request. Commands are written as they come and replies are matched in
order (Redis answers one connection strictly in order), so concurrent requests share one socket.

What keeps it from hanging (tests/gateway/test_redis_faults.py drives each through a TCP proxy):
- every command has a deadline (`GATEWAY_REDIS_TIMEOUT`, counted from when it is written, so a
  busy event loop is not taken for a dead Redis); when it passes, the connection is
  dropped, so every command waiting on it fails at once and the next one reconnects;
- a closed connection fails all its waiters at once and is replaced on the next command;
- a reply nobody waits for (a server that speaks first, e.g. "max clients reached") or a reply
  that cannot be parsed drops the connection: a reply is never matched to the wrong waiter.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any, cast
from urllib.parse import unquote, urlsplit

logger = logging.getLogger(__name__)


class RespError(Exception):
    """An error reply from Redis."""


class Encoded:
    """Arguments already in RESP (`Encoded.of`), written into a command as they are: what does
    not change between requests (a key's limits) is encoded once."""

    __slots__ = ("count", "data")

    def __init__(self, data: bytes, count: int) -> None:
        self.data = data
        self.count = count

    @classmethod
    def of(cls, args: Sequence[object]) -> Encoded:
        command = encode(args)
        return cls(command[command.index(b"\r\n") + 2 :], len(args))  # without the command's header


# Small ints as RESP bulk strings (script counts, zero costs, lease seconds): a table lookup
# instead of two `%` formats, ~2.5 k instructions per argument.
_SMALL_INTS = tuple(b"$%d\r\n%d\r\n" % (len(b"%d" % i), i) for i in range(1024))


def encode(args: Sequence[Any]) -> bytes:
    out = [b""]
    count = 0
    for a in args:
        kind = type(a)  # the exact types first: cheaper than isinstance, and most arguments
        if kind is str:
            b = a.encode()
        elif kind is int:
            if 0 <= a < 1024:
                out.append(_SMALL_INTS[a])
                count += 1
                continue
            b = b"%d" % a
        elif kind is Encoded:
            out.append(a.data)
            count += a.count
            continue
        elif isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode()
        else:
            b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        count += 1
    out[0] = b"*%d\r\n" % count
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


_UNSENT = float("inf")  # the deadline of a command queued but not yet written


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiters: collections.deque[asyncio.Future[Any] | _Unawaited] = collections.deque()
        # Each waiter's deadline (event-loop clock), in the same order: one client has one
        # timeout, so they only grow, and the first unanswered waiter's is the next to pass.
        self.deadlines: collections.deque[float] = collections.deque()
        self.timeout = 1.0
        self.watchdog: asyncio.TimerHandle | None = None
        self.buf = bytearray()
        self.closed = False
        self.wbuf: list[bytes] = []
        self.flush_scheduled = False

    def check_deadlines(self) -> None:
        """The watchdog fired: drop the connection when the oldest command still waited for is
        past its deadline, else wait for that command's deadline (answers are read in order)."""
        self.watchdog = None
        if self.closed:
            return
        for fut, deadline in zip(self.waiters, self.deadlines, strict=True):
            if fut.done():  # its caller stopped waiting (cancelled): it has no deadline any more
                continue
            if deadline == _UNSENT:  # not written yet: `flush` arms the watchdog when it is
                return
            loop = fut.get_loop()
            if loop.time() >= deadline:
                self.abort(TimeoutError(f"Redis did not answer within {self.timeout:g} s"))
            else:
                self.watchdog = loop.call_at(deadline, self.check_deadlines)
            return

    def flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Write what was queued, and start its commands' clocks now: time the event loop spent
        on other work before this write is not Redis's (a busy gateway is not a dead Redis)."""
        self.flush_scheduled = False
        wbuf = self.wbuf
        if wbuf and not self.closed and self.transport is not None:
            deadline = loop.time() + self.timeout
            n = len(wbuf)  # the last n queued are the ones written now
            if n == 1:
                self.deadlines[-1] = deadline
                data = wbuf[0]
            else:
                deadlines = self.deadlines
                for i in range(-n, 0):
                    deadlines[i] = deadline
                data = b"".join(wbuf)
            wbuf.clear()
            self.transport.write(data)
            if self.watchdog is None:  # one timer a connection: one a command cost more than the write
                self.watchdog = loop.call_at(deadline, self.check_deadlines)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        pos = 0
        buf = self.buf
        while pos < len(buf):
            try:
                got = parse(buf, pos)
            except (RespError, ValueError, IndexError) as exc:
                self.abort(ConnectionError(f"unreadable reply from Redis: {exc}"))
                return
            if got is None:
                break
            value, pos = got
            if not self.waiters:
                self.abort(ConnectionError(f"Redis sent a reply nobody asked for: {value!r:.120}"))
                return
            fut = self.waiters.popleft()
            self.deadlines.popleft()
            if fut.done():
                continue
            if isinstance(value, RespError):
                fut.set_exception(value)
            else:
                fut.set_result(value)
        if pos:
            del self.buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail_all(ConnectionError(f"Redis connection lost: {exc!r}"))

    def fail_all(self, err: Exception) -> None:
        self.closed = True
        self.buf.clear()
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        self.deadlines.clear()
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(err)

    def abort(self, err: Exception) -> None:
        """Drop the connection: every waiter fails now, the next command reconnects."""
        logger.error("dropping the Redis connection: %s", err)
        self.fail_all(err)
        if self.transport is not None:
            self.transport.abort()


class RespClient:
    """One pipelined connection to the Redis of `url` (redis://, rediss:// or unix://)."""

    def __init__(self, url: str, timeout: float = 1.0) -> None:
        self.timeout = timeout
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
        # The connection being made (`_conn`): callers that find none alive share one attempt.
        self._connecting: asyncio.Future[_Protocol] | None = None
        self._shas: dict[str, str] = {}
        # (script, keys) -> `EVALSHA <sha> <key count> <keys>`, encoded once (the same on every request)
        self._heads: dict[tuple[str, tuple[str, ...]], Encoded] = {}

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        try:
            if self.scheme == "unix":
                _t, proto = await asyncio.wait_for(loop.create_unix_connection(_Protocol, self.path), self.timeout)
            else:
                ctx = ssl.create_default_context() if self.scheme == "rediss" else None
                _t, proto = await asyncio.wait_for(
                    loop.create_connection(_Protocol, self.host, self.port, ssl=ctx), self.timeout
                )
        except TimeoutError:
            raise ConnectionError(f"no connection to Redis within {self.timeout:g} s") from None
        if self.password:
            auth = ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
            await self._send(proto, auth, self.timeout)
        if self.db:
            await self._send(proto, ("SELECT", self.db), self.timeout)
        self._proto = proto
        return proto

    async def _conn(self) -> _Protocol:
        """The live connection, else the one being made: every caller that finds none joins the same
        attempt and shares its outcome. (Taking turns behind a lock, each caller made its own attempt
        after the last one failed: with Redis stalled, the SELECT of each waited out its own deadline,
        and the 50th request of a burst was answered after 50 deadlines.)"""
        proto = self._proto
        if proto is not None and not proto.closed:
            return proto
        connecting = self._connecting
        if connecting is None or connecting.done():
            connecting = self._connecting = asyncio.ensure_future(self._connect())
            connecting.add_done_callback(_retrieved)
        return await asyncio.shield(connecting)  # a caller that leaves does not cancel the others' attempt

    @staticmethod
    def _send(proto: _Protocol, args: Sequence[object], timeout: float) -> asyncio.Future[Any]:
        """Queue a command; everything queued in one loop iteration goes out in one write. The
        connection's watchdog (one timer, `_Protocol.check_deadlines`, armed at the write) drops it
        when the command is not answered within `timeout` of that write."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if proto.closed:
            fut.set_exception(ConnectionError("Redis connection lost"))
            return fut
        RespClient._queue(proto, loop, fut, args, timeout)
        return fut

    @staticmethod
    def _queue(
        proto: _Protocol,
        loop: asyncio.AbstractEventLoop,
        waiter: asyncio.Future[Any] | _Unawaited,
        args: Sequence[object],
        timeout: float,
    ) -> None:
        proto.timeout = timeout
        proto.waiters.append(waiter)
        proto.deadlines.append(_UNSENT)  # its clock starts when it is written (`flush`)
        proto.wbuf.append(encode(args))
        if not proto.flush_scheduled:
            proto.flush_scheduled = True
            loop.call_soon(proto.flush, loop)

    async def call(self, *args: object) -> Any:
        proto = await self._conn()
        return await self._send(proto, args, self.timeout)

    def _head(self, script: str, keys: Sequence[str]) -> Encoded:
        """`EVALSHA <sha> <key count> <keys>` for `script` and `keys`, encoded once."""
        names = tuple(keys)
        head = self._heads.get((script, names))
        if head is None:
            sha = self._shas.get(script) or hashlib.sha1(script.encode()).hexdigest()  # noqa: S324 - Redis's id
            self._shas[script] = sha
            if len(self._heads) >= 64:  # scripts are a handful; keys of scripts called with many: not kept
                self._heads.clear()
            head = self._heads[(script, names)] = Encoded.of(["EVALSHA", sha, len(names), *names])
        return head

    async def evalsha(self, script: str, keys: Sequence[str], args: list[object]) -> Any:
        """EVALSHA, loading the script on first use or after a Redis restart (NOSCRIPT)."""
        head = self._head(script, keys)
        proto = self._proto  # connected: `call`'s two coroutines spared (one script a request)
        if proto is None or proto.closed:
            proto = await self._conn()
        try:
            return await self._send(proto, (head, *args), self.timeout)
        except RespError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            await self.call("SCRIPT", "LOAD", script)
            return await self.call(head, *args)

    def evalsha_nowait(
        self,
        script: str,
        keys: list[str],
        args: list[object],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Fire and forget (settles): written at once when connected; a failure goes to
        `on_error` (the limiter queues the settle for a replay), else to the log."""
        report = on_error or _log_failure
        proto = self._proto
        if proto is None or proto.closed or script not in self._shas:
            task = asyncio.get_running_loop().create_task(self.evalsha(script, keys, args))
            task.add_done_callback(lambda t: _report_failure(t, report))
            return
        loop = asyncio.get_running_loop()
        waiter = _Unawaited(self, loop, script, keys, args, report)
        self._queue(proto, loop, waiter, (self._head(script, keys), *args), self.timeout)

    async def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None


class _Unawaited:
    """The waiter of a command nobody awaits (`evalsha_nowait`): the reply is dropped and a
    failure reported when it comes, without a future and the loop callback its result schedules."""

    __slots__ = ("_done", "args", "client", "keys", "loop", "report", "script")

    def __init__(
        self,
        client: RespClient,
        loop: asyncio.AbstractEventLoop,
        script: str,
        keys: Sequence[str],
        args: list[object],
        report: Callable[[BaseException], None],
    ) -> None:
        self.client, self.loop, self.script, self.keys, self.args, self.report = (
            client,
            loop,
            script,
            keys,
            args,
            report,
        )
        self._done = False

    def done(self) -> bool:
        return self._done

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.loop

    def set_result(self, _value: Any) -> None:
        self._done = True

    def set_exception(self, exc: BaseException) -> None:
        self._done = True
        if isinstance(exc, RespError) and str(exc).startswith("NOSCRIPT"):
            retry = self.loop.create_task(self.client.evalsha(self.script, list(self.keys), self.args))
            retry.add_done_callback(lambda t: _report_failure(t, self.report))
        else:
            self.report(exc)


def _retrieved(attempt: asyncio.Future[Any]) -> None:
    """A shared connection attempt's failure is its callers' to raise: marked seen here, so one whose
    callers all left is not logged as never retrieved."""
    if not attempt.cancelled():
        attempt.exception()


def _log_failure(exc: BaseException) -> None:
    logger.error("Redis script failed: %r", exc)


def _report_failure(task: asyncio.Future[Any], report: Callable[[BaseException], None]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        report(exc)
