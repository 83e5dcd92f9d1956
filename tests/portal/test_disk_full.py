"""A full disk is named as such: a real portal process (web, API, gateway) whose data folder (SQLite,
the embedded Redis's append-only file) is on a small tmpfs the test fills up. Clients are told the
disk holding the data folder is full (not "Redis unreachable"), the API answers 503 `disk_full`
(never 500), the usage writer's log says so, and everything works again once there is room."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import httpx
import pytest

from portal import embedded_redis
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ProcessServer, wait_for
from tests.portal.datafolder import CHAT, env_for, seed
from tests.services import unavailable

# Several real processes (migrate, seed, servers, backup, restore): minutes on a loaded 2-core box.
pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    argv = ["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(mount)]
    done = subprocess.run(argv, capture_output=True)
    if done.returncode != 0:
        unavailable(f"cannot mount a tmpfs (needs root): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Write until the disk says ENOSPC; returns the filler file."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while fh.write(b"\1" * size):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_disk_is_named_in_answers_and_logs_and_the_portal_recovers(small_disk, tmp_path, migrated_data_folder):
    data = small_disk / "data"
    data.mkdir()
    redis = embedded_redis.EmbeddedRedis(data, appendonly=True).start()
    server = None
    try:
        with FakeUpstream() as upstream:
            env = env_for(data, GATEWAY_USAGE_FLUSH_INTERVAL="0.2")
            made = seed(env, upstream.base_url, migrated_data_folder)
            server = ProcessServer(env)
            server.wait_ready()
            api = httpx.Client(base_url=server.url, headers={"Authorization": f"Token {made['token']}"}, timeout=30)
            gw = {"Authorization": f"Bearer {made['key']}"}

            def chat() -> httpx.Response:
                return httpx.post(server.url + "/v1/chat/completions", json=CHAT, headers=gw, timeout=30)

            assert chat().status_code == 200
            assert api.post("/api/keys/", json={"name": "before"}).status_code == 201

            filler = fill(small_disk)
            # Redis refuses writes once its append-only file could not be written (within a second).
            refused = wait_for(lambda: (r := chat()).status_code == 503 and r, timeout=15, interval=0.3)
            message = refused.json()["error"]["message"]
            assert "full" in message and str(data) in message and "unreachable" not in message, message
            created = api.post("/api/keys/", json={"name": "while-full"})
            assert created.status_code == 503, created.text
            assert created.json()["code"] == "disk_full" and str(data) in created.json()["detail"]
            assert created.headers["retry-after"]
            # The usage writer names the disk: its journal could not be written (the requests went
            # on, usage in memory), and its database write failed and waits.
            for line in ("usage journal unavailable (The disk holding", "writing usage failed (The disk holding"):
                assert server.log.wait_for(line, timeout=60), server.log.text[-3000:]

            filler.unlink()
            wait_for(lambda: chat().status_code == 200, timeout=20, interval=0.5)
            assert api.post("/api/keys/", json={"name": "after"}).status_code == 201
    finally:
        if server is not None:
            server.stop()
        redis.stop()
