"""The gateway across a restart of its Redis (a private redis-server without persistence, stopped
and started again on the same port): every counter is gone, and the limits must be exact again
from zero, not loosened by corrections meant for reservations the restart took away.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gateway.cache import namespace
from gateway.limits import _windows
from gateway.state import process
from keys.services import issue_key
from tests.fakes.redis_server import RedisServer
from tests.gateway.conftest import ThreadServer, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.services]

DAILY = 120
SMALL = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}
BIG = {**SMALL, "max_tokens": 100}  # reserves the prompt + 100; the fake produces 5


def post(url: str, key: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.fixture
def restartable(setup, settings):
    """The gateway in front of a private Redis the test may restart."""
    with RedisServer() as server:
        settings.REDIS_URL = server.url
        settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
        gateway = ThreadServer().start()
        try:
            yield server, gateway.url
        finally:
            gateway.stop()


def test_a_request_that_ends_after_a_redis_restart_leaves_the_daily_limit_exact(restartable, upstream, alice):
    server, url = restartable
    key, plain = issue_key(owner=alice, name="daily", tokens_per_day=DAILY)
    upstream.gate = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(post, url, plain, BIG)
        wait_for(lambda: upstream.requests, timeout=30)  # admitted: 100 and more reserved for today
        server.restart()
        upstream.gate.set()
        assert held.result().status_code == 200
    limiter = process.limiter
    assert limiter is not None
    wait_for(lambda: not limiter.pending, timeout=30)  # its correction is written, not queued

    admitted = 0
    while (r := post(url, plain, SMALL)).status_code == 200:
        admitted += 1
        assert admitted * 6 <= DAILY, "the daily limit let more tokens through than it allows"
    assert r.status_code == 429, r.text

    counter = f"{namespace()}:k:{key.id}:d:{_windows(server.client.time()[0])[0]}"
    assert int(server.client.get(counter)) == admitted * 6  # 1 prompt + 5 completion tokens each
    assert server.client.ttl(counter) > 0  # a day's counter expires, like every counter
