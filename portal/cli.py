"""`portal` command: `portal up` runs the whole portal as one supervised process group.

    portal up [--host 127.0.0.1] [--port 8000] [--no-worker] [--no-beat]
    portal manage <django command> ...
    portal genkey            # print a new Fernet key for PORTAL_ENCRYPTION_KEYS

`up` applies migrations, creates the first admin if there is none, then starts uvicorn (web and
gateway), a Celery worker and Celery beat as child processes. A child that crashes is restarted
with back-off (a crash loop stops everything with its exit code); Ctrl-C or SIGTERM stops them all,
TERM first, KILL after a grace period.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

GRACE_SECONDS = 10
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()


@dataclass
class Child:
    name: str
    argv: list[str]
    essential: bool = True
    proc: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)

    def start(self) -> None:
        # Own process group, so a terminal's Ctrl-C reaches only us and we stop children in order.
        self.proc = subprocess.Popen(self.argv, start_new_session=True)

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


class Supervisor:
    def __init__(self, children: list[Child]):
        self.children = children
        self.stopping = False

    def _on_signal(self, signum, frame) -> None:
        self.stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        for child in self.children:
            child.start()
        code = 0
        while not self.stopping:
            time.sleep(0.2)
            for child in self.children:
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
                child.start()
        self.shutdown()
        return code

    def shutdown(self) -> None:
        print("portal: stopping…", file=sys.stderr, flush=True)
        for child in reversed(self.children):
            child.signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for child in self.children:
            if not child.proc:
                continue
            try:
                child.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                print(f"portal: {child.name} did not stop in {GRACE_SECONDS}s; killing.", file=sys.stderr)
                child.signal(signal.SIGKILL)
                child.proc.wait()
        print("portal: stopped.", file=sys.stderr, flush=True)


def build_children(args, settings) -> list[Child]:
    py = sys.executable
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
            ],
        ),
    ]
    embedded = settings.CELERY_BROKER_URL.startswith("filesystem://")
    if not args.no_worker:
        pool = ["-P", "threads", "-c", "4"] if embedded else ["-c", str(args.worker_concurrency)]
        children.append(Child("worker", [py, "-m", "celery", "-A", "portal", "worker", "-l", "info", *pool]))
    if not args.no_beat:
        beat_schedule = str(settings.DATA_DIR / "celerybeat")
        children.append(Child("beat", [py, "-m", "celery", "-A", "portal", "beat", "-l", "info", "-s", beat_schedule]))
    return children


def cmd_up(args) -> int:
    _setup_django()
    from django.conf import settings
    from django.core.management import call_command

    print(f"portal: data folder {settings.DATA_DIR}", flush=True)
    print(
        f"portal: database {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}, "
        f"broker {settings.CELERY_BROKER_URL.split('://', 1)[0]}",
        flush=True,
    )
    call_command("migrate", interactive=False, verbosity=0)
    call_command("ensure_admin")
    children = build_children(args, settings)
    url = f"http://{args.host}:{args.port}/"
    print(
        f"\n  Gateway Portal is starting at {url}\n"
        f"  Log in as admin. OpenAI-compatible gateway: {url}v1   REST API docs: {url}api/docs/\n"
        "  Press Ctrl-C to stop.\n",
        flush=True,
    )
    os.environ["PORTAL_SUPERVISED"] = "1"
    return Supervisor(children).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="portal", description="Gateway Portal")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="migrate, create the first admin, run web + worker + beat")
    up.add_argument("--host", default=os.environ.get("PORTAL_HOST", "127.0.0.1"))
    up.add_argument("--port", type=int, default=int(os.environ.get("PORTAL_PORT", "8000")))
    up.add_argument("--no-worker", action="store_true", help="do not start a Celery worker")
    up.add_argument("--no-beat", action="store_true", help="do not start Celery beat")
    up.add_argument("--worker-concurrency", type=int, default=2)
    manage = sub.add_parser("manage", help="run a Django management command")
    manage.add_argument("rest", nargs=argparse.REMAINDER)
    sub.add_parser("genkey", help="print a new encryption key for PORTAL_ENCRYPTION_KEYS")
    args = parser.parse_args(argv)

    if args.command == "up":
        return cmd_up(args)
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
