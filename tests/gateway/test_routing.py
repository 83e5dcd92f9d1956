"""Aliases, context-aware selection, local-only requests and the routing explanation, through the
real gateway in front of two fake upstreams: a local llama-server-sized channel (24,576 tokens)
and an external cloud channel (131,072)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
import pytest
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape

from channels.models import Channel, Model, ModelRoute
from channels.services import save_alias
from keys.models import UsageRecord
from keys.services import issue_key
from keys.usage import explanation as lines
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import UPSTREAM_KEY, wait_for

LOCAL_WINDOW, CLOUD_WINDOW = 24_576, 131_072
# ≈4 characters a token: about 30,000 tokens, too long for the local window, fine for the cloud.
LONG = "word " * 24_000


@dataclass
class Rig:
    local: FakeUpstream
    cloud: FakeUpstream
    local_channel: Channel
    cloud_channel: Channel
    key: object
    plaintext: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.plaintext}"}


def channel(up: FakeUpstream, name: str, locality: str, **fields) -> Channel:
    return Channel.objects.create(
        name=name,
        kind="vllm",
        base_url=up.base_url,
        api_key=UPSTREAM_KEY,
        status="healthy",
        locality=locality,
        **fields,
    )


def route(model: Model, ch: Channel, window: int) -> ModelRoute:
    return ModelRoute.objects.create(model=model, channel=ch, upstream_model="fake-model", context_window=window)


@pytest.fixture
def rig(transactional_db, admin):
    with (
        FakeUpstream(api_key=UPSTREAM_KEY, max_model_len=LOCAL_WINDOW) as local,
        FakeUpstream(api_key=UPSTREAM_KEY, max_model_len=CLOUD_WINDOW) as cloud,
    ):
        local_channel = channel(local, "local-llama", "local")
        cloud_channel = channel(cloud, "cloud", "external")
        route(Model.objects.create(name="qwen3-coder"), local_channel, LOCAL_WINDOW)
        route(Model.objects.create(name="qwen3-coder-plus"), cloud_channel, CLOUD_WINDOW)
        save_alias(name="coder", targets=["qwen3-coder", "qwen3-coder-plus"])
        key, plaintext = issue_key(owner=admin, name="laptop")
        yield Rig(local, cloud, local_channel, cloud_channel, key, plaintext)


def chat(content: str, model: str = "coder", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


def record(rig: Rig) -> UsageRecord:
    return wait_for(lambda: UsageRecord.objects.filter(key=rig.key).first())


def test_a_short_request_to_an_alias_goes_to_its_first_target(rig, gateway_url):
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi"), headers=rig.auth)
    assert r.status_code == 200
    assert len(rig.local.requests) == 1 and rig.cloud.requests == []
    assert "x-portal-route" not in r.headers  # only when asked
    rec = record(rig)
    assert rec.model == "coder" and rec.channel_id == rig.local_channel.id
    assert rec.route_explanation == [
        "alias coder -> qwen3-coder, qwen3-coder-plus",
        "sent to local-llama (qwen3-coder)",
    ]


def test_the_alias_falls_through_to_the_target_whose_window_holds_the_request(rig, gateway_url):
    r = httpx.post(
        gateway_url + "/v1/chat/completions",
        json=chat(LONG, max_tokens=1000),
        headers={**rig.auth, "X-Portal-Debug": "route"},
    )
    assert r.status_code == 200, r.text
    assert rig.local.requests == [] and len(rig.cloud.requests) == 1
    assert rig.cloud.requests[0].json["model"] == "fake-model"
    rec = record(rig)
    assert rec.channel_id == rig.cloud_channel.id
    skipped = rec.route_explanation[1]
    assert skipped.startswith("skipped local-llama (qwen3-coder): window 24,576 < ") and skipped.endswith(" needed")
    need = int(skipped.split("< ")[1].split(" ")[0].replace(",", ""))
    assert 30_000 + 1000 <= need <= 31_500  # the prompt estimate plus the requested output
    assert rec.route_explanation[-1] == "sent to cloud (qwen3-coder-plus)"
    assert r.headers["x-portal-route"] == "; ".join(rec.route_explanation)


def test_a_chinese_prompt_is_counted_as_chinese_and_goes_where_it_fits(rig, gateway_url):
    """63,000 characters of Chinese are 45,000 tokens to Qwen's tokenizer (measured with its BPE
    ranks): far past the local window. Counted at 4 characters a token (15,750) they were sent to
    the local server, which refuses them; counted at half a token a character (31,500, still short
    of any tokenizer's count) they go to the cloud's window at once."""
    chinese = "请把这个函数改写成异步的，并补上单元测试。" * 3000
    r = httpx.post(
        gateway_url + "/v1/chat/completions",
        json=chat(chinese, max_tokens=1000),
        headers={**rig.auth, "X-Portal-Debug": "route"},
    )
    assert r.status_code == 200, r.text
    assert rig.local.requests == [] and len(rig.cloud.requests) == 1
    skipped = record(rig).route_explanation[1]
    assert skipped.startswith("skipped local-llama (qwen3-coder): window 24,576 < "), skipped
    need = int(skipped.split("< ")[1].split(" ")[0].replace(",", ""))
    assert 31_500 + 1000 <= need <= 33_000


def test_the_requested_output_counts_toward_the_window(rig, gateway_url):
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi", max_tokens=30_000), headers=rig.auth)
    assert r.status_code == 200 and rig.local.requests == [] and len(rig.cloud.requests) == 1


def test_the_alias_falls_through_on_upstream_failure(rig, gateway_url):
    rig.local.behave(mode="status", status=502)
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi"), headers=rig.auth)
    assert r.status_code == 200
    assert len(rig.local.requests) == 1 and len(rig.cloud.requests) == 1
    rec = record(rig)
    assert rec.channel_id == rig.cloud_channel.id
    assert rec.route_explanation[-2:] == ["failover after 502 from local-llama", "sent to cloud (qwen3-coder-plus)"]


def test_nothing_holds_the_request_is_a_400_naming_the_largest_window(rig, gateway_url):
    r = httpx.post(
        gateway_url + "/v1/chat/completions",
        json=chat("hi", max_tokens=200_000),
        headers={**rig.auth, "X-Portal-Debug": "route"},
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["type"] == "invalid_request_error"
    assert "131,072" in err["message"] and "'coder'" in err["message"]
    assert rig.local.requests == [] and rig.cloud.requests == []
    assert "window 131,072 < " in r.headers["x-portal-route"]
    rec = record(rig)
    assert (rec.http_status, rec.status, rec.channel_id) == (400, "client_error", None)
    assert rec.route_explanation[-1] == "refused: context_length_exceeded"


def test_the_400_has_the_anthropic_shape_on_messages(rig, gateway_url):
    body = {"model": "coder", "max_tokens": 200_000, "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(gateway_url + "/v1/messages", json=body, headers={"x-api-key": rig.plaintext})
    assert r.status_code == 400
    data = r.json()
    assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    # Anthropic's words, whose figures Claude Code reads to lower its max_tokens and try again
    assert re.fullmatch(
        r"input length and `max_tokens` exceed context limit: \d+ \+ 200000 > 131072, "
        r"decrease input length or `max_tokens` and try again",
        data["error"]["message"],
    ), data


def test_models_lists_the_alias_with_the_largest_window_it_serves(rig, gateway_url):
    r = httpx.get(gateway_url + "/v1/models", headers=rig.auth)
    windows = {m["id"]: m["context_window"] for m in r.json()["data"]}
    assert windows == {"coder": CLOUD_WINDOW, "qwen3-coder": LOCAL_WINDOW, "qwen3-coder-plus": CLOUD_WINDOW}


def test_a_developers_key_gets_no_route_header_even_when_asking(rig, gateway_url, alice):
    """The explanation names channels, which developers are never shown."""
    _key, plaintext = issue_key(owner=alice, name="laptop")
    headers = {"Authorization": f"Bearer {plaintext}", "X-Portal-Debug": "route"}
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi"), headers=headers)
    assert r.status_code == 200 and "x-portal-route" not in r.headers
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi", max_tokens=200_000), headers=headers)
    assert r.status_code == 400 and "x-portal-route" not in r.headers


# --- local-only keys and aliases ----------------------------------------------------------


@pytest.fixture
def local_key(rig):
    rig.key.local_only = True
    rig.key.save()
    return rig


@pytest.fixture
def mixed(rig):
    """qwen3-32b on the local channel (tried first) and on the cloud channel."""
    model = Model.objects.create(name="qwen3-32b")
    rig.local_channel.priority = 10
    rig.local_channel.save()
    route(model, rig.local_channel, LOCAL_WINDOW)
    route(model, rig.cloud_channel, CLOUD_WINDOW)
    return rig


def test_without_the_restriction_failover_reaches_the_cloud(mixed, gateway_url):
    """The control for the next test: the cloud channel is a real failover target."""
    mixed.local.behave(mode="status", status=500)
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi", model="qwen3-32b"), headers=mixed.auth)
    assert r.status_code == 200 and len(mixed.cloud.requests) == 1


def test_a_local_only_key_never_reaches_an_external_channel_even_on_failover(mixed, local_key, gateway_url):
    mixed.local.behave(mode="status", status=500)
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi", model="qwen3-32b"), headers=mixed.auth)
    assert r.status_code == 502
    assert "External channels were not tried" in r.json()["error"]["message"]
    assert len(mixed.local.requests) == 1
    assert mixed.cloud.requests == []
    rec = record(mixed)
    assert "skipped cloud: external channel, key is local-only" in rec.route_explanation
    assert rec.route_explanation[-2:] == ["failover after 500 from local-llama", "every route failed"]


def test_a_local_only_key_on_an_alias_gets_the_local_window_only(rig, local_key, gateway_url):
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat(LONG), headers=rig.auth)
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "on local channels" in message and "24,576" in message
    assert rig.local.requests == [] and rig.cloud.requests == []


def test_a_local_only_key_on_an_external_model_is_refused_saying_why(rig, local_key, gateway_url):
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi", model="qwen3-coder-plus"), headers=rig.auth)
    assert r.status_code == 403
    err = r.json()["error"]
    assert err["code"] == "local_only" and "this key is restricted to local channels" in err["message"]
    assert rig.cloud.requests == []


def test_a_local_only_alias_keeps_every_key_local(rig, gateway_url):
    save_alias(
        alias=Model.objects.get(name="coder"),
        name="coder",
        targets=["qwen3-coder", "qwen3-coder-plus"],
        local_only=True,
    )
    rig.local.behave(mode="status", status=503)
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi"), headers=rig.auth)
    assert r.status_code == 502 and rig.cloud.requests == []
    models = {m["id"]: m for m in httpx.get(gateway_url + "/v1/models", headers=rig.auth).json()["data"]}
    assert models["coder"]["context_window"] == LOCAL_WINDOW


def test_a_disabled_target_is_skipped(rig, gateway_url):
    Model.objects.filter(name="qwen3-coder").update(enabled=False)
    Model.objects.get(name="qwen3-coder").save()  # the signal that reloads the gateway's catalog
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi"), headers=rig.auth)
    assert r.status_code == 200 and rig.local.requests == [] and len(rig.cloud.requests) == 1
    assert "skipped qwen3-coder: disabled" in record(rig).route_explanation


def test_models_shows_a_local_only_key_what_local_channels_serve(mixed, local_key, gateway_url):
    models = {
        m["id"]: m["context_window"] for m in httpx.get(gateway_url + "/v1/models", headers=mixed.auth).json()["data"]
    }
    # qwen3-coder-plus is cloud-only: not listed; coder and qwen3-32b: the local window
    assert models == {"coder": LOCAL_WINDOW, "qwen3-coder": LOCAL_WINDOW, "qwen3-32b": LOCAL_WINDOW}


def test_a_routes_max_output_caps_what_the_requested_output_needs(rig, gateway_url):
    """Claude Code asks for 32,000 output tokens whatever the model: with a max output configured
    on the local route, a short request still fits its 24,576 window."""
    ModelRoute.objects.filter(channel=rig.local_channel).update(max_output_tokens=8192)
    rig.local_channel.save()  # reload the gateway's catalog
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi", max_tokens=32_000), headers=rig.auth)
    assert r.status_code == 200 and len(rig.local.requests) == 1 and rig.cloud.requests == []


# --- the explanation in the reader's language ----------------------------------------------


def in_chinese(template: str, **values) -> str:
    """What the catalog makes of a line: gettext of its template, and of a nested reason."""
    with translation.override("zh-hans"):
        return translation.gettext(template) % values


def test_the_request_pages_show_the_routing_explanation_in_the_readers_language(rig, gateway_url, client, admin):
    """The gateway stores English lines; the request pages and the API read them back through the
    catalog in zh-Hans, and the stored English is unchanged."""
    r = httpx.post(gateway_url + "/v1/chat/completions", json=chat(LONG, max_tokens=1000), headers=rig.auth)
    assert r.status_code == 200
    window_rec = record(rig)
    need = window_rec.route_explanation[1].split("< ")[1].split(" ")[0]
    Model.objects.filter(name="qwen3-coder").update(enabled=False)
    Model.objects.get(name="qwen3-coder").save()  # the signal that reloads the gateway's catalog
    assert httpx.post(gateway_url + "/v1/chat/completions", json=chat("hi"), headers=rig.auth).status_code == 200
    disabled_rec = wait_for(lambda: UsageRecord.objects.filter(key=rig.key).exclude(pk=window_rec.pk).first())

    alias = (lines.ALIAS, {"alias": "coder", "targets": "qwen3-coder, qwen3-coder-plus"})
    sent = (lines.SENT_TARGET, {"channel": "cloud", "model": "qwen3-coder-plus"})
    window = lines.WINDOW % {"window": "24,576", "need": need}
    expected = {
        window_rec: [
            alias,
            (lines.SKIPPED_TARGET, {"channel": "local-llama", "model": "qwen3-coder", "why": window}),
            sent,
        ],
        disabled_rec: [alias, (lines.SKIPPED, {"channel": "qwen3-coder", "why": lines.DISABLED}), sent],
    }
    client.force_login(admin)
    for rec, steps in expected.items():
        assert rec.route_explanation == [t % v for t, v in steps]  # stored in English, as before
        chinese = []
        for template, values in steps:
            why = values.get("why")
            if why == window:
                why = in_chinese(lines.WINDOW, window="24,576", need=need)
            elif why is not None:
                why = in_chinese(why)
            chinese.append(in_chinese(template, **{**values, **({"why": why} if why else {})}))
        page = client.get(reverse("usage_request_detail", args=[rec.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans")
        html = page.content.decode()
        for english, zh in zip(rec.route_explanation, chinese, strict=True):
            assert escape(zh) in html
            if zh != english:  # the template (or its reason) has a translation: the English is not shown
                assert escape(english) not in html
        api = client.get(f"/api/usage/records/{rec.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
        assert api["route_explanation"] == rec.route_explanation and api["route_explanation_text"] == chinese
        english_page = client.get(reverse("usage_request_detail", args=[rec.pk]), HTTP_ACCEPT_LANGUAGE="en")
        assert all(escape(line) in english_page.content.decode() for line in rec.route_explanation)
    listing = client.get(reverse("usage_requests"), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert escape(in_chinese(sent[0], **sent[1])) in listing  # each row's last step
    # "disabled" is in the catalog already, so this line is partly Chinese even before its template is
    assert in_chinese(lines.DISABLED) != lines.DISABLED
    page = client.get(reverse("usage_request_detail", args=[disabled_rec.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "skipped qwen3-coder: disabled" not in page.content.decode()
