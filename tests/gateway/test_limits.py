"""Limits: exact per key and per user, reserved before forwarding and settled after, also across
two gateway processes sharing Redis and the database (PostgreSQL in CI; the embedded default's
two-replica test is in tests/test_portal_up.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import httpx
import pytest

from keys.models import UsageRecord
from keys.services import issue_key, revoke_key
from tests.gateway.conftest import ROOT, wait_for

SHORT = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}


def post(url: str, key: str, body=SHORT) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_requests_per_minute_gives_429_with_retry_after_and_ratelimit_headers(setup, gateway_url):
    setup.key.requests_per_minute = 2
    setup.key.save()
    first = post(gateway_url, setup.plaintext)
    assert first.status_code == 200
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert post(gateway_url, setup.plaintext).status_code == 200
    refused = post(gateway_url, setup.plaintext)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.headers["x-ratelimit-limit-requests"] == "2"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"].endswith("s")
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key, status="rate_limited").exists())


def test_user_limit_applies_across_all_their_keys(setup, gateway_url, alice):
    alice.requests_per_minute = 1
    alice.save()
    _key, other = issue_key(owner=alice, name="second")
    assert post(gateway_url, setup.plaintext).status_code == 200
    refused = post(gateway_url, other)
    assert refused.status_code == 429 and "your account" in refused.json()["error"]["message"]


def test_a_refused_request_reserves_nothing(setup, gateway_url):
    setup.key.tokens_per_day = 20
    setup.key.save()
    too_big = post(gateway_url, setup.plaintext, {**SHORT, "max_tokens": 100})
    assert too_big.status_code == 429 and too_big.json()["error"]["code"] == "request_too_large"
    assert "reserves 101 tokens" in too_big.json()["error"]["message"]  # more than the day's 20: never fits
    assert too_big.headers["x-should-retry"] == "false"
    # 1 prompt + 5 max_tokens = 6 reserved, 6 used: three fit in 20, the fourth does not.
    for _ in range(3):
        assert post(gateway_url, setup.plaintext).status_code == 200
    assert post(gateway_url, setup.plaintext).status_code == 429


def test_reservations_settle_to_the_real_usage(setup, gateway_url, upstream):
    upstream.behave(tokens=2)  # the upstream stops after 2 of the 5 reserved tokens
    setup.key.tokens_per_day = 30
    setup.key.save()
    # Reserve 6, use 3: after settling, nine fit in 30 (27 used + 6 > 30 refuses the tenth);
    # without settling only five would.
    for i in range(9):
        assert post(gateway_url, setup.plaintext).status_code == 200, i
        wait_for(lambda n=i + 1: UsageRecord.objects.filter(key=setup.key).count() == n)
    assert post(gateway_url, setup.plaintext).status_code == 429


def test_max_parallel_requests_in_one_process(setup, gateway_url, upstream):
    setup.key.max_parallel_requests = 2
    setup.key.save()
    upstream.behave(delay=1.0)
    statuses = asyncio.run(burst([gateway_url], setup.plaintext, 6))
    assert sorted(statuses).count(200) == 2 and statuses.count(429) == 4


# --- two gateway processes sharing Redis and PostgreSQL --------------------------------------


async def burst(urls: list[str], key: str, n: int, body=SHORT, stream: bool = False) -> list[int]:
    """Fire `n` requests at once, spread over `urls`; return their statuses."""
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(i: int) -> int:
            url = urls[i % len(urls)] + "/v1/chat/completions"
            payload = {**body, "stream": True} if stream else body
            async with client.stream("POST", url, json=payload, headers={"Authorization": f"Bearer {key}"}) as r:
                text = (await r.aread()).decode()
                if r.status_code == 200 and stream:
                    assert text.rstrip().endswith("data: [DONE]")
                return r.status_code

        return await asyncio.gather(*(one(i) for i in range(n)))


@pytest.fixture
def replicas(setup, spawn_gateway):
    return [s.url for s in spawn_gateway(2)]


def test_limits_are_exact_across_two_replicas(setup, replicas, upstream, alice):
    """200 concurrent requests over two processes: exactly the limit passes, for requests/min,
    streamed tokens/day and requests in flight (one key per limit, so they do not interact)."""
    setup.key.requests_per_minute = 50
    setup.key.save()
    statuses = asyncio.run(burst(replicas, setup.plaintext, 200))
    assert (statuses.count(200), statuses.count(429)) == (50, 150)

    # Each stream reserves 1 + 5 tokens and uses exactly that (the fake reports 1 + 5).
    daily, daily_plain = issue_key(owner=alice, name="daily", tokens_per_day=60)
    statuses = asyncio.run(burst(replicas, daily_plain, 200, stream=True))
    assert (statuses.count(200), statuses.count(429)) == (10, 190)
    wait_for(lambda: UsageRecord.objects.filter(key=daily, status="ok").count() == 10)
    assert sum(r.total_tokens for r in UsageRecord.objects.filter(key=daily, status="ok")) == 60

    _parallel, parallel_plain = issue_key(owner=alice, name="parallel", max_parallel_requests=5)
    upstream.behave(delay=3.0)
    statuses = asyncio.run(burst(replicas, parallel_plain, 200))
    assert (statuses.count(200), statuses.count(429)) == (5, 195)


def test_a_revoked_key_stops_within_seconds_on_every_replica(setup, replicas):
    for url in replicas:  # both replicas have the key cached
        assert post(url, setup.plaintext).status_code == 200
    revoke_key(setup.key)
    started = time.monotonic()
    for url in replicas:
        wait_for(lambda u=url: post(u, setup.plaintext).status_code == 401, timeout=5, interval=0.1)
    assert time.monotonic() - started < 5


def test_the_gateway_flushes_passive_health_through_its_own_redis_connection(setup, settings):
    """No flusher thread and no second Redis client in the gateway process: the outcomes of its
    requests reach Redis on the event loop, where the worker's probe round collects them."""
    import redis

    from channels.health import passive
    from tests.gateway.conftest import ThreadServer
    from tests.services import redis_url

    client = redis.Redis.from_url(redis_url())
    client.delete(passive.REDIS_KEY)
    settings.PORTAL_PASSIVE_FLUSH_SECONDS = 0.1
    server = ThreadServer().start()
    try:
        assert post(server.url, setup.plaintext).status_code == 200
        wait_for(lambda: client.llen(passive.REDIS_KEY) > 0)
    finally:
        server.stop()
    tallies = passive.collect()
    assert tallies[setup.channel.pk].ok_count == 1
    client.close()


def test_limits_are_exact_across_replicas_whose_clocks_differ(setup, spawn_gateway, tmp_path):
    """One replica's clock 40 s ahead, the other's 40 s behind: the windows are Redis's clock, so
    exactly the limit passes (with each replica's own clock, the one ahead no longer saw the other's
    requests in its minute and let more through)."""
    skewed = str(ROOT / "tests" / "fakes" / "skewed_clock")
    ahead, behind = (spawn_gateway(1, PYTHONPATH=skewed, PORTAL_TEST_CLOCK_SKEW=str(skew))[0].url for skew in (40, -40))
    check = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        env={**os.environ, "PYTHONPATH": skewed, "PORTAL_TEST_CLOCK_SKEW": "40"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert float(check.stdout) - time.time() > 30  # the skew is real in a spawned process
    # Few requests, so they all fall in one minute however slow the machine (60 took more than a
    # minute on a loaded CI box, and the window let more through as its first requests left it).
    # With each replica's own clock the one ahead dropped the other's requests from its minute: 9 passed.
    setup.key.requests_per_minute = 5
    setup.key.save()
    statuses = []
    started = time.monotonic()
    for i in range(16):  # alternating, one at a time: the two clocks interleave in one window
        url = (ahead, behind)[i % 2]
        statuses.append(post(url, setup.plaintext).status_code)
    took = time.monotonic() - started
    assert (statuses.count(200), statuses.count(429)) == (5, 11), (statuses, f"{took:.1f} s")
