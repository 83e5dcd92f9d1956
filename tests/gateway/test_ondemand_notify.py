"""A request waiting for a cold model is woken by the workers' announcement on Redis (pub/sub),
not by its poll; with the announcements unavailable the poll still answers it.

No worker and no sshd here: the test plays the placement and the launch job's last step itself
(the cold start moves to `launching`, a channel to the fake upstream is registered and the
deployment says RUNNING through `set_status`, as the launch job does), so what is tested is the
gateway's side of the wire: the real gateway under uvicorn, real Redis, real PostgreSQL.
"""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest
from django.db import transaction

from channels import services as channel_services
from hosts.choices import DeploymentStatus
from hosts.deployments import services
from hosts.models import ColdStart, Deployment
from hosts.ondemand.models import ColdStartState
from keys.models import UsageRecord
from keys.services import issue_key
from tests.gateway.conftest import wait_for
from tests.hosts.test_ondemand import on_demand_far, serving
from tests.services import free_port

pytestmark = [pytest.mark.services]


@pytest.fixture
def cold_model(transactional_db) -> Deployment:
    return on_demand_far("od-notify")


def _ask(gateway_url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{gateway_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "od-notify", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        timeout=200,
    )


@transaction.atomic  # seen all at once, as a launching cold start always has its job behind it
def _serve(d: Deployment, upstream) -> None:
    """What the placement and then the launch job leave behind once the server answers."""
    ColdStart.objects.active().filter(deployment=d).update(state=ColdStartState.LAUNCHING)
    serving(d, upstream.base_url, upstream.api_key or "")


def _answered_once_served(gateway_url, cold_model, upstream, alice) -> httpx.Response:
    _key, key = issue_key(owner=alice, name="laptop")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_ask, gateway_url, key)
        wait_for(lambda: ColdStart.objects.filter(deployment=cold_model).exists(), 60)
        assert not waiting.done()
        _serve(cold_model, upstream)
        return waiting.result(timeout=200)


def test_a_waiting_request_is_woken_by_the_announcement_not_by_its_poll(
    gateway_url, cold_model, upstream, alice, monkeypatch
):
    """Both polls are an hour here: an answer within the request's timeout can only come from the
    announcement the RUNNING status published."""
    from gateway import ondemand

    monkeypatch.setattr(ondemand, "POLL_SECONDS", 3600.0)
    monkeypatch.setattr(ondemand, "SAFETY_POLL_SECONDS", 3600.0)
    monkeypatch.setattr(ondemand, "SUBSCRIBE_WAIT_SECONDS", 120.0)  # never ask before subscribing
    reply = _answered_once_served(gateway_url, cold_model, upstream, alice)
    assert reply.status_code == 200, reply.text
    cold = ColdStart.objects.get(deployment=cold_model)
    assert cold.state == ColdStartState.READY and cold.seconds is not None
    wait_for(lambda: UsageRecord.objects.filter(model="od-notify", cold_start_ms__isnull=False).exists(), 30)


@pytest.fixture
def catalog_never_refreshed(settings):
    """Set before the gateway starts: its background refresh sleeps an hour, so a catalog that
    changed can only be learned from an announcement or from a request's admission."""
    settings.GATEWAY_CACHE_TTL = 3600.0


def _flags(gateway_url: str, key: str) -> tuple[object, object]:
    listed = httpx.get(f"{gateway_url}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()["data"]
    return next((m.get("on_demand"), m.get("cold")) for m in listed if m["id"] == "od-notify")


def _followed(events) -> bool:
    """The announcements' reader has seen the generations Redis holds now, and is done."""
    from gateway import signals
    from gateway.cache import generation_keys, snapshot

    now = tuple(v.decode() if v is not None else None for v in signals._redis().mget(*generation_keys()))
    return snapshot.generation == now and events.follower is not None and events.follower.done()


def test_a_stop_announced_reloads_the_catalog_before_the_next_request(
    catalog_never_refreshed, gateway_url, cold_model, upstream, alice, monkeypatch
):
    """The stop (channel disabled, deployment STOPPED, as the stop job does) is announced: the
    gateway reads the generations and reloads its catalog then, so the model is listed cold at
    once and the next request for it finds the catalog current (no Stale admission, no load of
    the catalog on its path). Before, that request's admission was Stale (its process had not
    seen the generation move) and it loaded the catalog again itself. (The gateway shares this
    process, so the stop's signal drops its catalog here directly; a replica elsewhere did not even
    have that: it listed the model warm until its refresh.)"""
    from gateway import cache, ondemand

    loads: list[float] = []
    real_load = cache._load_catalog

    def counted() -> cache.Catalog:
        loads.append(1.0)
        return real_load()

    monkeypatch.setattr(cache, "_load_catalog", counted)
    _key, key = issue_key(owner=alice, name="laptop")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_ask, gateway_url, key)
        wait_for(lambda: ColdStart.objects.filter(deployment=cold_model).exists(), 60)
        _serve(cold_model, upstream)
        assert waiting.result(timeout=200).status_code == 200
    assert _flags(gateway_url, key) == (True, False)

    cold_model.refresh_from_db()
    channel_services.disable_served_channel(cold_model.channel_id, status_message="stopped (test)")
    services.set_status(cold_model, DeploymentStatus.STOPPED, "Stopped (test).")  # announces
    wait_for(lambda: _flags(gateway_url, key) == (True, True), 30)
    # Listed cold already once this process dropped its catalog (the signal, here): that is not
    # the announcement heard. Its reader (`_Events.follow`) must have caught up with the stop's
    # generations and reloaded before the count starts (with the reader 1 s late it failed 5 vs 4).
    wait_for(lambda: _followed(ondemand._events), 30)

    before = len(loads)
    refused = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", "Prefer": "wait=0"},
        json={"model": "od-notify", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        timeout=60,
    )
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "model_starting", refused.text
    assert len(loads) == before  # the request's admission was not Stale: nothing loaded on its path


def test_without_the_announcements_the_poll_still_answers(gateway_url, cold_model, upstream, alice, monkeypatch):
    """Redis refuses the gateway's subscription (nothing listens on its address): the watcher
    polls every POLL_SECONDS and the request is answered all the same."""
    from django.conf import settings

    from gateway import ondemand

    monkeypatch.setattr(ondemand, "POLL_SECONDS", 0.2)
    monkeypatch.setattr(ondemand, "SAFETY_POLL_SECONDS", 3600.0)  # would hang the test if it were used
    monkeypatch.setattr(ondemand, "SUBSCRIBE_WAIT_SECONDS", 0.5)
    # The process's other Redis clients are made before the address changes (they keep theirs):
    # only the gateway's subscription, opened by the first cold request, meets the dead address.
    from gateway import signals
    from hosts.ondemand import activity

    signals._redis()
    activity._redis()
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    reply = _answered_once_served(gateway_url, cold_model, upstream, alice)
    assert reply.status_code == 200, reply.text
    assert not ondemand._events.live.is_set()
    assert ColdStart.objects.get(deployment=cold_model).state == ColdStartState.READY


def test_both_model_lists_flag_the_on_demand_model_cold_then_warm(gateway_url, cold_model, upstream, setup):
    """The OpenAI-shaped list and the Anthropic-shaped one (what Claude Code reads, through the
    official SDK) carry the same extension fields: on demand, cold while stopped, not once served."""
    import anthropic

    client = anthropic.Anthropic(base_url=gateway_url, api_key=setup.plaintext, max_retries=0)

    def flags() -> tuple[dict, dict]:
        openai_shape = httpx.get(
            f"{gateway_url}/v1/models", headers={"Authorization": f"Bearer {setup.plaintext}"}
        ).json()["data"]
        anthropic_shape = client.models.list(limit=1000).data
        return (
            {m["id"]: (m.get("on_demand"), m.get("cold")) for m in openai_shape},
            {m.id: (getattr(m, "on_demand", None), getattr(m, "cold", None)) for m in anthropic_shape},
        )

    cold = {"od-notify": (True, True), "qwen3-32b": (None, None)}
    assert flags() == (cold, cold)
    one = client.models.retrieve("od-notify")
    assert (one.type, one.on_demand, one.cold) == ("model", True, True)  # type: ignore[attr-defined]

    _serve(cold_model, upstream)
    warm = {"od-notify": (True, False), "qwen3-32b": (None, None)}
    wait_for(lambda: flags() == (warm, warm), 60)


def test_a_cold_model_asked_for_while_the_database_is_away_gets_the_databases_503(cold_model, alice, spawn_gateway):
    """The key and the catalog are in the gateway's snapshot, but the start cannot be asked for: the
    answer is the gateway's own database_unavailable (Retry-After 5), as for any request the
    snapshot cannot serve, not "could not be started" with a Python repr and Retry-After 30; with
    the database back, a request starts the model."""
    from django.conf import settings

    from tests.fakes.tcp_proxy import TcpProxy
    from tests.gateway.conftest import database_url
    from tests.services import require_postgres

    require_postgres()
    _key, key = issue_key(owner=alice, name="laptop")
    db = settings.DATABASES["default"]
    port = db.get("PORT") or 5432
    with TcpProxy(f"redis://{db.get('HOST') or '127.0.0.1'}:{port}/0") as proxy:
        (gw,) = spawn_gateway(1, DATABASE_URL=database_url().replace(f":{port}/", f":{proxy.port}/"))
        listed = httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert listed.status_code == 200 and "od-notify" in listed.text  # key and catalog loaded
        proxy.set("refuse")
        reply = _ask(gw.url, key)
        assert not ColdStart.objects.filter(deployment=cold_model).exists()
        proxy.set("pass")

        def started() -> bool:  # `Prefer: wait=0`: the start is asked for, the client comes back
            again = httpx.post(
                f"{gw.url}/v1/chat/completions",
                headers={"Authorization": f"Bearer {key}", "Prefer": "wait=0"},
                json={"model": "od-notify", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
                timeout=60,
            )
            assert again.json()["error"]["code"] in ("model_starting", "database_unavailable"), again.text
            return ColdStart.objects.filter(deployment=cold_model).exists()

        wait_for(started, 60, interval=0.5)  # the database back: a request starts the model, no restart needed
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == "database_unavailable", reply.text
    assert reply.headers["retry-after"] == "5"


def test_a_cold_start_through_an_alias_names_the_alias_and_the_model_it_starts(gateway_url, cold_model, alice):
    """The client asked for the alias: the 503s of the cold start it set off say that name, and
    which model it starts (they named only the target, a name the client never sent)."""
    from channels.services import save_alias

    save_alias(name="od-coder", targets=["od-notify"])
    _key, key = issue_key(owner=alice, name="laptop")

    def ask(model: str, wait: int) -> dict:
        reply = httpx.post(
            f"{gateway_url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}", "Prefer": f"wait={wait}"},
            json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
            timeout=60,
        )
        assert reply.status_code == 503, reply.text
        return reply.json()["error"]

    now = ask("od-coder", 0)  # the start is asked for, the client comes back
    assert now["code"] == "model_starting"
    assert now["message"].startswith("The model 'od-coder' (alias of 'od-notify') is starting."), now
    wait_for(lambda: ColdStart.objects.active().filter(deployment=cold_model).exists(), 30)
    later = ask("od-coder", 1)  # no worker here: the start does not end within the wait asked for
    assert later["code"] == "model_starting"
    assert later["message"].startswith("The model 'od-coder' (alias of 'od-notify') did not start within 1 s"), later
    direct = ask("od-notify", 0)  # named by its own name: that name alone
    assert direct["message"].startswith("The model 'od-notify' is starting."), direct
