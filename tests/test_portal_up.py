"""`portal up` on a fresh data folder: it migrates, creates the admin, serves /healthz with the
database and broker OK, lets the admin log in over HTTP, and stops cleanly on Ctrl-C.

Runs the real command in a subprocess with the embedded defaults (SQLite, filesystem broker).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.services import free_port

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 180  # migrations + uvicorn + celery on a busy 2-core CI box
# Variables that would point the command away from its embedded defaults.
EXTERNAL = (
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "DJANGO_SECRET_KEY",
    "PORTAL_ENCRYPTION_KEYS",
    "PORTAL_KEY_HASH_SECRET",
    "PORTAL_ADMIN_PASSWORD",
    "DJANGO_SETTINGS_MODULE",
    "PORTAL_SUPERVISED",
)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc (no psutil needed)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Portal:
    """`portal up` in a subprocess, with its output collected by a thread."""

    def __init__(self, tmp_path: Path, admin_password: str | None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k not in EXTERNAL}
        env["PORTAL_DATA_DIR"] = str(tmp_path / "data")
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        if admin_password is not None:
            env["PORTAL_ADMIN_PASSWORD"] = admin_password
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "portal.cli", "up", "--port", str(self.port)],
            cwd=tmp_path,  # anything the command writes to its working folder stays out of the repo
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_healthy(self) -> dict:
        deadline = time.monotonic() + START_TIMEOUT
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"portal up exited with {self.proc.returncode}:\n{self.output[-4000:]}")
            try:
                response = httpx.get(self.url + "/healthz", timeout=5)
                last = response.status_code
                if response.status_code == 200:
                    return response.json()
            except httpx.HTTPError as exc:
                last = exc.__class__.__name__
            time.sleep(0.5)
        pytest.fail(f"/healthz not ready after {START_TIMEOUT}s (last: {last}):\n{self.output[-4000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.reader.join(timeout=5)

    def kill(self) -> None:
        for pid in descendants(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def start(tmp_path):
    started: list[Portal] = []

    def _start(admin_password: str | None) -> Portal:
        portal = Portal(tmp_path, admin_password)
        started.append(portal)
        return portal

    yield _start
    for portal in started:
        portal.kill()


def log_in(url: str, username: str, password: str) -> httpx.Response:
    """Log in like a browser: fetch the form for the CSRF cookie and token, then post it."""
    with httpx.Client(base_url=url, timeout=30, follow_redirects=True) as client:
        form = client.get("/login/")
        assert form.status_code == 200
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        response = client.post(
            "/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": token}
        )
        if str(response.url).rstrip("/") == url:
            # Logged in: the dashboard needs the session, proving the cookie works.
            assert client.get("/keys/").status_code == 200
        return response


def check_up_then_stop(portal: Portal, password: str) -> None:
    health = portal.wait_healthy()
    assert health["status"] == "ok"
    assert health["database"]["ok"] and health["database"]["engine"] == "sqlite"
    assert health["broker"] == {"ok": True, "transport": "filesystem"}

    wrong = log_in(portal.url, "admin", password + "-wrong")
    assert "/login/" in str(wrong.url)
    dashboard = log_in(portal.url, "admin", password)
    assert str(dashboard.url).rstrip("/") == portal.url, dashboard.url
    assert "Dashboard" in dashboard.text and "Log out" in dashboard.text

    # All three children run: web, worker and beat.
    family = descendants(portal.proc.pid)
    commands = " ".join(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ") for pid in family if alive(pid))
    assert "uvicorn" in commands and " worker" in commands and " beat" in commands

    assert portal.stop() == 0, portal.output[-4000:]
    assert "portal: stopped." in portal.output
    assert not [pid for pid in family if alive(pid)], "children survived Ctrl-C"
    with pytest.raises(httpx.ConnectError):
        httpx.get(portal.url + "/healthz", timeout=2)


def test_portal_up_with_admin_password_from_the_environment(start):
    portal = start("correct-horse-battery-9")
    check_up_then_stop(portal, "correct-horse-battery-9")
    assert "password from PORTAL_ADMIN_PASSWORD" in portal.output
    assert "correct-horse-battery-9" not in portal.output


def test_portal_up_prints_a_generated_admin_password_once(start):
    portal = start(None)
    portal.wait_healthy()
    match = re.search(r"^\s*password: (\S+)\s*$", portal.output, re.M)
    assert match, portal.output[-2000:]
    check_up_then_stop(portal, match.group(1))
    assert portal.output.count(match.group(1)) == 1
