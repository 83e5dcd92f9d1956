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
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shlex
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.translation import gettext

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
    """A failure a person can act on: `message` is shown as is, `status` goes on the host."""

    status: str = HostStatus.UNREACHABLE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.seen = ""  # the host key fingerprint offered, if the handshake got that far


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
            gettext("No private key is stored for %(host)s: paste one on the host's edit page.") % {"host": host}
        )
    try:
        key = asyncssh.import_private_key(private_key)
    except (asyncssh.KeyImportError, ValueError):
        raise AuthFailed(
            f"The private key stored for {host} cannot be read: paste an unencrypted OpenSSH private key."
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
                f"First contact with {host.address}: it offers host key {client.seen}. "
                "Check it on the host (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and confirm it."
            )
        else:
            error = HostKeyChanged(
                f"Host key changed: {host.address} now offers {client.seen}, but {host.host_key_fingerprint} "
                "was confirmed. If the host was reinstalled, confirm the new key; otherwise someone may be "
                "intercepting the connection. Nothing was sent."
            )
    except asyncssh.PermissionDenied:
        error = AuthFailed(
            f"Authentication failed for {_where(host)}: add the portal's public key to "
            f"~{host.username}/.ssh/authorized_keys on the host, or fix the user name."
        )
    except socket.gaierror:
        error = UnknownHost(f"Unknown host: {host.address!r} does not resolve. Check the address.")
    except ConnectionRefusedError:
        error = ConnectionRefused(
            f"Connection refused by {host.address}:{host.ssh_port}: is sshd running, and is the port right?"
        )
    except TimeoutError:
        error = ConnectTimeout(
            f"No answer from {host.address}:{host.ssh_port} within {timeout:g} s: "
            "check the address, the port, a firewall or the VPN."
        )
    except (asyncssh.Error, OSError) as exc:
        detail = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc.__class__.__name__
        error = SSHError(f"Cannot reach {host.address}:{host.ssh_port}: {detail}.")
    error.seen = client.seen
    raise error


class Remote:
    """One SSH connection used synchronously (tasks, services and views are sync code).

    It runs its own event loop, so it must not be used from inside a running loop. On entry the
    offered host key is recorded on the host whether or not the connection succeeds.
    """

    def __init__(self, host: Host, *, timeout: float = CONNECT_TIMEOUT) -> None:
        self.host = host
        self.timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: asyncssh.SSHClientConnection | None = None

    def __enter__(self) -> Remote:
        self._loop = asyncio.new_event_loop()
        try:
            self._conn = self._loop.run_until_complete(_connect(self.host, self.host.private_key, self.timeout))
        except SSHError as exc:
            self._loop.close()
            _record_seen(self.host, getattr(exc, "seen", ""))
            logger.info("ssh to host %s failed: %s", self.host.pk, exc.message)
            raise
        except BaseException:
            self._loop.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        try:
            if self._conn is not None:
                self._conn.close()
                self._loop.run_until_complete(self._conn.wait_closed())
        finally:
            self._loop.close()

    def run(self, command: list[str] | str, *, timeout: float = COMMAND_TIMEOUT, input: str | None = None) -> Result:
        """Run an argument list (quoted here) or a script built only from quoted parts."""
        import asyncssh

        assert self._loop is not None and self._conn is not None, "use Remote as a context manager"
        line = shlex.join(command) if isinstance(command, list) else command
        try:
            completed = self._loop.run_until_complete(
                asyncio.wait_for(self._conn.run(line, input=input, check=False), timeout)
            )
        except TimeoutError:
            raise CommandTimeout(f"A command on {self.host} did not finish within {timeout:g} s.") from None
        except (asyncssh.Error, OSError) as exc:
            raise SSHError(f"The SSH connection to {self.host} broke: {exc}.") from None
        return Result(
            exit_status=completed.exit_status if completed.exit_status is not None else -1,
            stdout=_text(completed.stdout),
            stderr=_text(completed.stderr),
        )


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def connect(host: Host, *, timeout: float = CONNECT_TIMEOUT) -> Remote:
    """A `Remote` for `host`: `with ssh.connect(host) as remote: ...`. Errors are `SSHError`s."""
    return Remote(host, timeout=timeout)


def mark_contact(host: Host, *, status: str, message: str = "") -> None:
    """Write the outcome of a contact onto the host (status, message, time)."""
    from ..models import Host as HostModel

    HostModel.objects.filter(pk=host.pk).update(
        status=status, status_message=message[:300], last_checked=timezone.now()
    )
    host.status, host.status_message = status, message[:300]
