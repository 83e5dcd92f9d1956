"""Every client-facing error path: OpenAI-shaped, right status, never echoing the key."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
from django.utils import timezone

from channels.models import Model
from keys.models import UsageRecord
from keys.services import issue_key, revoke_key
from tests.gateway.conftest import add_channel, wait_for

CHAT = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}]}


def post(url: str, key: str | None = None, body=CHAT, path: str = "/v1/chat/completions", headers=None):
    hdrs = dict(headers or {})
    if key is not None:
        hdrs.setdefault("Authorization", f"Bearer {key}")
    return httpx.post(url + path, json=body, headers=hdrs, timeout=10)


def assert_openai_error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "code", "param"}
    assert err["code"] == code
    return err


def test_missing_key_is_401(setup, gateway_url):
    assert_openai_error(post(gateway_url), 401, "missing_api_key")


def test_wrong_key_is_401_and_never_echoed(setup, gateway_url):
    bogus = "gp-" + "x" * 43
    r = post(gateway_url, bogus)
    assert_openai_error(r, 401, "invalid_api_key")
    assert bogus not in r.text and "xxxx" not in r.text


def test_key_with_whitespace_and_x_api_key_header_work(setup, gateway_url):
    assert post(gateway_url, headers={"Authorization": f"Bearer \t  {setup.plaintext}"}).status_code == 200
    assert post(gateway_url, headers={"x-api-key": setup.plaintext}).status_code == 200
    # A pasted key with a trailing newline, as raw HTTP (clients like httpx refuse to send it).
    import socket
    from urllib.parse import urlsplit

    body = b'{"model":"qwen3-32b","messages":[{"role":"user","content":"hi"}]}'
    u = urlsplit(gateway_url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + setup.plaintext.encode() + b" \t\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200")


def idle(key) -> None:
    """Wait until the gateway wrote this key's usage: on in-memory SQLite (tests without
    PostgreSQL) a write from the test while the gateway's writer holds the lock would fail."""
    wait_for(lambda: UsageRecord.objects.filter(key=key).exists())


def test_revoked_expired_and_disabled_owner_are_401(setup, gateway_url, alice):
    assert post(gateway_url, setup.plaintext).status_code == 200
    idle(setup.key)
    revoke_key(setup.key)
    assert_openai_error(post(gateway_url, setup.plaintext), 401, "key_revoked")

    _key, plain = issue_key(owner=alice, name="old", expires_at=timezone.now() - dt.timedelta(minutes=1))
    assert_openai_error(post(gateway_url, plain), 401, "key_expired")

    _key, plain = issue_key(owner=alice, name="fresh")
    alice.is_active = False
    alice.save()
    r = post(gateway_url, plain)
    assert_openai_error(r, 401, "account_disabled")
    assert plain not in r.text


def test_model_not_allowed_for_key_is_403_listing_allowed(setup, gateway_url, upstream, alice):
    other = Model.objects.create(name="llama-8b")
    add_channel(upstream, "second", model=other)
    _key, plain = issue_key(owner=alice, name="scoped", allowed_models=[other])
    err = assert_openai_error(post(gateway_url, plain), 403, "model_not_allowed")
    assert "llama-8b" in err["message"] and err["param"] == "model"
    ok = post(gateway_url, plain, body={**CHAT, "model": "llama-8b"})
    assert ok.status_code == 200


def test_owner_allowlist_also_limits_the_key(setup, gateway_url, upstream, alice):
    other = Model.objects.create(name="llama-8b")
    add_channel(upstream, "second", model=other)
    alice.allowed_models.set([other])
    err = assert_openai_error(post(gateway_url, setup.plaintext), 403, "model_not_allowed")
    assert "llama-8b" in err["message"]


def test_unknown_model_is_404_with_did_you_mean(setup, gateway_url):
    err = assert_openai_error(
        post(gateway_url, setup.plaintext, body={**CHAT, "model": "Qwen3_32B"}), 404, "model_not_found"
    )
    assert "Did you mean 'qwen3-32b'?" in err["message"]
    err = assert_openai_error(
        post(gateway_url, setup.plaintext, body={**CHAT, "model": "gpt-9"}), 404, "model_not_found"
    )
    assert "qwen3-32b" in err["message"] and "Did you mean" not in err["message"]


def test_a_misspelt_model_is_404_suggesting_the_closest_model_the_key_may_use(setup, gateway_url, upstream, alice):
    """The suggestion was made only for a name that differed in case or separators; a typo got none.
    Now the closest name is suggested, on every surface that answers model_not_found, and only
    among the models the key may use: one it may not use is never named."""
    hidden = Model.objects.create(name="qwen3-32b-instruct")
    add_channel(upstream, "second", model=hidden)
    _key, scoped = issue_key(owner=alice, name="scoped", allowed_models=[setup.model])
    for key in (setup.plaintext, scoped):
        auth = {"Authorization": f"Bearer {key}"}
        for answer in (
            post(gateway_url, key, body={**CHAT, "model": "qwen-32b"}),
            post(gateway_url, key, body={"model": "qwen-32b", "input": "hi"}, path="/v1/responses"),
            httpx.get(gateway_url + "/v1/models/qwen-32b", headers=auth, timeout=10),
        ):
            err = assert_openai_error(answer, 404, "model_not_found")
            assert "Did you mean 'qwen3-32b'?" in err["message"]
    # The key that may use the other model is pointed at it; the scoped key is not told it exists.
    almost = {**CHAT, "model": "qwen3-32b-instrct"}
    err = assert_openai_error(post(gateway_url, setup.plaintext, body=almost), 404, "model_not_found")
    assert "Did you mean 'qwen3-32b-instruct'?" in err["message"]
    err = assert_openai_error(post(gateway_url, scoped, body=almost), 404, "model_not_found")
    assert "Did you mean 'qwen3-32b'?" in err["message"] and "qwen3-32b-instruct" not in err["message"]


def test_disabled_model_is_404(setup, gateway_url):
    setup.model.enabled = False
    setup.model.save()
    assert_openai_error(post(gateway_url, setup.plaintext), 404, "model_not_found")


def test_model_without_channel_is_503(setup, gateway_url):
    setup.channel.enabled = False
    setup.channel.save()
    assert_openai_error(post(gateway_url, setup.plaintext), 503, "no_channel")


def test_ip_outside_allowlist_is_403(setup, gateway_url):
    setup.key.ip_allowlist = ["10.0.0.0/8"]
    setup.key.save()
    assert_openai_error(post(gateway_url, setup.plaintext), 403, "ip_not_allowed")
    setup.key.ip_allowlist = ["10.0.0.0/8", "127.0.0.0/8"]  # a 403 before the model: no usage record
    setup.key.save()
    assert post(gateway_url, setup.plaintext).status_code == 200


@pytest.mark.parametrize("path", ["/v1/v1/chat/completions", "/chat/completions", "/v1/chat/completions/"])
def test_doubled_and_missing_v1_prefix_work(setup, gateway_url, path):
    r = post(gateway_url, setup.plaintext, path=path)
    assert r.status_code == 200 and r.json()["choices"]


def test_unknown_gateway_path_is_json_404_naming_the_base_url(setup, gateway_url, settings):
    r = httpx.get(gateway_url + "/v1/chat/complete", headers={"Authorization": f"Bearer {setup.plaintext}"})
    err = assert_openai_error(r, 404, "unknown_path")
    assert f"{gateway_url}/v1" in err["message"]
    settings.PORTAL_PUBLIC_URL = "https://llm.example.com"
    err = assert_openai_error(httpx.get(gateway_url + "/v1/nope"), 404, "unknown_path")
    assert "https://llm.example.com/v1" in err["message"]


def test_wrong_method_is_405_and_says_which_methods_the_path_takes(setup, gateway_url):
    r = httpx.get(gateway_url + "/v1/chat/completions")
    err = assert_openai_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "OPTIONS, POST" and "use OPTIONS, POST" in err["message"]
    r = httpx.post(gateway_url + "/v1/models/qwen3-32b", json={})  # a model's own path (was a 404)
    assert_openai_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET, HEAD, OPTIONS"


def test_the_gateways_own_404_405_and_options_answers_carry_a_request_id(setup, gateway_url):
    """Regression (probe): the answers made before any handler ran had no `x-request-id`."""
    answers = [
        httpx.post(gateway_url + "/v1/chatt/completions", json={}),
        httpx.get(gateway_url + "/v1/chat/completions"),
        httpx.options(gateway_url + "/v1/chat/completions"),
    ]
    assert [r.status_code for r in answers] == [404, 405, 204]
    ids = [r.headers.get("x-request-id") for r in answers]
    assert all(ids) and len(set(ids)) == 3, ids


def raw_head(url: str, path: str, key: str) -> bytes:
    """Everything the server sends for a HEAD request (httpx would not read a body if one came)."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
        sock.sendall(
            f"HEAD {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n".encode()
        )
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


@pytest.mark.parametrize("path", ["/v1/models", "/v1/models/qwen3-32b", "/healthz", "/readyz"])
def test_head_answers_as_get_without_the_body(setup, gateway_url, path):
    auth = {"Authorization": f"Bearer {setup.plaintext}"}
    get = httpx.get(gateway_url + path, headers=auth, timeout=10)
    head = httpx.head(gateway_url + path, headers=auth, timeout=10)
    assert get.status_code == head.status_code == 200, head.headers
    assert head.headers["content-type"] == get.headers["content-type"]
    assert int(head.headers["content-length"]) > 0 and head.content == b""
    if path != "/readyz":  # (its answer says how old things are: the length may move between the two)
        assert head.headers["content-length"] == str(len(get.content))
    answer = raw_head(gateway_url, path, setup.plaintext)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n")  # headers, nothing after


def test_head_is_refused_as_get_is(setup, gateway_url):
    missing = httpx.head(
        gateway_url + "/v1/models/no-such-model", headers={"Authorization": f"Bearer {setup.plaintext}"}
    )
    assert missing.status_code == 404 and missing.content == b""
    assert httpx.head(gateway_url + "/v1/models").status_code == 401  # no key, as GET


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/v1/chat/completions", "OPTIONS, POST"),
        ("/v1/models", "GET, HEAD, OPTIONS"),
        ("/v1/models/qwen3-32b", "GET, HEAD, OPTIONS"),
        ("/v1/responses", "GET, HEAD, OPTIONS, POST"),
        ("/chat/completions", "OPTIONS, POST"),
        ("/healthz", "GET, HEAD, OPTIONS"),
    ],
)
def test_options_says_which_methods_a_path_takes(setup, gateway_url, path, allow):
    r = httpx.options(gateway_url + path, headers={"Origin": "https://elsewhere.example"})
    assert r.status_code == 204 and r.content == b""
    assert r.headers["allow"] == allow
    assert not [h for h in r.headers if h.startswith("access-control-")]  # no CORS policy is invented


def test_options_on_an_unknown_gateway_path_is_404(setup, gateway_url):
    assert_openai_error(httpx.options(gateway_url + "/v1/nope"), 404, "unknown_path")


def test_invalid_json_and_missing_model_are_400(setup, gateway_url):
    r = httpx.post(
        gateway_url + "/v1/chat/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {setup.plaintext}", "content-type": "application/json"},
    )
    assert_openai_error(r, 400, "invalid_json")
    assert_openai_error(post(gateway_url, setup.plaintext, body={"messages": []}), 400, "model_required")
    assert_openai_error(post(gateway_url, setup.plaintext, body={**CHAT, "max_tokens": -1}), 400, "invalid_value")


def test_upstream_client_error_passes_through_as_is(setup, gateway_url, upstream):
    upstream.behave(mode="status", status=400, error_type="BadRequestError", error_message="n must be at most 8")
    r = post(gateway_url, setup.plaintext, body={**CHAT, "n": 9})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": "n must be at most 8", "type": "BadRequestError", "code": 400}


def test_llamacpps_refusal_of_a_prompt_past_its_window_is_openais_code(setup, gateway_url, upstream):
    upstream.max_model_len = 3  # the fake answers as llama.cpp does: `exceed_context_size_error` with its figures
    r = post(gateway_url, setup.plaintext, body={**CHAT, "messages": [{"role": "user", "content": "a b c d e"}]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["type"]) == ("context_length_exceeded", "invalid_request_error")
    assert error["message"].startswith("This model's maximum context length is 3 tokens; the prompt is ")


def test_non_gateway_paths_still_reach_django(setup, gateway_url):
    r = httpx.get(gateway_url + "/api/keys/", timeout=30)
    assert r.status_code in (401, 403) and r.headers["content-type"].startswith("application/json")


def test_unreachable_redis_is_a_503_not_a_500(setup, transactional_db, settings):
    import socket

    from tests.gateway.conftest import ThreadServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{dead}/0"
    server = ThreadServer().start()
    try:
        r = post(server.url, setup.plaintext)
    finally:
        server.stop()
    assert_openai_error(r, 503, "limiter_unavailable")
    assert r.headers["retry-after"] == "2"


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(setup, gateway_url, settings):
    """The test client (127.0.0.1) is no trusted proxy here: its X-Forwarded-For is not believed."""
    settings.PORTAL_TRUSTED_PROXIES = ["192.0.2.1"]
    setup.key.ip_allowlist = ["10.0.0.0/8"]
    setup.key.save()
    forged = {"X-Forwarded-For": "10.1.1.1"}
    assert_openai_error(post(gateway_url, setup.plaintext, headers=forged), 403, "ip_not_allowed")


def test_behind_a_trusted_proxy_the_right_most_untrusted_address_counts(setup, gateway_url, settings):
    settings.PORTAL_TRUSTED_PROXIES = ["127.0.0.1"]
    setup.key.ip_allowlist = ["10.0.0.0/8"]
    setup.key.save()
    assert post(gateway_url, setup.plaintext, headers={"X-Forwarded-For": "10.1.1.1"}).status_code == 200
    # The client put 10.1.1.1 in front itself; the proxy appended the address it really saw.
    spoofed = {"X-Forwarded-For": "10.1.1.1, 203.0.113.5"}
    err = assert_openai_error(post(gateway_url, setup.plaintext, headers=spoofed), 403, "ip_not_allowed")
    assert "203.0.113.5" in err["message"]


def test_a_deeply_nested_body_is_an_openai_shaped_400(setup, gateway_url):
    deep: object = "x"
    for _ in range(200):
        deep = [deep]
    body = {**CHAT, "metadata": deep}
    assert_openai_error(post(gateway_url, setup.plaintext, body=body), 400, "invalid_json")


def test_a_body_nested_to_the_limit_is_answered_and_one_level_deeper_is_a_400(setup, gateway_url):
    from gateway.http import GATEWAY_MAX_DEPTH

    def nested(levels: int) -> dict:
        deep: object = "[[{{ brackets in a string are no level"
        for _ in range(levels):
            deep = [deep]
        return {**CHAT, "metadata": deep}  # the body's own object is the first level

    assert post(gateway_url, setup.plaintext, body=nested(GATEWAY_MAX_DEPTH - 1)).status_code == 200
    assert_openai_error(post(gateway_url, setup.plaintext, body=nested(GATEWAY_MAX_DEPTH)), 400, "invalid_json")


async def test_a_client_that_leaves_before_its_body_is_sent_is_no_exception():
    """The body's first piece, then the client is gone: the handler ends as for any client that
    left (nothing sent: nobody to read it), not with an exception the server logs with a traceback."""
    from gateway.asgi import handle
    from gateway.surfaces import chat

    messages = iter([{"type": "http.request", "body": b'{"model"', "more_body": True}, {"type": "http.disconnect"}])
    sent: list[dict] = []

    async def receive() -> dict:
        return next(messages)

    async def send(message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [], "client": None}
    req, call = await handle(chat.chat_completions, scope, receive, send, "/chat/completions")
    assert sent == [] and call is None and not req.answered
