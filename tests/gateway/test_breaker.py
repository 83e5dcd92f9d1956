"""The channels' circuit breaker (`gateway.breaker`): a channel that hung is tried last for a
cooldown instead of costing every request its headers deadline, one request tries it again after
the cooldown, an answer closes it, and when every channel is cooling they are still tried.

Through the real gateway (uvicorn in this process) with a TCP proxy in front of the hung
channel's fake upstream: `proxy.accepted` counts who connected, so "never tried" is a count, not
a time. The breaker's clock is the test's (`Clock`), so a cooldown ends when the test says."""

from __future__ import annotations

import logging

import httpx
import pytest

from channels.models import Channel
from gateway.breaker import Breakers, breakers
from gateway.cache import KeyInfo, ModelInfo, RouteInfo
from gateway.catalog import cooling_line, select_routes
from gateway.errors import Failure
from keys.models import UsageRecord
from keys.usage import explanation as lines
from tests.fakes.tcp_proxy import TcpProxy
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import UPSTREAM_KEY, ThreadServer, add_channel, leave_once, route_info, wait_for

BODY = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}
METRICS_TOKEN = "metrics-token-for-the-breaker-test"


class Clock:
    """The breaker's clock, moved by the test only."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch, settings) -> Clock:
    """This process's breakers start closed and run on the test's clock: 10 s, then 20, capped at 40."""
    settings.GATEWAY_CHANNEL_COOLDOWN = 10.0
    settings.GATEWAY_CHANNEL_COOLDOWN_MAX = 40.0
    c = Clock()
    monkeypatch.setattr(breakers, "clock", c)
    monkeypatch.setattr(breakers, "open", {})
    monkeypatch.setattr(breakers, "opened", {})
    return c


# --- the state machine on its own ----------------------------------------------------------------


route = route_info


def test_the_breakers_state_machine(settings):
    settings.GATEWAY_CHANNEL_COOLDOWN = 10.0
    settings.GATEWAY_CHANNEL_COOLDOWN_MAX = 40.0
    clock = Clock()
    b = Breakers(clock)
    one, two = route(1), route(2)

    # An upstream that answered (an error status, a broken answer), a call out of its own deadline:
    # nothing to hold against the channel.
    for failure in set(Failure) - {Failure.CONNECT, Failure.HEADERS_TIMEOUT, Failure.FIRST_TOKEN_TIMEOUT}:
        b.failed(one, failure)
    assert b.open == {}

    b.failed(one, Failure.HEADERS_TIMEOUT)  # opens: 10 s
    cooled: list[RouteInfo] = []
    assert b.partition([one, two], cooled) == [two] and cooled == [one]
    assert not b.claim(1)  # no trial before the cooldown ends
    b.failed(one, Failure.HEADERS_TIMEOUT)  # another request's, sent before it opened: no longer
    clock.advance(9.9)
    assert b.cooling(1, clock()) is not None

    clock.advance(0.1)  # the cooldown is over: ordered as usual, and one request is the trial
    assert b.cooling(1, clock()) is None and b.partition([one, two], []) == [one, two]
    assert b.claim(1) and not b.claim(1)
    assert b.partition([one, two], []) == [two]  # tried last while the trial runs
    b.release(1)  # its client left: nothing learnt, the next request tries
    assert b.claim(1)
    b.release(1)  # (send_upstream releases a trial before recording its failure)
    b.failed(one, Failure.CONNECT)  # the trial failed: again, twice as long
    assert b.open[1].cooldowns == 2 and b.open[1].failure == Failure.CONNECT
    clock.advance(19.9)
    assert b.cooling(1, clock()) is not None
    clock.advance(0.1)
    assert b.claim(1)
    b.release(1)
    b.failed(one, Failure.FIRST_TOKEN_TIMEOUT)  # 40 s
    clock.advance(40)
    assert b.claim(1)
    b.release(1)
    b.failed(one, Failure.HEADERS_TIMEOUT)  # 80 s, capped at 40
    clock.advance(39.9)
    assert b.cooling(1, clock()) is not None
    clock.advance(0.1)
    assert b.cooling(1, clock()) is None

    b.answered(1)  # any answer closes it at once
    b.answered(2)  # (a channel that was never open: nothing)
    assert b.open == {} and b.opened == {"c1": 4}
    b.failed(one, Failure.HEADERS_TIMEOUT)  # hangs again later: from 10 s again
    assert b.open[1].until == clock() + 10


def test_a_cooldown_of_0_turns_the_breaker_off(settings):
    settings.GATEWAY_CHANNEL_COOLDOWN = 0
    b = Breakers(Clock())
    b.failed(route(1), Failure.HEADERS_TIMEOUT)
    assert b.open == {}


def key_info() -> KeyInfo:
    return KeyInfo(
        id=1,
        name="k",
        prefix="gw-x",
        owner_id=1,
        owner_name="alice",
        revoked=False,
        expires_at=None,
        owner_active=True,
        key_model_ids=frozenset(),
        owner_model_ids=frozenset(),
        networks=(),
        local_only=False,
        owner_is_admin=False,
        limits={},
        owner_limits={},
        loaded_at=0.0,
    )


def test_cooling_channels_go_to_the_end_and_are_never_dropped(clock):
    """Behind down channels and an alias's later targets too; when all are cooling, all are tried."""
    first, second, down = route(1, priority=10), route(2), route(3, status="down")
    model = ModelInfo(
        id=1, name="m", enabled=True, created=0, context_window=None, max_output_tokens=None, description="",
        groups=[[first], [second], [down]],
    )  # fmt: skip
    later = ModelInfo(
        id=2, name="later", enabled=True, created=0, context_window=None, max_output_tokens=None, description="",
        groups=[[route(4)]],
    )  # fmt: skip
    alias = ModelInfo(
        id=3, name="alias", enabled=True, created=0, context_window=None, max_output_tokens=None, description="",
        is_alias=True, targets=[model, later],
    )  # fmt: skip
    breakers.failed(first, Failure.HEADERS_TIMEOUT)
    picked = select_routes(alias, key_info(), prompt=10, output=5)
    assert [r.channel_id for r in picked.routes] == [2, 3, 4, 1]
    assert "tried last: c1 is cooling after timeout" in picked.explanation

    for r in (second, down, route(4)):
        breakers.failed(r, Failure.CONNECT)
    picked = select_routes(alias, key_info(), prompt=10, output=5)
    assert [r.channel_id for r in picked.routes] == [1, 2, 3, 4]  # all cooling: their usual order


def test_the_cooling_line_is_read_back_to_its_template(clock):
    breakers.failed(route(1), Failure.FIRST_TOKEN_TIMEOUT)
    line = cooling_line(route(1))
    assert lines.parse(line) == (lines.COOLING, {"channel": "c1", "error": "first_token_timeout"})


# --- through the real gateway --------------------------------------------------------------------


@pytest.fixture
def backup(setup):
    """A healthy second channel for the model, tried after the primary."""
    with FakeUpstream(api_key=UPSTREAM_KEY) as up:
        up.channel, _ = add_channel(up, "backup", priority=-10, model=setup.model)
        yield up


@pytest.fixture
def proxy(setup, upstream):
    """The primary channel's connections go through a proxy the test can freeze (`stall`: it
    accepts and never answers, a SIGSTOPped server) and count (`accepted`)."""
    with TcpProxy(upstream.root_url) as p:
        Channel.objects.filter(pk=setup.channel.pk).update(base_url=f"http://127.0.0.1:{p.port}/v1")
        yield p


@pytest.fixture
def gateway(transactional_db, settings, clock, proxy):
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    # A hung attempt costs this much; a healthy fake answers well within it on a loaded machine.
    settings.GATEWAY_HEADERS_TIMEOUT = 3.0
    settings.GATEWAY_FIRST_TOKEN_TIMEOUT = 3.0
    settings.GATEWAY_TOTAL_TIMEOUT = 60.0
    settings.PORTAL_METRICS_TOKEN = METRICS_TOKEN
    server = ThreadServer().start()
    yield server.url
    server.stop()


def post(url: str, key: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def cooling_metrics(url: str) -> list[str]:
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    return [line for line in text.splitlines() if line.startswith("gateway_channel_cool")]


def served_by(setup, n: int) -> list[str]:
    """The channel of each of the key's first `n` usage records, in order."""
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() >= n)
    records = UsageRecord.objects.filter(key=setup.key).select_related("channel").order_by("created", "id")
    return [r.channel.name if r.channel else "" for r in records]


@pytest.mark.slow
def test_a_hung_channel_is_tried_last_until_a_trial_finds_it_answering(
    setup, upstream, backup, proxy, gateway, clock, caplog
):
    caplog.set_level(logging.INFO, logger="gateway.breaker")
    proxy.set("stall")  # the primary's server accepts and never answers
    r = post(gateway, setup.plaintext)
    assert r.status_code == 200, r.text
    assert (proxy.accepted, len(backup.requests)) == (1, 1)  # waited for the primary, then failed over

    for _ in range(5):  # cooling: straight to the backup, never a connection to the hung server
        assert post(gateway, setup.plaintext).status_code == 200
    assert (proxy.accepted, len(backup.requests)) == (1, 6)
    assert cooling_metrics(gateway) == [
        'gateway_channel_cooling{channel="primary"} 1.0',
        'gateway_channel_cooldowns_total{channel="primary"} 1.0',
    ]
    opened = [rec.getMessage() for rec in caplog.records if rec.name == "gateway.breaker"]
    # (no headers within the first token's deadline: a stream's headers wait as long, `call.headers_deadline`)
    assert opened == [
        "channel primary failed (first_token_timeout): breaker open, tried last for 10 s (cooldown 1 in a row)"
    ]
    assert not any(UPSTREAM_KEY in rec.getMessage() for rec in caplog.records)

    clock.advance(10)  # the cooldown is over: one request tries it; still hung, so 20 s this time
    assert post(gateway, setup.plaintext).status_code == 200
    assert (proxy.accepted, len(backup.requests)) == (2, 7)
    clock.advance(10)
    assert post(gateway, setup.plaintext).status_code == 200
    assert (proxy.accepted, len(backup.requests)) == (2, 8)

    clock.advance(10)
    proxy.set("pass")  # the server is back: the trial gets its answer, and that closes the breaker
    assert post(gateway, setup.plaintext).status_code == 200
    assert post(gateway, setup.plaintext).status_code == 200
    assert proxy.accepted >= 3 and len(backup.requests) == 8
    assert served_by(setup, 10) == ["backup"] * 8 + ["primary"] * 2
    assert cooling_metrics(gateway) == ['gateway_channel_cooldowns_total{channel="primary"} 2.0']
    assert "channel primary answered again: breaker closed after 2 cooldown(s)" in caplog.messages
    cooled = UsageRecord.objects.filter(key=setup.key).order_by("created", "id")[1]
    assert "tried last: primary is cooling after first_token_timeout" in cooled.route_explanation


@pytest.mark.slow
def test_a_channel_with_no_first_token_cools_too(setup, upstream, backup, proxy, gateway):
    upstream.behave(mode="stall", stall_after=0)  # headers, then silence
    for _ in range(4):
        assert post(gateway, setup.plaintext).status_code == 200
    assert (proxy.accepted, len(upstream.requests), len(backup.requests)) == (1, 1, 4)
    cooled = UsageRecord.objects.filter(key=setup.key).order_by("created", "id")
    wait_for(lambda: cooled.count() == 4)
    assert "tried last: primary is cooling after first_token_timeout" in cooled[3].route_explanation


@pytest.mark.slow
def test_when_every_channel_is_cooling_they_are_still_tried(setup, upstream, proxy, gateway):
    proxy.set("stall")
    r = post(gateway, setup.plaintext)
    assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout"
    proxy.set("pass")  # still cooling, but the only channel: tried, answers, and the breaker closes
    r = post(gateway, setup.plaintext)
    assert r.status_code == 200, r.text
    assert proxy.accepted == 2 and cooling_metrics(gateway) == [
        'gateway_channel_cooldowns_total{channel="primary"} 1.0'
    ]


@pytest.mark.slow
def test_an_upstream_that_answers_an_error_does_not_cool(setup, upstream, backup, proxy, gateway):
    upstream.enqueue(mode="status", status=500).enqueue(mode="status", status=400)
    assert post(gateway, setup.plaintext).status_code == 200  # 500: failed over to the backup
    assert post(gateway, setup.plaintext).status_code == 400  # the primary was tried again first
    assert post(gateway, setup.plaintext).status_code == 200
    assert (len(upstream.requests), len(backup.requests)) == (3, 1)
    assert cooling_metrics(gateway) == []


@pytest.mark.slow
def test_a_client_that_leaves_does_not_cool_the_channel(setup, upstream, backup, proxy, gateway, settings):
    settings.GATEWAY_HEADERS_TIMEOUT = 120.0  # only the client's leaving ends the first call
    proxy.set("stall")

    leave_once(gateway, setup.plaintext, BODY, lambda: proxy.accepted)
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first(), timeout=30)
    assert record.http_status == 499
    proxy.set("pass")
    assert post(gateway, setup.plaintext).status_code == 200
    assert proxy.accepted == 2 and len(backup.requests) == 0  # not cooling: the primary was tried first
    assert served_by(setup, 2)[1] == "primary"
