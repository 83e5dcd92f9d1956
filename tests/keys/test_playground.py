"""The playground's session-bound credential against the real gateway (uvicorn serving
`portal.asgi`, fake upstreams on 127.0.0.1): what it lets through, what it refuses, and that the
records are the user's with the surface "playground"."""

from __future__ import annotations

import uuid

import httpx
import pytest
from django.test import Client

from channels.models import Channel, Model, ModelRoute
from keys.choices import ApiSurface
from keys.models import Key, UsageRecord
from keys.playground import credential
from keys.playground.services import CLIENT, playground_key
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ThreadServer, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
UPSTREAM_KEY = "sk-upstream-playground"
HEADERS = {credential.HEADER: "1"}


@pytest.fixture
def world(transactional_db, settings, monkeypatch, tmp_path):
    """A local channel serving `local-chat`, an external one serving `cloud-chat`, and the portal
    (pages and gateway) on one uvicorn server."""
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", "pgtest-" + uuid.uuid4().hex[:10])
    settings.PORTAL_PUBLIC_URL = ""
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    with FakeUpstream(api_key=UPSTREAM_KEY) as local_up, FakeUpstream(api_key=UPSTREAM_KEY) as cloud_up:
        local = Channel.objects.create(
            name="gpu-box",
            kind="vllm",
            base_url=local_up.base_url,
            api_key=UPSTREAM_KEY,
            status="healthy",
            locality="local",
        )
        cloud = Channel.objects.create(
            name="cloud",
            kind="vllm",
            base_url=cloud_up.base_url,
            api_key=UPSTREAM_KEY,
            status="healthy",
            locality="external",
        )
        ModelRoute.objects.create(
            model=Model.objects.create(name="local-chat"), channel=local, upstream_model="fake-model"
        )
        ModelRoute.objects.create(
            model=Model.objects.create(name="cloud-chat"), channel=cloud, upstream_model="fake-model"
        )
        server = ThreadServer().start()
        try:
            yield {
                "url": server.url,
                "local": local_up,
                "cloud": cloud_up,
                "local_channel": local,
                "cloud_channel": cloud,
            }
        finally:
            server.stop()


def signed_in(user) -> tuple[Client, dict[str, str]]:
    """A Django test client signed in as `user` (its session in the shared database) and the
    cookies a browser would send to /v1/ after the playground asked for its credential."""
    client = Client()
    client.force_login(user)
    client.get("/playground/")  # the page issues the playground key; the credential needs the session
    answer = client.post("/playground/credential/")
    assert answer.status_code == 200, answer.content
    assert "gp-" not in answer.content.decode()  # no key in the answer
    cookie = answer.cookies[credential.COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/v1/"
    return client, {"sessionid": client.cookies["sessionid"].value, credential.COOKIE: cookie.value}


def chat(url: str, cookies: dict[str, str], model: str = "local-chat", headers: dict[str, str] | None = None):
    return httpx.post(
        url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8},
        headers=HEADERS if headers is None else headers,
        cookies=cookies,
        timeout=30,
    )


def test_the_session_credential_goes_through_the_gateway_and_records_the_user(world, alice):
    _, cookies = signed_in(alice)
    models = httpx.get(world["url"] + "/v1/models", headers=HEADERS, cookies=cookies, timeout=30)
    assert models.status_code == 200
    assert sorted(m["id"] for m in models.json()["data"]) == ["cloud-chat", "local-chat"]

    reply = chat(world["url"], cookies)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4"
    assert "x-portal-replica" not in reply.headers  # a developer is not told the replica
    record = wait_for(lambda: UsageRecord.objects.filter(request_id=reply.headers["x-request-id"]).first())
    key = Key.objects.get(owner=alice, client=CLIENT)
    assert (record.user_id, record.key_id, record.surface) == (alice.pk, key.pk, ApiSurface.PLAYGROUND)
    assert record.completion_tokens == 5
    assert world["local"].requests[-1].headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"


def test_the_credential_is_refused_without_its_session_header_or_after_logout(world, alice, mallory):
    client, cookies = signed_in(alice)
    url = world["url"]
    assert chat(url, cookies, headers={}).status_code == 401  # the cookie alone is not a credential
    stolen = {credential.COOKIE: cookies[credential.COOKIE]}
    refused = chat(url, stolen)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_playground_credential"
    _, other = signed_in(mallory)
    swapped = chat(url, {"sessionid": other["sessionid"], credential.COOKIE: cookies[credential.COOKIE]})
    assert swapped.status_code == 401  # bound to the session it was minted for
    forged = chat(url, {"sessionid": cookies["sessionid"], credential.COOKIE: cookies[credential.COOKIE] + "x"})
    assert forged.status_code == 401

    assert chat(url, cookies).status_code == 200
    client.post("/logout/")
    after = chat(url, cookies)
    assert after.status_code == 401, after.text
    assert "signed out" in after.json()["error"]["message"]


def test_an_expired_credential_is_refused(world, alice, settings):
    _, cookies = signed_in(alice)
    settings.PLAYGROUND_CREDENTIAL_SECONDS = -1
    refused = chat(world["url"], cookies)
    assert refused.status_code == 401 and "expired" in refused.json()["error"]["message"]


def test_a_local_only_playground_key_never_reaches_an_external_model(world, alice):
    playground_key(alice)
    Key.objects.filter(owner=alice, client=CLIENT).update(local_only=True)
    _, cookies = signed_in(alice)
    listed = httpx.get(world["url"] + "/v1/models", headers=HEADERS, cookies=cookies, timeout=30).json()
    assert [m["id"] for m in listed["data"]] == ["local-chat"]
    refused = chat(world["url"], cookies, model="cloud-chat")
    assert refused.status_code in (403, 404), refused.text
    assert not world["cloud"].requests


def test_an_admin_pins_one_channel_and_a_developer_cannot(world, admin, alice):
    both = Model.objects.create(name="both-chat")
    for channel in (world["local_channel"], world["cloud_channel"]):
        ModelRoute.objects.create(model=both, channel=channel, upstream_model="fake-model")
    _, admin_cookies = signed_in(admin)
    pin = {**HEADERS, "x-portal-channel": str(world["cloud_channel"].pk), "x-portal-debug": "route"}
    for _ in range(3):
        reply = chat(world["url"], admin_cookies, model="both-chat", headers=pin)
        assert reply.status_code == 200, reply.text
        assert "sent to cloud" in reply.headers["x-portal-route"]
        assert reply.headers["x-portal-replica"]
    assert not world["local"].requests
    wrong = chat(world["url"], admin_cookies, model="local-chat", headers=pin)
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "channel_not_serving"

    _, cookies = signed_in(alice)
    pin_local = {**HEADERS, "x-portal-channel": str(world["local_channel"].pk)}
    assert chat(world["url"], cookies, model="cloud-chat", headers=pin_local).status_code == 200  # ignored


def test_call_records_are_the_users_own(world, alice, mallory):
    client, cookies = signed_in(alice)
    reply = chat(world["url"], cookies)
    rid = reply.headers["x-request-id"]
    wait_for(lambda: UsageRecord.objects.filter(request_id=rid).exists())
    mine = client.get(f"/playground/calls/{rid}/")
    assert mine.status_code == 200
    assert mine.json()["surface"] == "playground" and mine.json()["channel_name"] is None  # hidden from developers
    other = Client()
    other.force_login(mallory)
    assert other.get(f"/playground/calls/{rid}/").status_code == 202  # never someone else's record


def test_try_links_and_the_pinned_channel_page(world, admin_client):
    models = admin_client.get("/models/").content.decode()
    assert "/playground/?model=local-chat" in models
    channels = admin_client.get("/channels/").content.decode()
    channel = world["cloud_channel"]
    assert f"/playground/?channel={channel.pk}&amp;model=cloud-chat" in channels
    page = admin_client.get(f"/playground/?channel={channel.pk}&model=cloud-chat")
    assert page.status_code == 200
    assert b'"models": ["cloud-chat"]' in page.content and b"pinned-channel" in page.content


def test_a_developer_cannot_pin_a_channel_on_the_page(world, alice):
    client = Client()
    client.force_login(alice)
    page = client.get(f"/playground/?channel={world['cloud_channel'].pk}")
    assert page.status_code == 200 and b"pinned-channel" not in page.content


def test_the_key_list_calls_the_playground_key_what_it_is(alice_client, alice):
    """Opening the playground makes its key; the key list said it was minted on the Connect page."""
    assert alice_client.get("/playground/").status_code == 200
    key = Key.objects.get(owner=alice, client=CLIENT)
    page = alice_client.get("/keys/").content.decode()
    row = page[page.index(key.masked) - 600 : page.index(key.masked)]
    assert '<small class="muted">Playground</small>' in row, row
    assert "on the Connect page" not in page


def test_the_playground_key_is_named_in_english_whatever_its_owner_reads(alice_client, alice, admin):
    """Regression (probe): the key was named in its owner's language at first use, so an admin or
    team lead reading English saw 操练场 in the team's keys."""
    alice.language = "zh-hans"
    alice.save(update_fields=["language"])
    assert alice_client.get("/playground/").status_code == 200
    key = Key.objects.get(owner=alice, client=CLIENT)
    assert key.name == "Playground"
    mine = alice_client.get("/keys/").content.decode()
    assert '<small class="muted">操练场</small>' in mine  # her list labels it in her language
    reader = Client()
    reader.force_login(admin)
    assert "操练场" not in reader.get(f"/keys/{key.pk}/").content.decode()


def test_the_playground_key_is_shown_by_its_name_in_its_readers_language(alice_client, alice):
    """Regression (probe): the stored English name showed through, so a Chinese reader read
    "使用你的密钥 Playground" on the playground and "Playground" in their key list."""
    alice.language = "zh-hans"
    alice.save(update_fields=["language"])
    playground = alice_client.get("/playground/").content.decode()
    key = Key.objects.get(owner=alice, client=CLIENT)
    assert f'使用你的密钥 <a href="/keys/{key.pk}/">操练场</a>' in playground
    assert f'<a href="/keys/{key.pk}/">操练场</a>' in alice_client.get("/keys/").content.decode()
    assert "<h1>操练场 <small>" in alice_client.get(f"/keys/{key.pk}/").content.decode()
    # A name its owner chose is shown as typed.
    Key.objects.filter(pk=key.pk).update(name="Playground mine")
    assert f'<a href="/keys/{key.pk}/">Playground mine</a>' in alice_client.get("/keys/").content.decode()


def test_every_error_the_playground_explains_is_one_the_gateway_can_send():
    """The meanings are keyed by hand-written codes and types: each must be one the gateway's code
    says (a typo would leave that error unexplained), or one of the page's own (no answer at all)."""
    from pathlib import Path

    from keys.playground.views import _error_texts

    gateway = Path(__file__).resolve().parents[2] / "gateway"
    source = "\n".join(p.read_text() for p in gateway.rglob("*.py"))
    own = {"network", "aborted"}  # playground.js: the gateway could not be reached, the user stopped
    unknown = [code for code in _error_texts() if code not in own and f'"{code}"' not in source]
    assert unknown == []
