"""SSH to GPU hosts with asyncssh, behind a small synchronous facade for tasks and services.

The host key is pinned: the first contact records the fingerprint offered in
`Host.seen_host_key_fingerprint` and refuses to go on until an admin confirms it (it becomes
`host_key_fingerprint`); afterwards any other key is refused with "host key changed". Keys are
checked before authentication, so an impostor never gets as far as a signature from our key.

Every failure is an `SSHError` whose `message` says what happened and what to do, and whose
`status` is the `HostStatus` the host should show. Commands are argument lists; `Remote.run`
quotes them with `shlex.join`, so no user text reaches the remote shell unquoted.

    with ssh.connect(host) as remote:
        result = remote.run(["nvidia-smi", "--version"])

Every connection lives on one event loop per process, in a daemon thread, so a connection can
outlive the `with` that opened it: `connect(host, reuse=True)` (the on-demand placement and the
launch job it runs) takes the host's pooled connection, opening it on first use and keeping it
HOSTS_SSH_KEEP_SECONDS after its last use, so a cold start pays for one SSH handshake per host,
not one per step. A pooled connection is keyed by everything that decides whom it talks to
(address, port, user, pinned fingerprint, key): change any of them and the next use opens a new
connection, checked against the pin like any other. Each command is one session on the
connection (`Remote.run`); `Remote.run_many` puts several commands in one session.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import shlex
import socket
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.utils import timezone, translation
from django.utils.translation import gettext_noop

from portal.i18n import Message, as_message, set_message

from ..choices import HostStatus

if TYPE_CHECKING:
    import asyncssh

    from ..models import Host

logger = logging.getLogger(__name__)
# asyncssh logs every command line at INFO; ours carry the upstream API key (`--api-key`).
logging.getLogger("asyncssh").setLevel(logging.WARNING)

CONNECT_TIMEOUT = 10.0
COMMAND_TIMEOUT = 60.0


class SSHError(Exception):
    """A failure a person can act on: `text` is stored (`Message.columns`) and shown as `message`
    in the reader's language; `status` goes on the host."""

    status: str = HostStatus.UNREACHABLE

    def __init__(self, text: Message | str) -> None:
        self.text = as_message(text)
        super().__init__(self.text.english)
        self.seen = ""

    @property
    def message(self) -> str:
        return self.text.render()  # the host key fingerprint offered, if the handshake got that far


class UnknownHost(SSHError):
    pass


class ConnectionRefused(SSHError):
    pass


class ConnectTimeout(SSHError):
    pass


class AuthFailed(SSHError):
    status = HostStatus.AUTH_FAILED


class HostKeyChanged(SSHError):
    status = HostStatus.HOST_KEY_CHANGED


class HostKeyUnconfirmed(SSHError):
    status = HostStatus.HOST_KEY_UNCONFIRMED


class CommandTimeout(SSHError):
    pass


@dataclass
class Result:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def fingerprint(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


@functools.cache
def _pinning_client() -> Any:
    """asyncssh is imported on first contact, not with the app: it is ~21 MiB of every web and
    gateway process otherwise (bench/README.md, RSS)."""
    import asyncssh

    class PinningClient(asyncssh.SSHClient):
        """Accept only the pinned host key; remember whatever key was offered."""

        def __init__(self, pinned: str) -> None:
            self.pinned = pinned
            self.seen = ""

        def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
            self.seen = fingerprint(key)
            return bool(self.pinned) and self.seen == self.pinned

    return PinningClient


def _where(host: Host) -> str:
    return f"{host.username}@{host.address}:{host.ssh_port}"


def _record_seen(host: Host, seen: str) -> None:
    """Store the offered fingerprint without touching the audited fields."""
    from ..models import Host as HostModel

    if seen and seen != host.seen_host_key_fingerprint:
        HostModel.objects.filter(pk=host.pk).update(seen_host_key_fingerprint=seen)
        host.seen_host_key_fingerprint = seen


async def _connect(host: Host, private_key: str, timeout: float) -> asyncssh.SSHClientConnection:  # noqa: ASYNC109
    import asyncssh

    if not private_key:
        raise AuthFailed(
            Message(
                gettext_noop("No private key is stored for %(host)s: paste one on the host's edit page."), host=host
            )
        )
    try:
        key = asyncssh.import_private_key(private_key)
    except (asyncssh.KeyImportError, ValueError):
        raise AuthFailed(
            Message(
                gettext_noop(
                    "The private key stored for %(host)s cannot be read: paste an unencrypted OpenSSH private key."
                ),
                host=host,
            )
        ) from None
    client = _pinning_client()(host.host_key_fingerprint)
    try:
        conn, _ = await asyncio.wait_for(
            asyncssh.create_connection(
                lambda: client,
                host.address,
                port=host.ssh_port,
                username=host.username,
                client_keys=[key],
                known_hosts=([], [], []),  # nothing trusted up front: the callback above decides
                agent_path=None,
                password=None,
                kbdint_auth=False,
                config=None,
                login_timeout=timeout,
            ),
            timeout=timeout,
        )
        return conn
    except SSHError as exc:
        exc.seen = client.seen
        raise
    except asyncssh.HostKeyNotVerifiable:
        if not host.host_key_fingerprint:
            error: SSHError = HostKeyUnconfirmed(
                Message(
                    gettext_noop(
                        "First contact with %(address)s: it offers host key %(seen)s. Check it on the host "
                        "(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and confirm it."
                    ),
                    address=host.address,
                    seen=client.seen,
                )
            )
        else:
            error = HostKeyChanged(
                Message(
                    gettext_noop(
                        "Host key changed: %(address)s now offers %(seen)s, but %(pinned)s was confirmed. If the "
                        "host was reinstalled, confirm the new key; otherwise someone may be intercepting the "
                        "connection. Nothing was sent."
                    ),
                    address=host.address,
                    seen=client.seen,
                    pinned=host.host_key_fingerprint,
                )
            )
    except asyncssh.PermissionDenied:
        error = AuthFailed(
            Message(
                gettext_noop(
                    "Authentication failed for %(where)s: add the portal's public key to "
                    "~%(user)s/.ssh/authorized_keys on the host, or fix the user name."
                ),
                where=_where(host),
                user=host.username,
            )
        )
    except socket.gaierror:
        error = UnknownHost(
            Message(
                gettext_noop("Unknown host: %(address)s does not resolve. Check the address."),
                address=repr(host.address),
            )
        )
    except ConnectionRefusedError:
        error = ConnectionRefused(
            Message(
                gettext_noop("Connection refused by %(address)s:%(port)s: is sshd running, and is the port right?"),
                address=host.address,
                port=host.ssh_port,
            )
        )
    except TimeoutError:
        error = ConnectTimeout(
            Message(
                gettext_noop(
                    "No answer from %(address)s:%(port)s within %(seconds)s s: "
                    "check the address, the port, a firewall or the VPN."
                ),
                address=host.address,
                port=host.ssh_port,
                seconds=f"{timeout:g}",
            )
        )
    except (asyncssh.Error, OSError) as exc:
        detail = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc.__class__.__name__
        error = SSHError(
            Message(
                gettext_noop("Cannot reach %(address)s:%(port)s: %(detail)s."),
                address=host.address,
                port=host.ssh_port,
                detail=detail,
            )
        )
    error.seen = client.seen
    raise error


T = TypeVar("T")

_loop_lock = threading.Lock()
_loop_state: tuple[int, asyncio.AbstractEventLoop] | None = None


def _loop() -> asyncio.AbstractEventLoop:
    """This process's SSH event loop (started on first use; a forked child starts its own, since
    the parent's thread and connections did not come along)."""
    global _loop_state
    with _loop_lock:
        if _loop_state is None or _loop_state[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="ssh-loop", daemon=True).start()
            _loop_state = (os.getpid(), loop)
            _pool.clear()
            _host_locks.clear()
        return _loop_state[1]


def _call(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on the SSH loop and wait for it (its own deadlines bound the wait), in the caller's
    language: its messages reach the page that asked."""
    return asyncio.run_coroutine_threadsafe(_in_language(translation.get_language(), coro), _loop()).result()


async def _in_language(language: str | None, coro: Coroutine[Any, Any, T]) -> T:
    # Django keeps the active language per task on an event loop (asgiref's Local), so concurrent
    # callers in other languages do not see this one.
    if language:
        translation.activate(language)
    return await coro


@dataclass
class _Pooled:
    conn: asyncssh.SSHClientConnection
    identity: tuple[object, ...]
    last_used: float


# Touched only from the SSH loop's thread, so no lock is needed around them.
_pool: dict[int, _Pooled] = {}
_host_locks: dict[int, asyncio.Lock] = {}
_reaper: list[asyncio.TimerHandle] = []


def _identity(host: Host, private_key: str) -> tuple[object, ...]:
    """Whom a pooled connection talks to, as whom: any change means a new, newly checked one."""
    digest = hashlib.sha256(private_key.encode()).hexdigest()
    return (host.address, host.ssh_port, host.username, host.host_key_fingerprint, digest)


async def _pooled(host: Host, private_key: str, timeout: float) -> asyncssh.SSHClientConnection:  # noqa: ASYNC109
    """The host's pooled connection, opened (and pinned-checked) when there is none that is open."""
    identity = _identity(host, private_key)
    async with _host_locks.setdefault(host.pk, asyncio.Lock()):
        entry = _pool.get(host.pk)
        if entry is not None and (entry.identity != identity or entry.conn.is_closed()):
            entry.conn.close()
            del _pool[host.pk]
            entry = None
        if entry is None:
            conn = await _connect(host, private_key, timeout)
            entry = _pool[host.pk] = _Pooled(conn, identity, time.monotonic())
            _schedule_reaper()
        entry.last_used = time.monotonic()
        return entry.conn


def _schedule_reaper() -> None:
    if not _reaper:
        _reaper.append(asyncio.get_running_loop().call_later(_keep_seconds() / 2, _reap))


def _keep_seconds() -> float:
    return max(1.0, float(settings.HOSTS_SSH_KEEP_SECONDS))


def _reap() -> None:
    """Close pooled connections unused for HOSTS_SSH_KEEP_SECONDS; come back while any is left."""
    _reaper.clear()
    cutoff = time.monotonic() - _keep_seconds()
    for pk, entry in list(_pool.items()):
        if entry.last_used < cutoff or entry.conn.is_closed():
            entry.conn.close()
            del _pool[pk]
    if _pool:
        _schedule_reaper()


def _discard(host: Host, conn: asyncssh.SSHClientConnection) -> None:
    """Forget a pooled connection that broke (the next use opens a new one)."""

    def drop() -> None:
        entry = _pool.get(host.pk)
        if entry is not None and entry.conn is conn:
            del _pool[host.pk]
        conn.close()

    _loop().call_soon_threadsafe(drop)


def close_pooled() -> None:
    """Close every pooled connection of this process (tests; a worker shutting down)."""

    async def close_all() -> None:
        for entry in list(_pool.values()):
            entry.conn.close()
        _pool.clear()

    _call(close_all())


class Remote:
    """One SSH connection used synchronously (tasks, services and views are sync code): its
    coroutines run on the process's SSH loop. On entry the offered host key is recorded on the
    host whether or not the connection succeeds. With `reuse` the connection is the host's pooled
    one and stays open on exit."""

    def __init__(self, host: Host, *, timeout: float = CONNECT_TIMEOUT, reuse: bool = False) -> None:
        self.host = host
        self.timeout = timeout
        self.reuse = reuse
        self._conn: asyncssh.SSHClientConnection | None = None

    def _open(self) -> asyncssh.SSHClientConnection:
        key = self.host.private_key
        return _call(_pooled(self.host, key, self.timeout) if self.reuse else _connect(self.host, key, self.timeout))

    def __enter__(self) -> Remote:
        try:
            self._conn = self._open()
        except SSHError as exc:
            _record_seen(self.host, getattr(exc, "seen", ""))
            logger.info("ssh to host %s failed: %s", self.host.pk, exc.text.english)  # logs stay English
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not self.reuse:
            conn.close()
            _call(conn.wait_closed())

    def run(self, command: list[str] | str, *, timeout: float = COMMAND_TIMEOUT, input: str | None = None) -> Result:
        """Run an argument list (quoted here) or a script built only from quoted parts: one session."""
        import asyncssh

        assert self._conn is not None, "use Remote as a context manager"
        if self.reuse and self._conn.is_closed():  # the host closed the idle pooled connection
            self._conn = self._open()
        conn = self._conn
        line = shlex.join(command) if isinstance(command, list) else command
        try:
            completed = _call(_run(conn, line, input, timeout))
        except TimeoutError:
            raise CommandTimeout(
                Message(
                    gettext_noop("A command on %(host)s did not finish within %(seconds)s s."),
                    host=self.host,
                    seconds=f"{timeout:g}",
                )
            ) from None
        except (asyncssh.Error, OSError) as exc:
            if self.reuse:
                _discard(self.host, conn)
            raise SSHError(
                Message(gettext_noop("The SSH connection to %(host)s broke: %(error)s."), host=self.host, error=exc)
            ) from None
        return Result(
            exit_status=completed.exit_status if completed.exit_status is not None else -1,
            stdout=_text(completed.stdout),
            stderr=_text(completed.stderr),
        )

    def run_many(self, commands: list[list[str] | str], *, timeout: float = COMMAND_TIMEOUT) -> list[Result]:
        """Several commands in ONE session (one round trip instead of one each), each with its own
        exit status, stdout and stderr, as if run one by one with `run`. A command the session did
        not reach (it timed out or broke first) has exit status -1."""
        marker = f"::portal-{os.urandom(6).hex()}::"
        close = f"); s=$?; echo; echo '{marker}' $s; echo >&2; echo '{marker}' >&2"
        script = "\n".join(f"( {shlex.join(c) if isinstance(c, list) else c}\n{close}" for c in commands)
        whole = self.run(script, timeout=timeout)
        outs, errs = _sections(whole.stdout, marker), _sections(whole.stderr, marker)
        results = []
        for i in range(len(commands)):
            out, status = outs[i] if i < len(outs) else ("", "")
            results.append(
                Result(
                    exit_status=int(status) if status.lstrip("-").isdigit() else -1,
                    stdout=out,
                    stderr=errs[i][0] if i < len(errs) else "",
                )
            )
        return results


def _sections(text: str, marker: str) -> list[tuple[str, str]]:
    """`out0 \n MARKER tail0 \n out1 \n MARKER tail1 …` → [(out0, tail0), (out1, tail1), …]."""
    found = []
    while (at := text.find("\n" + marker)) >= 0:
        end = text.find("\n", at + 1)
        end = len(text) if end < 0 else end
        found.append((text[:at], text[at + 1 + len(marker) : end].strip()))
        text = text[end + 1 :]
    return found


async def _run(conn: asyncssh.SSHClientConnection, line: str, input: str | None, timeout: float) -> Any:  # noqa: ASYNC109
    return await asyncio.wait_for(conn.run(line, input=input, check=False), timeout)


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def connect(host: Host, *, timeout: float = CONNECT_TIMEOUT, reuse: bool = False) -> Remote:
    """A `Remote` for `host`: `with ssh.connect(host) as remote: ...`. Errors are `SSHError`s.
    With `reuse`, the host's pooled connection (see the module's docstring)."""
    return Remote(host, timeout=timeout, reuse=reuse)


def mark_contact(host: Host, *, status: str, message: Message | str = "") -> None:
    """Write the outcome of a contact onto the host (status, message, time)."""
    from ..models import Host as HostModel

    columns = set_message(host, "status_message", message)
    HostModel.objects.filter(pk=host.pk).update(status=status, last_checked=timezone.now(), **columns)
    host.status = status
