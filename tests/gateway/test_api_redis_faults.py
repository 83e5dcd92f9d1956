"""The REST API and the pages when Redis misbehaves: two real portal processes (web UI, REST API and
gateway, as `portal up` and compose run them) whose Redis (cache, throttles, broker, generations)
is a real Redis behind the test's TCP proxy (tests/fakes/tcp_proxy.py).

What is asserted is what a script or a person sees: never a 500; a change is committed and says
that the replicas were not told at once; what really needs Redis there and then (queuing a task)
is a 503 with `Retry-After` as JSON in the API, as a page in the UI; and a key revoked through the
API during the blip is refused by both replicas within 5 s of Redis coming back.
"""

from __future__ import annotations

import time

import httpx
import pytest
from django.test import Client

from accounts.services import issue_token
from hosts.models import Host
from keys.models import Key
from keys.services import issue_key
from tests.fakes.tcp_proxy import TcpProxy
from tests.gateway.conftest import wait_for
from tests.services import redis_url

pytestmark = [pytest.mark.slow]

SHORT = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}
ANSWER_WITHIN = 20.0  # far above the 0.5 s Redis deadlines, the 2 s generation bump, the broker's 1 s


@pytest.fixture
def rig(setup, admin, spawn_gateway):
    _token, plaintext = issue_token(user=admin, name="script")
    host = Host.objects.create(name="gpu-1", address="10.0.0.9", username="ubuntu")
    with TcpProxy(redis_url()) as proxy:
        replicas = [
            s.url
            for s in spawn_gateway(2, REDIS_URL=proxy.url, GATEWAY_REDIS_TIMEOUT="0.5", PORTAL_REDIS_TIMEOUT="0.5")
        ]
        try:
            yield proxy, replicas, {"Authorization": f"Token {plaintext}"}, host
        finally:
            proxy.set("pass")


def gateway_post(url: str, key: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=SHORT, headers={"Authorization": f"Bearer {key}"}, timeout=15)


def sweep(api: httpx.Client, setup, host: Host, n: int) -> list[tuple[str, httpx.Response]]:
    """List, create, change and revoke across the API's resources; (what, response) for each."""
    out: list[tuple[str, httpx.Response]] = []

    def call(method: str, path: str, **kw) -> httpx.Response:
        started = time.monotonic()
        r = api.request(method, path, **kw)
        assert time.monotonic() - started < ANSWER_WITHIN, f"{method} {path} took too long"
        out.append((f"{method} {path}", r))
        return r

    for path in (
        "/api/me/",
        "/api/keys/",
        "/api/users/",
        "/api/teams/",
        "/api/tokens/",
        "/api/channels/",
        "/api/models/",
        "/api/aliases/",
        "/api/hosts/",
        "/api/usage/records/",
        "/api/usage/summary/",
        "/api/audit-log/",
        f"/api/keys/{setup.key.pk}/",
    ):
        call("GET", path)
    created = call("POST", "/api/keys/", json={"name": f"during-blip-{n}", "owner": setup.key.owner_id})
    if created.status_code == 201:
        new = created.json()["id"]
        call("PATCH", f"/api/keys/{new}/", json={"name": f"renamed-{n}"})
        call("POST", f"/api/keys/{new}/revoke/")
    call("POST", "/api/models/", json={"name": f"blip-model-{n}"})
    call("PATCH", f"/api/channels/{setup.channel.pk}/", json={"priority": n})
    call("POST", "/api/teams/", json={"name": f"blip-team-{n}"})
    call("POST", f"/api/hosts/{host.pk}/refresh-inventory/")  # needs the broker there and then
    return out


@pytest.mark.parametrize("mode", ["stall", "refuse"])
def test_the_api_never_answers_500_while_redis_misbehaves_and_changes_are_committed(rig, setup, mode):
    proxy, replicas, auth, host = rig
    with httpx.Client(base_url=replicas[0], headers=auth, timeout=30) as api:
        assert api.get("/api/keys/").status_code == 200
        proxy.set(mode)
        answers = sweep(api, setup, host, 1)
        proxy.set("pass")

    statuses = {what: r.status_code for what, r in answers}
    assert 500 not in statuses.values(), statuses
    for what, r in answers:
        assert r.headers["content-type"].startswith("application/json"), what
        if r.status_code == 503:
            body = r.json()
            assert body["code"] == "redis_unavailable" and "Redis" in body["detail"], (what, body)
            assert r.headers["retry-after"]
        elif what.startswith(("POST", "PATCH")):
            # Committed, and the answer says the replicas could not be told at once.
            assert r.status_code in (200, 201), (what, r.status_code, r.text)
            assert r.headers["x-portal-propagation"] == "unconfirmed", what
            assert r.json()["propagation"]["confirmed"] is False, what
        else:
            assert r.status_code == 200, (what, r.status_code, r.text)
    # Only the task queue needed Redis there and then.
    assert [w for w, r in answers if r.status_code == 503] == [f"POST /api/hosts/{host.pk}/refresh-inventory/"]
    assert Key.objects.filter(name="renamed-1", revoked_at__isnull=False).exists()


def test_a_key_revoked_through_the_api_during_a_blip_is_refused_by_both_replicas_within_5_s_of_healing(rig, setup):
    proxy, replicas, auth, _host = rig
    for url in replicas:  # both have the key cached
        assert gateway_post(url, setup.plaintext).status_code == 200
    proxy.set("refuse")
    r = httpx.post(f"{replicas[0]}/api/keys/{setup.key.pk}/revoke/", headers=auth, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["x-portal-propagation"] == "unconfirmed"
    assert r.json()["revoked_at"] and r.json()["propagation"]["confirmed"] is False
    setup.key.refresh_from_db()
    assert setup.key.revoked_at is not None  # committed during the blip
    time.sleep(2.0)  # the blip goes on after the revoke
    proxy.set("pass")
    healed = time.monotonic()
    for url in replicas:
        wait_for(lambda u=url: gateway_post(u, setup.plaintext).status_code == 401, timeout=15, interval=0.1)
    assert time.monotonic() - healed < 5.0


def test_pages_answer_and_a_page_that_needs_redis_is_a_503_page(rig, setup, admin):
    """A session made in the database (no password round trip), used against the real server."""
    proxy, replicas, _auth, host = rig
    other, _ = issue_key(owner=admin, name="admin-laptop")
    login = Client()
    login.force_login(admin)
    with httpx.Client(base_url=replicas[0], timeout=30, cookies={"sessionid": login.cookies["sessionid"].value}) as web:
        assert web.get("/keys/").status_code == 200
        csrf = web.cookies["csrftoken"]
        proxy.set("refuse")
        for path in ("/", "/keys/", "/keys/all/", "/hosts/", "/channels/", "/models/", "/usage/", "/users/"):
            r = web.get(path)
            assert r.status_code == 200, (path, r.status_code)
        refresh = web.post(f"/hosts/{host.pk}/refresh/", headers={"X-CSRFToken": csrf})
        assert refresh.status_code == 503 and refresh.headers["retry-after"]
        assert "Redis did not answer" in refresh.text and "<html" in refresh.text
        revoke = web.post(f"/keys/{other.pk}/revoke/", headers={"X-CSRFToken": csrf}, follow_redirects=True)
        assert revoke.status_code == 200
        assert "could not be told at once" in revoke.text
        proxy.set("pass")
    other.refresh_from_db()
    assert other.revoked_at is not None
