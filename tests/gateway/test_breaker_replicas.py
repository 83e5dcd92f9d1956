"""The channels' circuit breaker with two gateway replicas (separate uvicorn processes sharing the
database and Redis, as `portal up --workers 2` or two containers run them). The breaker is per
process by design (`gateway.breaker`): each replica learns that a channel hangs from its own first
request that waits for it, and from then on, for its cooldown, answers from the healthy channel
without connecting to the hung one. Counted at the hung channel (a TCP proxy that accepts and never
answers), not timed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.gateway.conftest import wait_for
from tests.gateway.test_breaker import METRICS_TOKEN, backup, cooling_metrics, post, proxy, served_by  # noqa: F401

pytestmark = pytest.mark.slow

REPLICA_ENV = {
    # A hung attempt costs this much; a healthy fake answers well within it on a loaded machine.
    "GATEWAY_HEADERS_TIMEOUT": "3",
    "GATEWAY_FIRST_TOKEN_TIMEOUT": "3",
    "GATEWAY_TOTAL_TIMEOUT": "60",
    # One cooldown lasts the whole test: "once per cooldown" is then "once" per replica.
    "GATEWAY_CHANNEL_COOLDOWN": "3600",
    "GATEWAY_CHANNEL_COOLDOWN_MAX": "3600",
    "PORTAL_METRICS_TOKEN": METRICS_TOKEN,
}


def test_each_replica_pays_a_hung_channel_once_then_answers_from_the_healthy_one(
    setup,
    upstream,
    backup,  # noqa: F811
    proxy,  # noqa: F811
    spawn_gateway,
):
    proxy.set("stall")  # the primary's server accepts and never answers
    first, second = (s.url for s in spawn_gateway(2, **REPLICA_ENV))

    # The first replica waits for the hung channel once, fails over, and from then on goes straight
    # to the backup.
    for _ in range(4):
        assert post(first, setup.plaintext).status_code == 200
    assert (proxy.accepted, len(backup.requests)) == (1, 4)

    # The second has learnt nothing from the first (per process): it pays its own wait, once.
    for _ in range(4):
        assert post(second, setup.plaintext).status_code == 200
    assert (proxy.accepted, len(backup.requests)) == (2, 8)

    # Both cooling now: neither connects to the hung channel again within the cooldown.
    for url in (first, second) * 3:
        assert post(url, setup.plaintext).status_code == 200
    assert (proxy.accepted, len(backup.requests)) == (2, 14)
    assert served_by(setup, 14) == ["backup"] * 14
    for url in (first, second):  # each replica's own breaker, in its own metrics
        assert cooling_metrics(url) == [
            'gateway_channel_cooling{channel="primary"} 1.0',
            'gateway_channel_cooldowns_total{channel="primary"} 1.0',
        ]


def test_requests_already_waiting_on_the_hung_channel_when_it_opens_wait_their_deadline(
    setup,
    upstream,
    backup,  # noqa: F811
    proxy,  # noqa: F811
    spawn_gateway,
):
    """What the breaker cannot save (README, "Routing"): a request sent to the channel before the
    first one's deadline passed was sent before anything was known, and waits its own deadline.
    Once one has failed, the replica sends no more."""
    proxy.set("stall")
    # The second request connects well within the first one's deadline, however loaded the machine.
    env = {**REPLICA_ENV, "GATEWAY_HEADERS_TIMEOUT": "15", "GATEWAY_FIRST_TOKEN_TIMEOUT": "15"}
    [replica] = spawn_gateway(1, **env)
    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(post, replica.url, setup.plaintext)
        wait_for(lambda: proxy.accepted == 1, timeout=15)
        two = pool.submit(post, replica.url, setup.plaintext)
        wait_for(lambda: proxy.accepted == 2, timeout=15)  # the first is still waiting: so does this one
        assert one.result().status_code == two.result().status_code == 200
    for _ in range(3):
        assert post(replica.url, setup.plaintext).status_code == 200
    assert (proxy.accepted, len(backup.requests)) == (2, 5)
    assert cooling_metrics(replica.url) == [
        'gateway_channel_cooling{channel="primary"} 1.0',
        'gateway_channel_cooldowns_total{channel="primary"} 1.0',
    ]
