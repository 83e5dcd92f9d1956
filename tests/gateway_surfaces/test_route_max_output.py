"""A route's max output caps what its upstream is asked to generate, on every surface: Claude Code
asks for 32,000 output tokens whatever the model, and a vLLM or llama.cpp server with a small
window refuses a prompt + max_tokens past it (or generates past the admin's cap). Each route gets
its own cap, and the reservation against the key's limits is what the routes may generate."""

from __future__ import annotations

import httpx
import pytest

from channels.models import ModelRoute
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import add_channel
from tests.gateway_surfaces.conftest import UPSTREAM_KEY, add_native_channel, record_for, set_limits

CAP = 2048  # the test route's max output (`add_channel`)
ASKED = 32_000
HI = [{"role": "user", "content": "hi"}]


def post(gateway_url: str, key: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(gateway_url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", {"messages": HI, "max_tokens": ASKED}, "max_tokens"),
        ("/v1/chat/completions", {"messages": HI, "max_completion_tokens": ASKED}, "max_completion_tokens"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": ASKED}, "max_tokens"),
        ("/v1/messages", {"messages": HI, "max_tokens": ASKED}, "max_tokens"),  # translated to Chat
        ("/v1/responses", {"input": "hi", "max_output_tokens": ASKED}, "max_tokens"),  # translated to Chat
    ],
)
def test_a_chat_channel_is_asked_for_no_more_than_its_routes_max_output(
    setup, gateway_url, upstream, path, body, field, stream
):
    r = post(gateway_url, setup.plaintext, path, {"model": "qwen3-32b", **body, "stream": stream})
    assert r.status_code == 200, r.text
    assert upstream.requests[-1].json[field] == CAP


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("flag", "path", "body", "field"),
    [
        ("speaks_messages", "/v1/messages", {"messages": HI, "max_tokens": ASKED}, "max_tokens"),
        ("speaks_responses", "/v1/responses", {"input": "hi", "max_output_tokens": ASKED}, "max_output_tokens"),
    ],
)
def test_a_native_channel_is_asked_for_no_more_than_its_routes_max_output(
    setup, gateway_url, native_upstream, flag, path, body, field, stream
):
    add_native_channel(setup, native_upstream, kind="vllm", **{flag: True})
    ModelRoute.objects.filter(model=setup.model).update(max_output_tokens=CAP)
    setup.model.save()  # reload the gateway's catalog
    r = post(gateway_url, setup.plaintext, path, {"model": "qwen3-32b", **body, "stream": stream})
    assert r.status_code == 200, r.text
    sent = native_upstream.requests[-1]
    assert sent.path == path and sent.json[field] == CAP


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
def test_an_anthropic_channel_is_asked_for_no_more_than_its_routes_max_output_with_room_to_think(
    setup, gateway_url, native_upstream, path
):
    """Chat (and Responses through it) with a reasoning effort translated to Messages, and Claude
    Code's own thinking budget: the budget stays below the max_tokens sent, as Anthropic requires."""
    add_native_channel(setup, native_upstream, kind="anthropic")
    ModelRoute.objects.filter(model=setup.model).update(max_output_tokens=CAP)
    setup.model.save()
    body = {
        "/v1/chat/completions": {"messages": HI, "max_tokens": ASKED, "reasoning_effort": "high"},
        "/v1/messages": {
            "messages": HI,
            "max_tokens": ASKED,
            "thinking": {"type": "enabled", "budget_tokens": ASKED - 1},
        },
        "/v1/responses": {"input": "hi", "max_output_tokens": ASKED, "reasoning": {"effort": "high"}},
    }[path]
    r = post(gateway_url, setup.plaintext, path, {"model": "qwen3-32b", **body})
    assert r.status_code == 200, r.text
    sent = native_upstream.requests[-1].json
    assert sent["max_tokens"] == CAP
    assert sent["thinking"]["budget_tokens"] == CAP - 1


def test_each_route_is_asked_for_its_own_max_output(setup, gateway_url, upstream):
    """The primary (max output 100) fails; the backup (no max output) is asked for what the client asked."""
    ModelRoute.objects.filter(pk=setup.route.pk).update(max_output_tokens=100)
    with FakeUpstream(api_key=UPSTREAM_KEY) as backup:
        _, route = add_channel(backup, "backup", priority=-1, model=setup.model)
        ModelRoute.objects.filter(pk=route.pk).update(max_output_tokens=None)
        setup.model.save()  # reload the gateway's catalog
        upstream.behave(mode="status", status=500)
        body = {"model": "qwen3-32b", "messages": HI, "max_tokens": 5000}
        r = post(gateway_url, setup.plaintext, "/v1/chat/completions", body)
        assert r.status_code == 200, r.text
        assert (upstream.requests[-1].json["max_tokens"], backup.requests[-1].json["max_tokens"]) == (100, 5000)


def test_the_reservation_is_the_routes_max_output_not_what_the_client_asked(setup, gateway_url, upstream):
    """A key allowed 3,000 tokens a minute: Claude Code's 32,000 would never fit, but its route
    generates at most 2,048, which the key can hold."""
    set_limits(setup.key, tokens_per_minute=3000)
    body = {"model": "qwen3-32b", "messages": HI, "max_tokens": ASKED}
    r = post(gateway_url, setup.plaintext, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    assert record_for(setup.key)[0].status == "ok"
