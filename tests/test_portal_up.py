"""`portal up` on a fresh data folder, the way a new user runs it: it starts the embedded Redis,
migrates, creates the admin, serves /readyz with the database and Redis OK, lets the admin log in
over HTTP, and stops cleanly on every signal a terminal or a service manager sends; a second `up`
on the same folder refuses, a taken port refuses before any child starts, a dead embedded Redis is
restarted, and two gateway processes on the embedded default keep limits exact.

Runs the real command in a subprocess with the embedded defaults (SQLite, embedded valkey-server).
A start is four Python processes and, on a new folder, 39 migrations, so starts are few: the tests
that look at a running portal and leave it running share one (`running`, on a new folder; the last
of them stops it with Ctrl-C), and the tests of how it stops start from a copy of a folder migrated
once per run (`migrated_data_folder`), as a second start would find it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.fakes import processes
from tests.services import free_port

# The shared portal's start (a new folder's migrations and four processes) counts in its first test's
# time: minutes at a load of 30 on 2 cores, more than pyproject's 300 s per test.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 300  # migrations + uvicorn + celery on a busy 2-core box (180 s ran out at load 30); any process
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
    "PORTAL_ACCESS_LOG",
    "PORTAL_PORT",
    "PORTAL_HOST",
    "DJANGO_ALLOWED_HOSTS",
    "GATEWAY_REDIS_NAMESPACE",
)


def portal_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a new user's shell: none of the suite's services, a fresh data folder."""
    env = {k: v for k, v in os.environ.items() if k not in EXTERNAL}
    env["PORTAL_DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


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

    def __init__(
        self,
        tmp_path: Path,
        admin_password: str | None,
        *args: str,
        port: int | None = None,
        data: Path | None = None,
        env: dict[str, str] | None = None,
    ):
        """`data`: a data folder to copy in first (else `up` makes a new one); `env`: more variables."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cwd = tmp_path
        self.env = {**portal_env(tmp_path), **(env or {})}
        if data is not None:
            shutil.copytree(data, self.env["PORTAL_DATA_DIR"])  # modes kept (copy2)
        if admin_password is not None:
            self.env["PORTAL_ADMIN_PASSWORD"] = admin_password
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "portal.cli", "up", "--port", str(self.port), *args],
            cwd=tmp_path,  # anything the command writes to its working folder stays out of the repo
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = processes.Output(self.proc.stdout)

    @property
    def output(self) -> str:
        return self.reader.text

    def wait_healthy(self) -> dict:
        deadline = time.monotonic() + START_TIMEOUT
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"portal up exited with {self.proc.returncode}:\n{self.output[-4000:]}")
            try:
                response = httpx.get(self.url + "/readyz", timeout=30)  # a loaded box: 8 s seen
                last = response.status_code
                if response.status_code == 200:
                    return response.json()
            except httpx.HTTPError as exc:
                last = exc.__class__.__name__
            time.sleep(0.5)
        pytest.fail(f"/readyz not ready after {START_TIMEOUT}s (last: {last}):\n{self.output[-4000:]}")

    def family(self) -> set[int]:
        return {pid for pid in descendants(self.proc.pid) if alive(pid)}

    def commands(self) -> dict[int, str]:
        out = {}
        for pid in self.family():
            try:
                out[pid] = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
            except OSError:
                pass
        return out

    def wait_output(self, found: str | Callable[[str], bool], timeout: float = 60) -> None:
        """Until the output holds `found` (a text, or a test of the whole output)."""
        if not self.reader.wait_for(found, timeout):
            pytest.fail(f"{found!r} not in the output after {timeout}s:\n{self.output[-3000:]}")

    def stop(self, sig: int = signal.SIGINT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
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


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """One `portal up` as a new user starts it (a new data folder, a shell's 022 umask, the admin
    password from the environment, the access log on), shared by the tests that look at a running
    portal and leave it running; the last of them (the data folder's) stops it with Ctrl-C."""
    before = os.umask(0o022)
    try:
        portal = Portal(tmp_path_factory.mktemp("running"), "correct-horse-battery-9", "--access-log")
    finally:
        os.umask(before)
    try:
        portal.wait_healthy()
        yield portal
    finally:
        portal.kill()


@pytest.fixture
def up(running) -> Portal:
    """The shared portal, still running."""
    assert running.proc.poll() is None, "the shared portal was stopped by an earlier test (run the module in order)"
    return running


@pytest.fixture
def start(tmp_path):
    started: list[Portal] = []

    def _start(admin_password: str | None, *args: str, where: Path | None = None, **kwargs) -> Portal:
        """`portal up` run from `where` (default: the test's own folder)."""
        portal = Portal(where or tmp_path, admin_password, *args, **kwargs)
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


def check_up(portal: Portal, password: str) -> set[int]:
    """/readyz, a log-in over HTTP, and all four children running; returns the process family."""
    health = portal.wait_healthy()
    assert health["status"] == "ok"
    assert health["database"]["ok"] and health["database"]["engine"] == "sqlite"
    assert health["redis"]["ok"] and health["embedded_redis"] is True

    wrong = log_in(portal.url, "admin", password + "-wrong")
    assert "/login/" in str(wrong.url)
    dashboard = log_in(portal.url, "admin", password)
    assert str(dashboard.url).rstrip("/") == portal.url, dashboard.url
    assert "Dashboard" in dashboard.text and "Log out" in dashboard.text

    # All four children run: the embedded Redis, web, worker and beat.
    family = portal.family()
    commands = " ".join(portal.commands().values())
    assert "valkey-server" in commands and "uvicorn" in commands and " worker" in commands and " beat" in commands
    data = Path(portal.env["PORTAL_DATA_DIR"])
    assert (data / "redis" / "appendonlydir").is_dir()  # the embedded Redis keeps what it holds (AOF)
    return family


def check_ctrl_c_stops_everything(portal: Portal, family: set[int]) -> None:
    assert portal.stop() == 0, portal.output[-4000:]
    assert "portal: stopped." in portal.output
    assert not [pid for pid in family if alive(pid)], "children survived Ctrl-C"
    with pytest.raises(httpx.ConnectError):
        httpx.get(portal.url + "/healthz", timeout=2)


def test_portal_up_with_admin_password_from_the_environment(up):
    check_up(up, "correct-horse-battery-9")
    assert "password from PORTAL_ADMIN_PASSWORD" in up.output
    assert "correct-horse-battery-9" not in up.output


def test_a_connection_left_idle_past_uvicorns_default_keep_alive_is_still_served(up):
    """A proxy or an SDK's pool reuses a connection idle for a while: uvicorn's default closed it
    after 5 s, and a request sent on it as it closed was lost (a proxy answers 502 to a POST it
    does not retry). `portal up` keeps an idle connection KEEP_ALIVE_SECONDS (75 s), longer than
    a proxy keeps its own idle ones."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", up.port, timeout=30)
    try:
        conn.request("GET", "/healthz")
        first = conn.getresponse()
        first.read()
        assert first.status == 200 and first.getheader("connection", "").lower() != "close"
        time.sleep(6.5)  # idle past the default's 5 s (the server's timer, whatever the machine's load)
        conn.request("GET", "/healthz")  # on the same connection: it raises when the server closed it
        again = conn.getresponse()
        again.read()
        assert again.status == 200
    finally:
        conn.close()


def test_portal_up_prints_a_generated_admin_password_once(start, migrated_data_folder):
    portal = start(None, data=migrated_data_folder)
    portal.wait_healthy()
    match = re.search(r"^\s*password: (\S+)\s*$", portal.output, re.M)
    assert match, portal.output[-2000:]
    check_ctrl_c_stops_everything(portal, check_up(portal, match.group(1)))
    assert portal.output.count(match.group(1)) == 1


def wait_gone(pids: set[int], timeout: float = 30) -> set[int]:
    deadline = time.monotonic() + timeout
    left = {pid for pid in pids if alive(pid)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {pid for pid in left if alive(pid)}
    return left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=["TERM", "HUP", "KILL"])
def test_every_way_the_supervisor_ends_leaves_no_process_behind(start, migrated_data_folder, sig):
    """SIGTERM (a service manager), SIGHUP (the terminal closed) and SIGKILL of the supervisor
    itself (PR_SET_PDEATHSIG): every child, the embedded Redis included, is gone. (Ctrl-C: the
    generated password's test and the data folder's.)"""
    portal = start("correct-horse-battery-9", data=migrated_data_folder)
    portal.wait_healthy()
    named = portal.commands()
    family = portal.family()
    commands = " ".join(named.values())
    assert "valkey-server" in commands and "uvicorn" in commands, commands
    if sig == signal.SIGKILL:
        portal.proc.kill()
        portal.proc.wait(timeout=30)
    else:
        assert portal.stop(sig) == 0, portal.output[-3000:]
        assert "portal: stopped." in portal.output
    left = wait_gone(family)
    assert left == set(), f"left running after {sig.name}: " + "; ".join(f"{p} {named.get(p, '?')}" for p in left)


def test_a_web_child_that_stops_answering_is_restarted(start, migrated_data_folder):
    """A stopped (SIGSTOP) uvicorn is alive to the kernel but answers nothing, like a blocked event
    loop: after PORTAL_UP_PROBE_FAILURES missed /healthz probes the supervisor kills it and starts a
    new one, which serves."""
    probe = {"PORTAL_UP_PROBE_SECONDS": "2", "PORTAL_UP_PROBE_FAILURES": "3"}
    portal = start("correct-horse-battery-9", "--no-worker", "--no-beat", data=migrated_data_folder, env=probe)
    portal.wait_healthy()
    web = next(pid for pid, cmd in portal.commands().items() if "uvicorn" in cmd)
    portal.wait_output("portal: web answers /healthz; it is restarted if it stops answering for 6 s.")
    os.kill(web, signal.SIGSTOP)
    try:
        portal.wait_output("portal: web has not answered /healthz for 6 s; restarting it.", timeout=120)
        portal.wait_output("portal: web exited with", timeout=60)
        assert portal.wait_healthy()["status"] == "ok"
        assert not alive(web)
        assert [pid for pid, cmd in portal.commands().items() if "uvicorn" in cmd] != [web]
    finally:
        if alive(web):
            os.kill(web, signal.SIGCONT)
    assert portal.stop() == 0, portal.output[-3000:]


def test_a_bad_probe_setting_is_refused_in_one_line(tmp_path):
    env = {**portal_env(tmp_path), "PORTAL_UP_PROBE_SECONDS": "soon"}
    refused = portal_up(tmp_path, "--port", str(free_port()), env=env)
    assert refused.returncode == 1
    assert (
        refused.stderr.strip() == "portal: Invalid value for PORTAL_UP_PROBE_SECONDS: 'soon' is not a positive number."
    )


def portal_up(tmp_path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`portal up ARGS` in `tmp_path`, expected to stop by itself (refused before it starts)."""
    return subprocess.run(
        [sys.executable, "-m", "portal.cli", "up", *args],
        cwd=tmp_path,
        env=env or portal_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
    )


def test_a_second_portal_up_on_the_same_folder_refuses_and_a_dead_redis_comes_back(up):
    portal = up
    second = portal_up(portal.cwd, "--port", str(free_port()), env=portal.env)
    assert second.returncode == 1
    assert f"another `portal up` (PID {portal.proc.pid}) is already running" in second.stderr, second.stderr

    redis_pid = next(pid for pid, cmd in portal.commands().items() if "valkey-server" in cmd)
    os.kill(redis_pid, signal.SIGKILL)
    portal.wait_output("portal: redis exited with")
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        new = [pid for pid, cmd in portal.commands().items() if "valkey-server" in cmd and pid != redis_pid]
        health = httpx.get(portal.url + "/readyz", timeout=5)
        if new and health.status_code == 200 and health.json()["redis"]["ok"]:
            break
        assert time.monotonic() < deadline, portal.output[-3000:]
        time.sleep(0.25)


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = portal_up(tmp_path, "--port", str(port))
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert not (tmp_path / "data" / "redis").exists()  # no child was started, no Redis data written
    assert "portal.sqlite3" not in {p.name for p in (tmp_path / "data").iterdir()}  # nor migrated


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("PORTAL_PORT", "abc", "Invalid value for PORTAL_PORT: 'abc' is not a port number"),
        ("DJANGO_ALLOWED_HOSTS", "", "Invalid value for DJANGO_ALLOWED_HOSTS: it is set but empty"),
        ("GATEWAY_READ_TIMEOUT", "soon", "Invalid value for GATEWAY_READ_TIMEOUT"),
        ("PORTAL_PUBLIC_URL", "not-a-url", "Invalid value for PORTAL_PUBLIC_URL: 'not-a-url' is not a URL"),
        # sysfs refuses new files even to root: a folder the portal cannot write, as a read-only mount is
        ("PORTAL_DATA_DIR", "/sys/fs", "the data folder /sys/fs is not writable"),
    ],
)
def test_a_bad_variable_is_a_message_not_a_traceback(tmp_path, variable, value, message):
    result = portal_up(tmp_path, env={**portal_env(tmp_path), variable: value})
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("value", ["-1", "0", "many"])
def test_a_bad_worker_concurrency_is_refused_before_anything_starts(tmp_path, value):
    result = portal_up(tmp_path, "--worker-concurrency", value)
    assert result.returncode == 2 and "is not a number of processes (1-64)" in result.stderr, result.stderr
    assert not (tmp_path / "data" / "redis").exists()  # no child was started


def test_empty_variables_mean_unset_and_dotenv_is_read(tmp_path):
    """`.env.example` copied as is to ./.env: its empty `DATABASE_URL=`, `EMAIL_URL=`,
    `CELERY_BROKER_URL=` and `REDIS_URL=` are the defaults, and a value set in .env is used."""
    dotenv = (ROOT / ".env.example").read_text().replace("PORTAL_DATA_DIR=./var", "PORTAL_DATA_DIR=./from-dotenv")
    (tmp_path / ".env").write_text(dotenv)
    env = portal_env(tmp_path)
    env.pop("PORTAL_DATA_DIR")
    code = (
        "import sys; sys.argv = ['portal', 'manage', 'shell', '-c', "
        "'from django.conf import settings as s; "
        'print(s.DATA_DIR.name, s.DATABASES["default"]["ENGINE"], s.PORTAL_EMBEDDED_REDIS, '
        's.CELERY_BROKER_URL.split("://")[0], s.EMAIL_BACKEND.rsplit(".", 2)[-2])\']; '
        "from portal.cli import main; main(sys.argv[1:])"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1].split() == [
        "from-dotenv",
        "django.db.backends.sqlite3",
        "True",
        "redis+socket",
        "console",
    ]


def test_two_gateways_on_the_embedded_default_keep_limits_exact(up):
    """The journey of a script on the embedded default: `portal manage createtoken admin` gives a
    token, the REST API sets up a channel, a model and a key with 20 requests/min, and 60 requests
    spread over two gateway processes (the supervised one and a second uvicorn on the same data
    folder) get exactly 20 answers, with one access-log line each that names the key by prefix."""
    from tests.fakes.upstream import FakeUpstream
    from tests.gateway.test_limits import burst

    portal = up
    made = subprocess.run(
        [sys.executable, "-m", "portal.cli", "manage", "createtoken", "admin", "--quiet"],
        cwd=portal.cwd,
        env=portal.env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    token = made.stdout.strip()
    assert token.startswith("gpt-"), made.stdout

    second_port = free_port()
    second = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--port", str(second_port), "--lifespan", "on"],
        cwd=portal.cwd,
        env={**portal.env, "PORTAL_ACCESS_LOG": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    with FakeUpstream(api_key="sk-up") as up:
        try:
            api = httpx.Client(base_url=portal.url, headers={"Authorization": f"Token {token}"}, timeout=30)
            channel = api.post(
                "/api/channels/", json={"name": "fake", "kind": "vllm", "base_url": up.base_url, "api_key": "sk-up"}
            )
            assert channel.status_code == 201, channel.text
            model = api.post(
                "/api/models/",
                json={
                    "name": "qwen3-32b",
                    "routes": [{"channel": channel.json()["id"], "upstream_model": "fake-model"}],
                },
            )
            assert model.status_code == 201, model.text
            key = api.post("/api/keys/", json={"name": "burst", "requests_per_minute": 20})
            assert key.status_code == 201, key.text
            plaintext = key.json()["key"]

            second_url = f"http://127.0.0.1:{second_port}"
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                try:
                    if httpx.get(second_url + "/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert second.poll() is None and time.monotonic() < deadline, "second gateway did not start"
                time.sleep(0.2)

            statuses = asyncio.run(burst([portal.url, second_url], plaintext, 60))
            assert (statuses.count(200), statuses.count(429)) == (20, 40)
        finally:
            second.terminate()
            second_log = second.communicate(timeout=30)[1]
    lines = [ln for ln in second_log.splitlines() if "gateway.access" in ln]

    def supervised(output: str) -> list[str]:
        return [ln for ln in output.splitlines() if "gateway.access" in ln and "/v1/chat/completions" in ln]

    portal.wait_output(lambda output: len(supervised(output)) >= 60 - len(lines))  # its log comes through a pipe
    lines += supervised(portal.output)
    assert len(lines) == 60, portal.output[-3000:]
    assert sum(" 200 model=qwen3-32b " in ln for ln in lines) == 20
    assert sum(" 429 model=qwen3-32b " in ln for ln in lines) == 40
    prefix = plaintext[: len(key.json()["prefix"])]
    assert all(f"key={prefix}…" in ln and plaintext not in ln for ln in lines)


def modes(folder: Path) -> dict[str, int]:
    """Every entry under `folder` (itself included), relative name → permission bits."""
    out = {".": folder.stat().st_mode & 0o7777}
    for path in folder.rglob("*"):
        if not path.is_symlink():
            out[str(path.relative_to(folder))] = path.lstat().st_mode & 0o7777
    return out


def assert_private(folder: Path) -> dict[str, int]:
    found = modes(folder)
    opened = {name: oct(mode) for name, mode in found.items() if mode & 0o077}
    assert opened == {}, f"readable by others: {opened}"
    for name, mode in found.items():
        path = folder / name
        if path.is_dir():
            assert mode == 0o700, (name, oct(mode))
        elif path.is_file():
            assert mode == 0o600, (name, oct(mode))
    return found


@pytest.fixture
def shell_umask():
    """What a user's shell has (022; the suite's own process runs under the portal's 077): the
    command must not depend on it."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_the_data_folder_is_private_when_new_and_is_made_private_when_an_older_version_opened_it(
    up, start, shell_umask
):
    """The shared portal, started as new under a 022 umask: the folder 0700, and the database with
    its WAL and SHM, the embedded Redis's append-only files, the generated secrets, the lock and
    beat's schedule 0600; Ctrl-C stops it and every child. Then the folder as an older version left
    it (0755, files 0644): the next start says so in one line and closes it again."""
    portal = up
    data = Path(portal.env["PORTAL_DATA_DIR"])
    assert str(log_in(portal.url, "admin", "correct-horse-battery-9").url).rstrip("/") == portal.url  # a session row
    created = assert_private(data)
    for name in ("portal.sqlite3", "portal.sqlite3-wal", "portal.sqlite3-shm", "secret_key", "encryption_key"):
        assert name in created, sorted(created)
    assert any(name.startswith("redis/appendonlydir/") for name in created), sorted(created)
    assert "group/other access removed" not in portal.output  # nothing to correct on a new folder
    check_ctrl_c_stops_everything(portal, portal.family())

    for path in [data, *data.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
        elif path.is_file():
            path.chmod(0o644)
    assert modes(data)["portal.sqlite3"] == 0o644

    again = start("correct-horse-battery-9", where=portal.cwd)
    again.wait_healthy()
    assert re.search(r"data folder \S+: group/other access removed from \d+ files and folders", again.output), (
        again.output[-3000:]
    )
    assert_private(data)
    assert str(log_in(again.url, "admin", "correct-horse-battery-9").url).rstrip("/") == again.url
    assert again.stop() == 0
