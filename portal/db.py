"""Deadlines on every database connection, per process kind, so nothing hangs on a stalled database.

Three kinds, each with a connect and a statement timeout from settings (`.env.example`):

- **ui** (the web process's Django views and the REST API): `DATABASE_CONNECT_TIMEOUT`,
  `DATABASE_STATEMENT_TIMEOUT`; the default set in `settings.DATABASES`.
- **worker** (Celery): the same connect timeout, `DATABASE_WORKER_STATEMENT_TIMEOUT` (reports and
  prunes run longer); applied by `portal.celery` when a worker starts.
- **gateway** (the gateway's database thread and its usage writer, `gateway.cache`/`gateway.usage`):
  the tightest, `GATEWAY_DB_CONNECT_TIMEOUT` and `GATEWAY_DB_TIMEOUT`; applied per thread by
  `use_timeouts("gateway")` so the UI's connections in the same process keep theirs.

On PostgreSQL the connect timeout is libpq's `connect_timeout` (it covers the whole handshake; libpq's
minimum is 2 s) and the statement timeout is the server's `statement_timeout`. A server-side timeout
cannot fire when the network, not the server, is stuck (a stalled proxy or load balancer accepts and
acknowledges the query and forwards nothing), so every query also runs under a client-side
deadline, the statement timeout plus `_MARGIN`: past it, the watchdog thread shuts the connection's
socket down, which wakes the waiting thread with an OperationalError (the connection is then
discarded as unusable). On SQLite (one file, no network) the statement timeout is the busy timeout.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)

_MARGIN = 1.0  # the server's statement_timeout answers first when it can
DEADLINE_KEY = "PORTAL_QUERY_DEADLINE"  # in a connection's settings_dict: the client-side deadline


def timeouts(kind: str) -> tuple[float, float]:
    """(connect, statement) timeouts in seconds for a process kind: ui, worker or gateway."""
    if kind == "gateway":
        return float(settings.GATEWAY_DB_CONNECT_TIMEOUT), float(settings.GATEWAY_DB_TIMEOUT)
    statement = settings.DATABASE_WORKER_STATEMENT_TIMEOUT if kind == "worker" else settings.DATABASE_STATEMENT_TIMEOUT
    return float(settings.DATABASE_CONNECT_TIMEOUT), float(statement)


def configure(db: dict[str, Any], connect: float, statement: float) -> None:
    """Set these timeouts in one DATABASES entry (a connection's own settings_dict or the setting)."""
    options = db.setdefault("OPTIONS", {})
    if db["ENGINE"].endswith("sqlite3"):
        # One local file: nothing to connect to; the wait is for another process's write lock.
        options["timeout"] = statement
        if "init_command" in options:
            options["init_command"] = re.sub(
                r"busy_timeout=\d+", f"busy_timeout={int(statement * 1000)}", options["init_command"]
            )
        db.pop(DEADLINE_KEY, None)
        return
    options["connect_timeout"] = max(round(connect), 1)
    own = " ".join(re.sub(r"-c\s*statement_timeout=\S+", "", str(options.get("options", ""))).split())
    options["options"] = f"{own} -c statement_timeout={int(statement * 1000)}".strip()
    db[DEADLINE_KEY] = statement + _MARGIN


def use_timeouts(kind: str, alias: str = "default") -> None:
    """Give this thread's connection `kind`'s timeouts (a private copy of its settings, so other
    threads keep theirs). Call before the thread's first query, e.g. as an executor's initializer."""
    conn = connections[alias]
    if conn.connection is not None:
        conn.close()
    conn.settings_dict = copy.deepcopy(conn.settings_dict)
    configure(conn.settings_dict, *timeouts(kind))


def use_process_timeouts(kind: str, alias: str = "default") -> None:
    """Give every connection this process opens from now on `kind`'s timeouts (Celery workers)."""
    configure(settings.DATABASES[alias], *timeouts(kind))
    use_timeouts(kind, alias)


# --- the watchdog: a client-side deadline for queries the network swallows -------------------


class _Watchdog:
    """One daemon thread per process; `armed(fd, seconds)` shuts `fd` down if still armed then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, int] = {}  # token -> fd
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self.fired = 0

    @contextmanager
    def armed(self, fd: int, seconds: float) -> Iterator[None]:
        token = next(self._ids)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="db-watchdog", daemon=True)
                self._thread.start()
            self._armed[token] = fd
            heapq.heappush(self._heap, (time.monotonic() + seconds, token))
            self._wake.notify()
        try:
            yield
        finally:
            with self._lock:
                self._armed.pop(token, None)

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or self._heap[0][1] not in self._armed):
                    _, token = heapq.heappop(self._heap)
                    fd = self._armed.pop(token, None)
                    if fd is not None:
                        # Under the lock: the query's thread is still inside it, so `fd` is still its socket.
                        self._shut(fd)
                self._wake.wait(self._heap[0][0] - now if self._heap else None)

    def _shut(self, fd: int) -> None:
        self.fired += 1
        logger.warning("a database query outlived its deadline (a stalled network?): dropping its connection")
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.close()


watchdog = _Watchdog()


def _fd_of(conn: Any) -> int | None:
    raw = getattr(conn, "connection", None)
    pgconn = getattr(raw, "pgconn", None)
    try:
        return int(pgconn.socket) if pgconn is not None else None
    except Exception:  # closed or broken: nothing to watch
        return None


@contextmanager
def deadline(conn: Any, seconds: float | None = None) -> Iterator[None]:
    """Run a block of database work on `conn` (a Django connection) under its client-side deadline."""
    limit = seconds if seconds is not None else conn.settings_dict.get(DEADLINE_KEY)
    fd = _fd_of(conn) if limit else None
    if fd is None or limit is None:
        yield
        return
    with watchdog.armed(fd, float(limit)):
        yield


def _guard_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Every new PostgreSQL connection: its queries and its health check run under the deadline."""
    if connection.vendor != "postgresql" or getattr(connection, "_portal_guarded", False):
        return
    connection._portal_guarded = True

    def wrapper(execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any) -> Any:
        with deadline(connection):
            return execute(sql, params, many, context)

    connection.execute_wrappers.append(wrapper)
    is_usable = connection.is_usable

    def guarded_is_usable() -> bool:
        # A round trip, not a statement: a kept connection a stalled network holds is dropped
        # within the connect timeout (and the request reconnects, or fails fast).
        with deadline(connection, connection.settings_dict["OPTIONS"].get("connect_timeout")):
            return is_usable()

    connection.is_usable = guarded_is_usable


connection_created.connect(_guard_connection, dispatch_uid="portal.db.guard")
