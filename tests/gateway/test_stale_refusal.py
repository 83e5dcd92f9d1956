"""A refusal made on this process's snapshot is checked against Redis's cache generations first.

Regression (CI, test_budgets' two-replica test): one replica's background refresh had loaded the
catalog before the test set the route's price; the key's budget was then known, the price was not,
and every request that replica took was refused 403 `model_not_priced` without ever asking Redis,
whose admission script is where a process learns that its snapshot is stale. A refusal now asks
for the generations first and, when something changed, resolves the request again on fresh data."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import httpx
import pytest
import redis
from django.utils import timezone

from channels.models import Model, RoutePrice
from gateway.cache import _load_catalog, generation_keys, new_generation, snapshot
from keys.models import Budget, Key, UsageRecord
from tests.gateway.conftest import ThreadServer, wait_for


@pytest.fixture
def stale_server(setup, settings, tmp_path):
    settings.GATEWAY_CACHE_TTL = 3600  # no background refresh during the test: the stale copy stays
    settings.GATEWAY_KEY_TTL = 3600
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    server = ThreadServer().start()
    yield server
    server.stop()


def chat(server: ThreadServer, plaintext: str, model: str) -> httpx.Response:
    return httpx.post(
        server.url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        headers={"Authorization": f"Bearer {plaintext}"},
        timeout=30,
    )


def announce(settings, *, keys: bool = False, routes: bool = False) -> None:
    """What another replica's save does after its commit (`gateway.signals`)."""
    gen_keys, gen_routes = generation_keys()
    for name, changed in ((gen_keys, keys), (gen_routes, routes)):
        if changed:
            redis.Redis.from_url(settings.REDIS_URL).set(name, new_generation())


def test_a_price_set_on_another_replica_admits_a_budgeted_key_at_once(setup, stale_server, settings):
    Budget.objects.create(key=setup.key, window="day", amount=Decimal("10"))
    snapshot.catalog = snapshot.last_catalog = _load_catalog()  # loaded before the price existed
    # Another replica's admin prices the route: the row (no signal in this process), then the bump.
    RoutePrice.objects.bulk_create(
        [
            RoutePrice(
                route=setup.route,
                effective_from=timezone.now() - dt.timedelta(seconds=1),
                input=Decimal("1"),
                output=Decimal("2"),
            )
        ]
    )
    announce(settings, routes=True)

    r = chat(stale_server, setup.plaintext, "qwen3-32b")

    assert r.status_code == 200, r.text
    wait_for(lambda: UsageRecord.objects.filter(http_status=200).exists())
    assert not UsageRecord.objects.filter(http_status=403).exists()  # no refusal on the record either


def test_after_a_change_a_slow_catalog_load_is_waited_for_not_served_from_the_stale_copy(
    setup, stale_server, settings, monkeypatch
):
    """A catalog load slower than DatabaseHealth.SLOW_AFTER is normally answered from the last copy
    (a slow database should not stall requests); on the second attempt that copy is known stale, so
    the request waits for the load. (CI, loaded: a budgeted request still got model_not_priced.)"""
    import time

    from gateway import cache

    Budget.objects.create(key=setup.key, window="day", amount=Decimal("10"))
    snapshot.catalog = snapshot.last_catalog = _load_catalog()  # loaded before the price existed
    RoutePrice.objects.bulk_create(
        [RoutePrice(route=setup.route, effective_from=timezone.now() - dt.timedelta(seconds=1), input=1, output=2)]
    )
    announce(settings, routes=True)
    monkeypatch.setattr(cache.DatabaseHealth, "SLOW_AFTER", 0.05)
    load = cache._load_catalog

    def slow_load():
        time.sleep(0.5)  # ten times the patience
        return load()

    monkeypatch.setattr(cache, "_load_catalog", slow_load)

    r = chat(stale_server, setup.plaintext, "qwen3-32b")

    assert r.status_code == 200, r.text


def test_a_model_renamed_on_another_replica_is_found_at_once(setup, stale_server, settings):
    snapshot.catalog = snapshot.last_catalog = _load_catalog()
    Model.objects.filter(pk=setup.model.pk).update(name="qwen3-32b-awq")  # no signal in this process
    announce(settings, routes=True)

    r = chat(stale_server, setup.plaintext, "qwen3-32b-awq")

    assert r.status_code == 200, r.text


def test_an_address_allowed_on_another_replica_is_let_in_at_once(setup, stale_server, settings):
    setup.key.ip_allowlist = ["10.0.0.0/8"]
    setup.key.save()
    r = chat(stale_server, setup.plaintext, "qwen3-32b")
    assert r.status_code == 403 and r.json()["error"]["code"] == "ip_not_allowed"  # the key is loaded now
    Key.objects.filter(pk=setup.key.pk).update(ip_allowlist=[])  # another replica's admin, no signal here
    announce(settings, keys=True)

    assert chat(stale_server, setup.plaintext, "qwen3-32b").status_code == 200


def test_a_refusal_that_stands_is_answered_and_recorded_once(setup, stale_server):
    """The budget's save bumps the keys generation: the first refusal finds a change, the request
    is resolved again, is refused again for the same reason, and only that answer is on the record."""
    Budget.objects.create(key=setup.key, window="day", amount=Decimal("10"))  # the route has no price
    r = chat(stale_server, setup.plaintext, "qwen3-32b")
    assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_priced"
    Budget.objects.all().delete()
    assert chat(stale_server, setup.plaintext, "qwen3-32b").status_code == 200
    wait_for(lambda: UsageRecord.objects.filter(http_status=200).exists())  # recorded after the refusal
    assert UsageRecord.objects.filter(http_status=403, error__contains="has no price").count() == 1


def test_an_admission_stale_again_after_each_reload_is_answered_503_never_admitted_unchecked(
    setup, stale_server, settings, monkeypatch
):
    """Each retry is checked against the generations its reload was made for (a deployment taken
    out of routing during the load must not be sent the request). While changes keep coming
    faster than the catalog loads, a few attempts, then a clear 503 with Retry-After (was: the
    second attempt was admitted unchecked)."""
    from gateway import cache

    snapshot.catalog = snapshot.last_catalog = _load_catalog()
    load = cache._load_catalog
    loads: list[int] = []

    def load_then_change():
        loads.append(1)
        try:
            return load()
        finally:
            announce(settings, routes=True)  # another change, saved while this load ran

    monkeypatch.setattr(cache, "_load_catalog", load_then_change)
    announce(settings, routes=True)

    r = chat(stale_server, setup.plaintext, "qwen3-32b")

    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "configuration_changing"
    assert r.headers["retry-after"] == "1"
    assert len(loads) == 2  # loaded again after each Stale answer but the last
    wait_for(lambda: UsageRecord.objects.filter(http_status=503).exists())
    assert not UsageRecord.objects.filter(http_status=200).exists()

    monkeypatch.setattr(cache, "_load_catalog", load)  # the changes stop: admitted at once
    assert chat(stale_server, setup.plaintext, "qwen3-32b").status_code == 200
