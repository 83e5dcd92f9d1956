"""Gateway test rig: the real portal ASGI app under uvicorn on 127.0.0.1 in front of FakeUpstream.

`gateway_url` runs uvicorn in a thread of the test process (SQLite or PostgreSQL, and REDIS_URL's
Redis or the suite's embedded one, whatever the environment gives); `spawn_gateway` starts
separate uvicorn processes that share the test database and Redis with the tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from channels.models import Channel, Model, ModelRoute
from gateway import call, relay
from gateway.cache import RouteInfo
from keys.services import issue_key
from tests.fakes import processes
from tests.fakes.upstream import FakeUpstream
from tests.services import free_port

UPSTREAM_KEY = "sk-upstream-secret-0000"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_background_passive_flush(settings):
    """Passive health outcomes stay in this process until a test collects them: no background
    thread writing them to the database (on in-memory SQLite it would lock tables under a test)."""
    settings.PORTAL_PASSIVE_FLUSH_SECONDS = 0


@pytest.fixture(autouse=True)
def redis_namespace(monkeypatch):
    """Each test gets its own Redis key namespace, so counters never leak between tests."""
    ns = "gwtest-" + uuid.uuid4().hex[:10]
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", ns)
    return ns


@pytest.fixture
def upstream():
    with FakeUpstream(api_key=UPSTREAM_KEY) as up:
        yield up


@pytest.fixture
def unread_gaps(monkeypatch) -> list[float]:
    """The gaps for which the gateway left an upstream's connection unread, as it took them
    (`call._unread_for`: the rest of a non-streaming answer's stream read in batches); for a
    gateway served in this process (`gateway_url`, `ThreadServer`)."""
    gaps: list[float] = []
    unread_for = call._unread_for

    async def spied(content, seconds: float) -> None:
        gaps.append(seconds)
        await unread_for(content, seconds)

    monkeypatch.setattr(call, "_unread_for", spied)
    return gaps


@pytest.fixture
def upstream_reads(monkeypatch) -> list[bytes]:
    """What the gateway read of an upstream's stream, piece by piece as it read it (`drain`, in an
    answer being assembled and in a relayed stream alike); for a gateway served in this process.
    A test waits on it to act at a known point of an answer (`b"tok2" in b"".join(reads)`)."""
    reads: list[bytes] = []
    drain = call.drain

    def spied(content) -> bytes:
        data = drain(content)
        reads.append(data)
        return data

    monkeypatch.setattr(call, "drain", spied)
    monkeypatch.setattr(relay, "drain", spied)
    return reads


@dataclass
class Setup:
    channel: Channel
    model: Model
    route: ModelRoute
    key: object
    plaintext: str


def add_channel(upstream: FakeUpstream, name: str, *, priority: int = 0, model: Model | None = None, **fields):
    channel = Channel.objects.create(
        name=name,
        kind=fields.pop("kind", "vllm"),
        base_url=upstream.base_url,
        api_key=upstream.api_key or "",
        priority=priority,
        status=fields.pop("status", "healthy"),
        **fields,
    )
    route = None
    if model is not None:
        route = ModelRoute.objects.create(
            model=model, channel=channel, upstream_model="fake-model", context_window=8192, max_output_tokens=2048
        )
    return channel, route


@pytest.fixture
def setup(transactional_db, upstream, alice) -> Setup:
    model = Model.objects.create(name="qwen3-32b", description="test model")
    channel, route = add_channel(upstream, "primary", model=model)
    key, plaintext = issue_key(owner=alice, name="laptop")
    return Setup(channel, model, route, key, plaintext)


class ThreadServer:
    """uvicorn serving `portal.asgi.application` from a thread of this process."""

    def __init__(self, application=None) -> None:
        import uvicorn

        if application is None:
            from portal.asgi import application

        self.port = free_port()
        # proxy_headers off, as `portal up`, the Dockerfile and compose run it: portal.asgi applies
        # PORTAL_TRUSTED_PROXIES itself.
        config = uvicorn.Config(
            application,
            host="127.0.0.1",
            port=self.port,
            lifespan="on",
            log_level="warning",
            loop="asyncio",
            proxy_headers=False,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)


@pytest.fixture
def gateway_url(transactional_db, settings, tmp_path):
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    server = ThreadServer().start()
    yield server.url
    server.stop()


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    """Poll until `predicate()` is truthy (usage is written asynchronously in batches)."""
    from django.db import OperationalError

    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except OperationalError:  # in-memory SQLite shares table locks with the gateway's thread
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def retry_locked(fn, timeout: float = 5.0):
    """Call `fn`, retrying while in-memory SQLite reports a table locked by the gateway's thread
    (shared-cache SQLite has no busy timeout; PostgreSQL never gets here)."""
    from django.db import OperationalError

    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# --- separate gateway processes (the multi-replica tests) -------------------------------------


def database_url() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


class ProcessServer:
    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "portal.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--lifespan",
                "on",
                "--no-access-log",
                "--no-proxy-headers",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.log = processes.Output(self.proc.stderr)  # its warnings and errors, as they come

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        # Importing Django and the apps takes 30 s and more on a loaded 2-core machine.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.join()
                raise RuntimeError("gateway process died: " + self.log.text[-2000:])
            try:
                httpx.get(self.url + "/v1/models", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("gateway process did not start")

    def stop(self) -> None:
        processes.stop(self.proc, timeout=15)
        self.log.join()


@pytest.fixture
def spawn_gateway(transactional_db, redis_namespace, tmp_path):
    """Start N uvicorn processes sharing this test's database and Redis namespace."""
    started: list[ProcessServer] = []

    def spawn(n: int = 2, **extra_env: str) -> list[ProcessServer]:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "PORTAL_DATA_DIR": str(settings.DATA_DIR),
            "GATEWAY_REDIS_NAMESPACE": redis_namespace,
            "GATEWAY_USAGE_FLUSH_INTERVAL": "0.1",
            # This test's processes share a snapshot and usage journal, no other test's.
            "GATEWAY_STATE_DIR": str(tmp_path / "gateway-state"),
            **extra_env,
        }
        servers = [ProcessServer(env) for _ in range(n)]
        started.extend(servers)
        for s in servers:
            s.wait_ready()
        return servers

    yield spawn
    for s in started:
        s.stop()
        # Shown with a failure ("Captured stderr teardown"): what the replica logged, its INFO lines left out.
        logged = "\n".join(line for line in s.log.text.splitlines() if " INFO " not in line)
        if logged:
            sys.stderr.write(f"--- gateway replica {s.url} logged:\n{logged[-4000:]}\n")


def route_info(channel_id: int, weight: int = 1, *, priority: int = 0, status: str = "healthy") -> RouteInfo:
    """A route of channel `channel_id` as the gateway's catalog holds it, for the policies' parts
    tested on their own (balance, breaker)."""
    return RouteInfo(
        route_id=channel_id,
        channel_id=channel_id,
        channel_name=f"c{channel_id}",
        kind="vllm",
        base_url="http://127.0.0.1:9/v1",
        api_key="",
        priority=priority,
        weight=weight,
        status=status,
        upstream_id="m",
        speaks_messages=False,
        speaks_responses=False,
    )


def leave_once(gateway: str, key: str, body: dict, reached) -> None:
    """A client that sends `body` and leaves (closes its connection) as soon as `reached()` says
    the call got where the test wants it (the upstream has it, a proxy accepted it...)."""
    import asyncio

    async def leave() -> None:
        async with httpx.AsyncClient(timeout=60) as client:
            headers = {"Authorization": f"Bearer {key}"}
            call = asyncio.create_task(client.post(gateway + "/v1/chat/completions", json=body, headers=headers))
            while not reached():
                assert not call.done(), call.result().text
                await asyncio.sleep(0.05)
            call.cancel()  # closes the connection
            with pytest.raises(asyncio.CancelledError):
                await call

    asyncio.run(leave())
