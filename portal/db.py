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

A stalled network is told from a slow query sooner than that: a query still running after
`PROBE_AFTER` seconds makes the watchdog ask the server, on a new socket, the first question of
PostgreSQL's protocol (an SSLRequest, answered with one byte before any authentication). No answer
within `PROBE_TIMEOUT`: the server cannot be reached, the query is cut at once (the UI's 503 page
comes within about 2 s, not after the 30 s statement timeout), and for the next few seconds a new
connection is opened only after the same question was answered, so the next requests fail as fast.
An answer: the query is merely slow and keeps its full statement timeout.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import logging
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError, OperationalError, connections
from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

_MARGIN = 1.0  # the server's statement_timeout answers first when it can
DEADLINE_KEY = "PORTAL_QUERY_DEADLINE"  # in a connection's settings_dict: the client-side deadline
PROBE_AFTER = 0.75  # a query running this long makes the watchdog check that the server answers
PROBE_TIMEOUT = 0.75  # …within this long, or its query is cut
RECENTLY = 10.0  # after a failed check, new connections are opened only once the server answers
_SSL_REQUEST = struct.pack("!ii", 8, 80877103)


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


class Unreachable(Exception):
    """The database server did not answer the protocol's first question in time."""


def answers(address: str | tuple[str, int], timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether a PostgreSQL server at `address` (host and port, or a unix socket's path) answers an
    SSLRequest within `timeout`: reachable and not stalled. Needs no credentials, runs no query."""
    try:
        if isinstance(address, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(address)
        else:
            sock = socket.create_connection(address, timeout)
        with sock:
            sock.settimeout(timeout)
            sock.sendall(_SSL_REQUEST)
            return sock.recv(1) in (b"S", b"N")
    except OSError:
        return False


def server_address(db: dict[str, Any]) -> str | tuple[str, int] | None:
    """Where a connection's server listens, to probe it; None when not one plain address."""
    host, port = str(db.get("HOST") or ""), int(db.get("PORT") or 5432)
    if not host or "," in host:
        return None
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


class _Watchdog:
    """One daemon thread per process; `armed(fd, seconds, probe=address)` shuts `fd` down if still
    armed after `seconds`, or after PROBE_AFTER when the server at `address` does not answer then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, bool]] = []  # (when, token, is_a_probe)
        self._armed: dict[int, int] = {}  # token -> fd
        self._probes: dict[int, str | tuple[str, int]] = {}  # token -> the server's address
        self._cut: set[int] = set()  # tokens whose socket a failed probe shut
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self.fired = 0
        self.unreachable_at = float("-inf")  # monotonic time of the last failed probe

    @contextmanager
    def armed(
        self, fd: int, seconds: float, probe: str | tuple[str, int] | None = None
    ) -> Iterator[Callable[[], bool]]:
        """Yields a callable: whether this block's socket was cut because the server did not answer."""
        token = next(self._ids)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="db-watchdog", daemon=True)
                self._thread.start()
            self._armed[token] = fd
            heapq.heappush(self._heap, (time.monotonic() + seconds, token, False))
            if probe is not None and seconds > PROBE_AFTER + PROBE_TIMEOUT:
                self._probes[token] = probe
                heapq.heappush(self._heap, (time.monotonic() + PROBE_AFTER, token, True))
            self._wake.notify()
        try:
            yield lambda: token in self._cut
        finally:
            with self._lock:
                self._armed.pop(token, None)
                self._probes.pop(token, None)
                self._cut.discard(token)

    def recently_unreachable(self) -> bool:
        return time.monotonic() - self.unreachable_at < RECENTLY

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or self._heap[0][1] not in self._armed):
                    _, token, is_a_probe = heapq.heappop(self._heap)
                    if is_a_probe:
                        address = self._probes.get(token)
                        if token in self._armed and address is not None:
                            threading.Thread(target=self._probe, args=(token, address), daemon=True).start()
                        continue
                    fd = self._armed.pop(token, None)
                    if fd is not None:
                        # Under the lock: the query's thread is still inside it, so `fd` is still its socket.
                        self._shut(fd)
                self._wake.wait(self._heap[0][0] - now if self._heap else None)

    def _probe(self, token: int, address: str | tuple[str, int]) -> None:
        if answers(address):
            return
        with self._lock:
            self.unreachable_at = time.monotonic()
            fd = self._armed.pop(token, None)
            if fd is not None:
                self._cut.add(token)
                logger.warning("the database server does not answer (a stalled network?): dropping a connection")
                self._shut(fd, quiet=True)

    def _shut(self, fd: int, quiet: bool = False) -> None:
        self.fired += 1
        if not quiet:
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
    """Run a block of database work on `conn` (a Django connection) under its client-side deadline
    (and the early check that its server answers). When the check found the server unreachable,
    the block's error is an OperationalError saying so."""
    limit = seconds if seconds is not None else conn.settings_dict.get(DEADLINE_KEY)
    fd = _fd_of(conn) if limit else None
    if fd is None or limit is None:
        yield
        return
    with watchdog.armed(fd, float(limit), probe=server_address(conn.settings_dict)) as was_cut:
        try:
            yield
        except Exception as exc:
            if was_cut():
                raise _unreachable(conn) from exc
            raise


def _unreachable(conn: Any) -> Exception:
    from django.db import OperationalError

    return OperationalError(f"the database server at {server_address(conn.settings_dict)} does not answer")


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
        before = watchdog.unreachable_at
        with deadline(connection, connection.settings_dict["OPTIONS"].get("connect_timeout")):
            usable = is_usable()
        if not usable and watchdog.unreachable_at != before and watchdog.recently_unreachable():
            raise _unreachable(connection)  # no point reconnecting through the same stall now
        return usable

    connection.is_usable = guarded_is_usable

    get_new_connection = connection.get_new_connection

    def checked_get_new_connection(conn_params: dict[str, Any]) -> Any:
        # Just after a failed check, ask first: a stalled server would hold libpq's whole connect
        # timeout; this answers in PROBE_TIMEOUT.
        address = server_address(connection.settings_dict)
        if address is not None and watchdog.recently_unreachable() and not answers(address):
            watchdog.unreachable_at = time.monotonic()
            raise _unreachable(connection)
        return get_new_connection(conn_params)

    connection.get_new_connection = checked_get_new_connection


connection_created.connect(_guard_connection, dispatch_uid="portal.db.guard")


def retry_when_locked(work: Callable[[], _T], *, mend: Callable[[], bool] | None = None) -> _T:
    """`work()`, again while SQLite (the embedded default) answers "locked" because another process
    holds its write lock (5 tries, 50-200 ms apart), and once more after an IntegrityError when
    `mend()` says it removed the cause (`empty_deleted_references`)."""
    locked, mended = 0, False
    while True:
        try:
            return work()
        except IntegrityError:
            if mended or mend is None or not mend():
                raise
            mended = True
        except OperationalError as exc:
            if "locked" not in str(exc) or locked == 4:
                raise
            locked += 1
            time.sleep(0.05 * locked)


def empty_deleted_references(model: Any, items: list[Any], fields: tuple[str, ...]) -> bool:
    """Set to None each of `fields` (foreign keys of `model`, as attributes of `items`: `key_id`)
    that names a row no longer there, one query per field the items use; True when any was. A batch
    written after a row it names was deleted (the deletion's SET NULL came before it) fails its
    commit on that key: emptied, it is written as the deletion left the older rows."""
    gone: dict[str, set[int]] = {}
    for name in fields:
        named = {value for item in items if (value := getattr(item, name)) is not None}
        if named:
            target = model._meta.get_field(name.removesuffix("_id")).related_model
            there = set(target._default_manager.filter(pk__in=named).values_list("pk", flat=True))
            if named - there:
                gone[name] = named - there
    emptied = 0
    for item in items:
        names = [name for name, ids in gone.items() if getattr(item, name) in ids]
        for name in names:
            setattr(item, name, None)
        emptied += bool(names)
    if emptied:
        logger.warning(
            "%d %s name a %s deleted since they were made: written without it",
            emptied,
            model._meta.verbose_name_plural,
            " or ".join(name.removesuffix("_id") for name in gone),
        )
    return bool(emptied)
