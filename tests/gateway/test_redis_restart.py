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
    # 1 prompt + 5 completion tokens each, and the held request's own 6 (what it used, not its reservation)
    assert int(server.client.get(counter)) == (admitted + 1) * 6
    assert server.client.ttl(counter) > 0  # a day's counter expires, like every counter


def test_a_request_that_ends_after_requests_admitted_since_a_restart_leaves_their_count_alone(
    restartable, upstream, alice
):
    """The day's counter the restart emptied is started again by requests admitted since: the held
    request's correction (its reservation is not in it) must not be taken off their count; what it
    used is added."""
    server, url = restartable
    key, plain = issue_key(owner=alice, name="daily", tokens_per_day=DAILY)
    held_gate = upstream.gate = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(post, url, plain, BIG)
        wait_for(lambda: upstream.requests, timeout=30)  # admitted: 100 and more reserved for today
        server.restart()
        upstream.gate = None  # the held request keeps waiting; the next ones are answered
        since = 3
        for _ in range(since):
            assert post(url, plain, SMALL).status_code == 200
        counter = f"{namespace()}:k:{key.id}:d:{_windows(server.client.time()[0])[0]}"
        assert int(server.client.get(counter)) == since * 6
        held_gate.set()
        assert held.result().status_code == 200
    limiter = process.limiter
    assert limiter is not None
    wait_for(lambda: not limiter.pending, timeout=30)
    # settles and admissions go out in order on the limiter's connection: once one more request is
    # answered, the held request's settle is in the count (its 6 tokens; it reserved 101)
    assert post(url, plain, SMALL).status_code == 200
    wait_for(lambda: int(server.client.get(counter)) == (since + 2) * 6, timeout=30)


def test_a_request_running_across_a_redis_restart_keeps_its_parallel_slot(setup, settings, upstream, alice):
    """The restart takes the running request's slot away with everything else: the gateway puts it
    back at its next renewal (a third of a lease), so the key's one parallel request stays one."""
    settings.GATEWAY_LEASE_SECONDS = 3.0  # renewals each second: the test waits for one, not for the clock
    key, plain = issue_key(owner=alice, name="one at a time", max_parallel_requests=1)
    slots = f"{namespace()}:k:{key.id}:p"
    with RedisServer() as server:
        settings.REDIS_URL = server.url
        gateway = ThreadServer().start()
        upstream.gate = threading.Event()
        try:
            with ThreadPoolExecutor(1) as pool:
                held = pool.submit(post, gateway.url, plain, SMALL)
                wait_for(lambda: upstream.requests, timeout=30)
                assert server.client.zcard(slots) == 1
                server.restart()
                assert server.client.zcard(slots) == 0  # what the restart took away
                wait_for(lambda: server.client.zcard(slots) == 1, timeout=30)  # a renewal put it back
                second = post(gateway.url, plain, SMALL)
                upstream.gate.set()
                assert held.result().status_code == 200
        finally:
            upstream.gate.set()
            gateway.stop()
    assert second.status_code == 429, second.text
    assert "max parallel requests" in second.json()["error"]["message"], second.text
