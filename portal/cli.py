"""`portal` command: `portal up` runs the whole portal as one supervised process group.

    portal up [--host 127.0.0.1] [--port 8000] [--no-worker] [--no-beat] [--access-log]
    portal manage <django command> ...      e.g. `portal manage createtoken alice`
    portal genkey            # print a new Fernet key for PORTAL_ENCRYPTION_KEYS
    portal backup [--output FILE]            # database, embedded Redis and secrets in one 0600 archive
    portal restore FILE [--force]            # into PORTAL_DATA_DIR (and DATABASE_URL), empty unless --force

`up` takes the data folder's lock (a second `up` on the same folder refuses, naming the first one's
PID), checks the port, starts the embedded Redis when `REDIS_URL` is unset, applies migrations,
creates the first admin if there is none, then starts uvicorn (web and gateway), a Celery worker
and Celery beat as child processes. A child that crashes is restarted with back-off (a crash loop
stops everything with its exit code); so is the web child when it stops answering `/healthz` (a
blocked event loop is alive to the kernel and would otherwise be left hung). Ctrl-C, SIGTERM and
SIGHUP (the terminal closed) stop them all, TERM first, KILL after a grace period, the embedded
Redis last. Children die with the supervisor even when it is SIGKILLed (Linux `PR_SET_PDEATHSIG`).

`./.env` is read when present (variables already set in the environment win).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

GRACE_SECONDS = 10
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
_PR_SET_PDEATHSIG = 1


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()


def _die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """In the child, before exec: get `sig` when the supervisor dies, however it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's own shutdown still applies
        return
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os.kill(os.getpid(), sig)


@dataclass
class Liveness:
    """Asks a child over HTTP, every `every` seconds, whether it still answers. A child that misses
    `failures` answers in a row is hung (`hung` is then the process it judged), once it has answered
    since its start or has had `start` seconds to do so: a slow start on a loaded box is not a hang."""

    host: str
    port: int
    path: str = "/healthz"
    every: float = 10.0
    failures: int = 3
    start: float = 300.0
    hung: subprocess.Popen | None = None

    def watch(self, name: str, proc: subprocess.Popen) -> None:
        threading.Thread(target=self._probe, args=(name, proc), name="portal-liveness", daemon=True).start()

    def _probe(self, name: str, proc: subprocess.Popen) -> None:
        armed, missed = False, 0
        started = time.monotonic()
        while proc.poll() is None:
            time.sleep(self.every)
            if self._answers():
                if not armed:
                    print(
                        f"portal: {name} answers {self.path}; it is restarted if it stops answering for "
                        f"{self.every * self.failures:g} s.",
                        file=sys.stderr,
                        flush=True,
                    )
                armed, missed = True, 0
                continue
            missed += 1
            armed = armed or time.monotonic() - started >= self.start
            if armed and missed >= self.failures and proc.poll() is None:
                self.hung = proc
                return

    def _answers(self) -> bool:
        import http.client

        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.every)
        try:
            conn.request("GET", self.path)
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()


def liveness_from_env(host: str, port: int) -> Liveness:
    """The web child's probe: `PORTAL_UP_PROBE_SECONDS` (interval and timeout, default 10),
    `PORTAL_UP_PROBE_FAILURES` (default 3; a child is restarted after ~30-60 s without an answer) and
    `PORTAL_UP_PROBE_START_SECONDS` (default 300: how long a child that never answered may take to start)."""
    if host in ("0.0.0.0", ""):  # listening on every address: reached on loopback
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    every = _positive("PORTAL_UP_PROBE_SECONDS", float, 10.0)
    failures = int(_positive("PORTAL_UP_PROBE_FAILURES", int, 3))
    start = _positive("PORTAL_UP_PROBE_START_SECONDS", float, 300.0)
    return Liveness(host.strip("[]"), port, every=every, failures=failures, start=start)


def _positive(name: str, kind: type[float] | type[int], default: float) -> float:
    raw = (os.environ.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise SystemExit(f"portal: Invalid value for {name}: {raw!r} is not a positive number.")
    return value


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    prepare: Callable[[], None] | None = None  # before each start
    ready: Callable[[subprocess.Popen], None] | None = None  # blocks until the child serves, or raises
    proc: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)
    # What the child gets when the supervisor dies without stopping it (SIGKILL of the supervisor):
    # nobody is left to follow a TERM with a KILL, so a child whose TERM may wait uses KILL here.
    death_signal: int = signal.SIGTERM
    liveness: Liveness | None = None  # restarted when it stops answering, not only when it exits

    def start(self) -> None:
        if self.prepare is not None:
            self.prepare()
        parent = os.getpid()
        # Own session, so a terminal's Ctrl-C reaches only us and we stop children in order.
        self.proc = subprocess.Popen(
            self.argv,
            start_new_session=True,
            env=self.env,
            preexec_fn=lambda: _die_with_parent(parent, self.death_signal),
        )
        if self.ready is not None:
            self.ready(self.proc)
        if self.liveness is not None:
            self.liveness.watch(self.name, self.proc)

    def kill_if_hung(self) -> None:
        """TERM, then KILL after a few seconds, the child its probe found hung (the run loop then
        restarts it as a child that exited)."""
        if self.liveness is None or self.proc is None or self.liveness.hung is not self.proc:
            return
        self.liveness.hung = None
        if self.proc.poll() is not None:
            return
        probe = self.liveness
        print(
            f"portal: {self.name} has not answered {probe.path} for {probe.every * probe.failures:g} s; restarting it.",
            file=sys.stderr,
            flush=True,
        )
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait()

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, deadline: float) -> None:
        if not self.proc:
            return
        try:
            self.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            print(f"portal: {self.name} did not stop in {GRACE_SECONDS}s; killing.", file=sys.stderr)
            self.signal(signal.SIGKILL)
            self.proc.wait()


class Supervisor:
    """Starts `first` (the embedded Redis) before and stops it after the other children."""

    def __init__(self, children: list[Child], first: list[Child] | None = None):
        self.first = first or []
        self.children = children
        self.stopping = False

    @property
    def everyone(self) -> list[Child]:
        return [*self.first, *self.children]

    def _on_signal(self, signum, frame) -> None:
        self.stopping = True

    def install_signals(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def start_first(self) -> None:
        for child in self.first:
            child.start()

    def run(self) -> int:
        self.install_signals()
        for child in self.children:
            if not self.stopping:
                child.start()
        code = 0
        while not self.stopping:
            time.sleep(0.2)
            for child in self.everyone:
                child.kill_if_hung()
                rc = child.proc.poll() if child.proc else None
                if rc is None or self.stopping:
                    continue
                now = time.monotonic()
                child.restarts = [t for t in child.restarts if now - t < RESTART_WINDOW]
                if len(child.restarts) >= MAX_RESTARTS:
                    print(f"portal: {child.name} keeps failing (exit {rc}); stopping.", file=sys.stderr)
                    self.stopping, code = True, rc or 1
                    break
                print(f"portal: {child.name} exited with {rc}; restarting.", file=sys.stderr, flush=True)
                child.restarts.append(now)
                time.sleep(min(2 ** len(child.restarts) / 4, 5))
                try:
                    child.start()
                except Exception as exc:  # the embedded Redis did not come back: try again next round
                    print(f"portal: {child.name} did not restart: {exc}", file=sys.stderr, flush=True)
        self.shutdown()
        return code

    def shutdown(self) -> None:
        print("portal: stopping…", file=sys.stderr, flush=True)
        for group in (self.children, self.first):  # Redis last: the others flush into it
            for child in reversed(group):
                child.signal(signal.SIGTERM)
            deadline = time.monotonic() + GRACE_SECONDS
            for child in group:
                child.stop(deadline)
        print("portal: stopped.", file=sys.stderr, flush=True)


# Gossip (worker-to-worker events) and mingle (a start-up exchange with other workers) serve nothing
# here; each is one more broker conversation to redo, and to fail, after every broker restart.
WORKER_FLAGS = ["--without-gossip", "--without-mingle"]


# How long web keeps an idle client connection open (uvicorn's default is 5 s). Whatever sits in
# front and reuses connections (Caddy in docker-compose, nginx, a cloud load balancer, an SDK's
# pool) must drop an idle one first: a request sent on a connection the server closes at that
# moment is lost (a POST is not retried: the proxy answers 502). 75 s outlasts nginx's and AWS's
# 60 s; deploy/Caddyfile drops its idle ones after 60 s. The same value in docker-compose.yml,
# the Dockerfile and deploy/kubernetes (tests/test_compose.py).
KEEP_ALIVE_SECONDS = 75


def build_children(args, settings) -> list[Child]:
    py = sys.executable
    web_env = dict(os.environ, PORTAL_ACCESS_LOG="1" if args.access_log else "")
    children = [
        Child(
            "web",
            [
                py,
                "-m",
                "uvicorn",
                "portal.asgi:application",
                "--host",
                args.host,
                "--port",
                str(args.port),
                "--lifespan",
                "on",
                "--no-proxy-headers",  # portal.asgi applies PORTAL_TRUSTED_PROXIES itself
                "--no-access-log",
                "--timeout-graceful-shutdown",
                str(GRACE_SECONDS - 2),
                "--timeout-keep-alive",
                str(KEEP_ALIVE_SECONDS),
            ],
            env=web_env,
            liveness=liveness_from_env(args.host, args.port),
        ),
    ]
    if not args.no_worker:
        concurrency = args.worker_concurrency
        children.append(
            Child(
                "worker",
                [py, "-m", "celery", "-A", "portal", "worker", "-l", "info", "-c", str(concurrency), *WORKER_FLAGS],
            )
        )
    if not args.no_beat:
        beat_schedule = str(settings.DATA_DIR / "celerybeat")
        # Beat's TERM handler saves the schedule to the database first (DatabaseScheduler), which can
        # wait on SQLite's lock while the other children die: seen alive 30 s after the supervisor's
        # SIGKILL under load. It runs no task and its schedule is in the database: KILL loses at most
        # a last-run time (a periodic task then runs once more).
        argv = [py, "-m", "celery", "-A", "portal", "beat", "-l", "info", "-s", beat_schedule]
        children.append(Child("beat", argv, death_signal=signal.SIGKILL))
    return children


def embedded_redis_child(settings) -> Child:
    from portal import embedded_redis

    sock = embedded_redis.socket_path(settings.DATA_DIR)
    return Child(
        "redis",
        embedded_redis.server_argv(settings.DATA_DIR, sock),
        # A socket file left by a killed server would block the bind.
        prepare=lambda: sock.unlink(missing_ok=True),
        ready=lambda proc: embedded_redis.wait_ready(sock, proc),
    )


class AlreadyRunning(Exception):
    pass


def take_lock(data_dir: Path) -> IO[str]:
    """Hold `DATA_DIR/portal.pid` for as long as this process lives (the kernel drops it on death)."""
    path = data_dir / "portal.pid"
    try:
        fh = open(path, "a+")
    except OSError as exc:
        from portal import env as penv

        raise penv.unwritable(data_dir, exc) from None
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        fh.seek(0)
        pid = fh.read().strip() or "unknown"
        fh.close()
        raise AlreadyRunning(
            f"portal: another `portal up` (PID {pid}) is already running on the data folder {data_dir}. "
            "Stop it first (Ctrl-C in its terminal, or `kill " + pid + "`), or set PORTAL_DATA_DIR to another folder."
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def check_port(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on, or None (checked before any child starts)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"portal: cannot listen on {host!r}: {exc.strerror}."
    family, kind, proto, _name, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            s.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"portal: port {port} on {host} is already in use; choose another with --port or PORTAL_PORT."
            return f"portal: cannot listen on {host}:{port}: {exc.strerror}."
    return None


def cmd_up(args) -> int:
    from portal import startup

    startup.QUIET = True  # printed below as one banner, not logged by every process
    _setup_django()
    from django.conf import settings
    from django.core.management import call_command

    try:
        lock = take_lock(settings.DATA_DIR)
    except AlreadyRunning as exc:
        print(exc, file=sys.stderr)
        return 1
    problem = check_port(args.host, args.port)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    print(f"portal: data folder {settings.DATA_DIR}", flush=True)
    unsafe = startup.warnings()
    if unsafe:
        bar = "!" * 78
        lines = "\n".join(f"  SECURITY WARNING: {text}" for text in unsafe)
        print(f"\n{bar}\n{lines}\n{bar}\n", file=sys.stderr, flush=True)
    redis_where = "REDIS_URL"
    if settings.PORTAL_EMBEDDED_REDIS:
        redis_where = "embedded (valkey-server on a unix socket in the data folder)"
    print(
        f"portal: database {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}, Redis {redis_where}",
        flush=True,
    )
    first = [embedded_redis_child(settings)] if settings.PORTAL_EMBEDDED_REDIS else []
    supervisor = Supervisor(build_children(args, settings), first=first)
    supervisor.install_signals()
    try:
        supervisor.start_first()
        call_command("migrate", interactive=False, verbosity=0)
        call_command("ensure_admin")
    except Exception as exc:
        print(f"portal: could not start: {exc}", file=sys.stderr, flush=True)
        supervisor.shutdown()
        return 1
    url = f"http://{args.host}:{args.port}/"
    print(
        f"\n  Gateway Portal is starting at {url}\n"
        f"  Log in as admin. OpenAI-compatible gateway: {url}v1   REST API docs: {url}api/docs/\n"
        "  Press Ctrl-C to stop.\n",
        flush=True,
    )
    os.environ["PORTAL_SUPERVISED"] = "1"
    try:
        return supervisor.run()
    finally:
        lock.close()


def cmd_backup(args) -> int:
    _setup_django()
    from django.conf import settings

    from portal import backup

    output = Path(args.output) if args.output else backup.default_output()
    if output.is_dir():  # `-o /backups/`: the default name in that folder
        output = backup.default_output(output)
    try:
        manifest = backup.backup(settings, output)
    except backup.BackupError as exc:
        print(f"portal: backup failed: {exc}", file=sys.stderr)
        return 1
    print(
        f"portal: backed up the {manifest['database']} database, Redis ({manifest['redis']}) and "
        f"{len(manifest['secrets'])} secret files of {settings.DATA_DIR} to {output.resolve()} (mode 0600)."
    )
    if len(manifest["secrets"]) < len(backup.SECRET_FILES):
        print("portal: secrets set in the environment are not in the archive: keep your .env with it.")
    return 0


def cmd_restore(args) -> int:
    from portal import backup
    from portal import env as penv

    penv.restrict_umask()  # what it writes into the data folder is private, as the portal's own files
    try:
        manifest = backup.restore(Path(args.archive), force=args.force)
    except backup.BackupError as exc:
        print(f"portal: restore refused: {exc}", file=sys.stderr)
        return 1
    print(
        f"portal: restored the backup of {manifest.get('created', '(no date)')} into {penv.data_dir()}. "
        "Start it with `portal up` (newer migrations, if any, are applied then)."
    )
    if manifest.get("set_aside"):
        print(
            f"portal: the replaced portal's usage not yet written to its database was moved to "
            f"{manifest['set_aside']}, so it is not added to the restored one."
        )
    return 0


def _concurrency(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of processes (1-64)") from None
    if not 1 <= number <= 64:
        raise argparse.ArgumentTypeError(f"{value} is not a number of processes (1-64)")
    return number


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number (1-65535)") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (1-65535)")
    return port


def _env_port() -> int:
    raw = (os.environ.get("PORTAL_PORT") or "").strip() or "8000"
    try:
        return _port(raw)
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"portal: Invalid value for PORTAL_PORT: {exc}") from None


def read_dotenv(path: Path) -> None:
    """Variables from `path` (django-environ's reader); the environment wins over the file."""
    if path.is_file():
        import environ

        environ.Env.read_env(str(path), overwrite=False)


def main(argv: list[str] | None = None) -> int:
    read_dotenv(Path.cwd() / ".env")
    parser = argparse.ArgumentParser(prog="portal", description="Gateway Portal")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="migrate, create the first admin, run Redis + web + worker + beat")
    up.add_argument("--host", default=(os.environ.get("PORTAL_HOST") or "").strip() or "127.0.0.1")
    up.add_argument("--port", type=_port, default=None, help="port to listen on (default: PORTAL_PORT or 8000)")
    up.add_argument("--no-worker", action="store_true", help="do not start a Celery worker")
    up.add_argument("--no-beat", action="store_true", help="do not start Celery beat")
    up.add_argument("--worker-concurrency", type=_concurrency, default=2, help="Celery worker processes (default 2)")
    up.add_argument(
        "--access-log",
        action="store_true",
        help="log one line per gateway request (method, path, status, model, key prefix, duration, tokens)",
    )
    manage = sub.add_parser("manage", help="run a Django management command (e.g. createtoken USER)")
    manage.add_argument("rest", nargs=argparse.REMAINDER)
    sub.add_parser("genkey", help="print a new encryption key for PORTAL_ENCRYPTION_KEYS")
    backup = sub.add_parser("backup", help="copy the database, the embedded Redis and the secrets into one archive")
    backup.add_argument(
        "--output", "-o", help="archive to write, or a folder for it (default: ./portal-backup-<UTC time>.tar.gz)"
    )
    restore = sub.add_parser("restore", help="restore an archive of `portal backup` into an empty data folder")
    restore.add_argument("archive")
    restore.add_argument("--force", action="store_true", help="replace what the data folder (or database) holds")
    args = parser.parse_args(argv)

    if args.command == "up":
        if args.port is None:
            args.port = _env_port()
        return cmd_up(args)
    if args.command == "backup":
        return cmd_backup(args)
    if args.command == "restore":
        return cmd_restore(args)
    if args.command == "genkey":
        from cryptography.fernet import Fernet

        print(Fernet.generate_key().decode())
        return 0
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(["portal", *args.rest])
    return 0


if __name__ == "__main__":
    sys.exit(main())
