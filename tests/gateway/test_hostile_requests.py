"""Hostile and sloppy requests on every gateway surface: each gets a 4xx in its API's own error
shape (Anthropic's on `/v1/messages…`, OpenAI's elsewhere), never a 5xx, a traceback or an HTML
page, and what the gateway cannot take is refused rather than misread. Real uvicorn in front of
a fake upstream on 127.0.0.1, raw bytes where a client library would clean the request up."""

from __future__ import annotations

import gzip
import socket
from collections.abc import Callable

import httpx
import orjson
import pytest

pytestmark = [pytest.mark.slow]

USER = [{"role": "user", "content": "hi"}]
GOOD = {
    "/v1/chat/completions": {"model": "qwen3-32b", "messages": USER, "max_tokens": 5},
    "/v1/completions": {"model": "qwen3-32b", "prompt": "hi", "max_tokens": 5},
    "/v1/embeddings": {"model": "qwen3-32b", "input": "hi"},
    "/v1/responses": {"model": "qwen3-32b", "input": "hi", "max_output_tokens": 5},
    "/v1/messages": {"model": "qwen3-32b", "messages": USER, "max_tokens": 5},
    "/v1/messages/count_tokens": {"model": "qwen3-32b", "messages": USER},
}
GENERATING = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"]


def post(url: str, key: str, path: str, *, body=None, content: bytes | None = None, headers=None) -> httpx.Response:
    hdrs = {"Authorization": f"Bearer {key}", **(headers or {})}
    if content is None:
        content = orjson.dumps(body)
        hdrs.setdefault("Content-Type", "application/json")
    return httpx.post(url + path, content=content, headers=hdrs, timeout=30)


def assert_refused(r: httpx.Response, path: str, status: int = 400) -> str:
    """A refusal in the surface's own shape; returns its message."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    data = r.json()
    if path.startswith("/v1/messages"):
        assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error", data
        return data["error"]["message"]
    assert set(data["error"]) == {"message", "type", "code", "param"}, data
    return data["error"]["message"]


def with_raw(good: dict, tail: bytes) -> bytes:
    """The good body with `tail` (raw JSON members, maybe invalid) added at its end."""
    return orjson.dumps(good)[:-1] + b"," + tail + b"}"


HOSTILE_BODIES: list[tuple[str, Callable[[dict], bytes]]] = [
    ("invalid UTF-8", lambda good: b'{"model": "\xff\xfe", "messages": []}'),
    ("a JSON array", lambda good: b"[1, 2]"),
    ("a JSON string", lambda good: b'"hi"'),
    ("an empty body", lambda good: b""),
    ("1e400", lambda good: with_raw(good, b'"temperature": 1e400')),
    ("NaN", lambda good: with_raw(good, b'"temperature": NaN')),
    ("a model list (duplicate key)", lambda good: with_raw(good, b'"model": ["qwen3-32b"]')),
    ("a model object", lambda good: orjson.dumps({**good, "model": {"name": "qwen3-32b"}})),
    ("form data", lambda good: b"model=qwen3-32b&messages=hi"),
]

# Messages bodies whose blocks carry the wrong types where the translation to Chat reads them.
BAD_BLOCKS = {
    "image source as a string": [
        {"role": "user", "content": [{"type": "image", "source": "data:image/png;base64,AAAA"}]}
    ],
    "document source as a number": [{"role": "user", "content": [{"type": "document", "source": 1}]}],
    "text of a user block as a number": [{"role": "user", "content": [{"type": "text", "text": 7}]}],
    "text of an assistant block as null": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": None}]},
        {"role": "user", "content": "go on"},
    ],
    "text inside a tool result as null": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": None}]}],
        },
    ],
}


@pytest.mark.parametrize("path", list(GOOD))
def test_hostile_bodies_are_refused_in_the_surfaces_shape(setup, gateway_url, path):
    good = GOOD[path]
    for what, make in HOSTILE_BODIES:
        r = post(gateway_url, setup.plaintext, path, content=make(good), headers={"Content-Type": "application/json"})
        message = assert_refused(r, path)
        assert "Traceback" not in message, what
    assert post(gateway_url, setup.plaintext, path, body=good).status_code == 200


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("what", list(BAD_BLOCKS))
def test_a_messages_block_of_the_wrong_type_is_a_400_naming_the_message(setup, gateway_url, path, what):
    """The translation to Chat read these blocks' fields as dicts and strings: a 500."""
    body = {**GOOD[path], "messages": BAD_BLOCKS[what]}
    message = assert_refused(post(gateway_url, setup.plaintext, path, body=body), path)
    assert "messages[" in message


def test_a_system_text_block_of_the_wrong_type_is_a_400(setup, gateway_url):
    body = {**GOOD["/v1/messages"], "system": [{"type": "text", "text": ["be brief"]}]}
    message = assert_refused(post(gateway_url, setup.plaintext, "/v1/messages", body=body), "/v1/messages")
    assert "`system`" in message


@pytest.mark.parametrize("path", GENERATING)
@pytest.mark.parametrize("value", ["false", "yes", 1, 0, {}])
def test_a_stream_that_is_not_a_boolean_is_refused(setup, gateway_url, upstream, path, value):
    """`"false"` was true (a stream for a client that asked for none) and `{}` false."""
    r = post(gateway_url, setup.plaintext, path, body={**GOOD[path], "stream": value})
    assert "stream" in assert_refused(r, path)
    assert upstream.requests == []


@pytest.mark.parametrize("path", GENERATING)
def test_stream_false_and_null_answer_json(setup, gateway_url, path):
    for value in (False, None):
        r = post(gateway_url, setup.plaintext, path, body={**GOOD[path], "stream": value})
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json"), r.text


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"])
def test_the_clients_content_encoding_never_reaches_the_upstream(setup, gateway_url, upstream, path):
    """The upstream gets the gateway's own JSON of the body: a client's `Content-Encoding` went
    along with it, and the upstream failed to decompress plain JSON (a 502 for the client)."""
    r = post(gateway_url, setup.plaintext, path, body=GOOD[path], headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert upstream.requests and "content-encoding" not in {h.lower() for h in upstream.requests[-1].headers}


@pytest.mark.parametrize("path", list(GOOD))
def test_a_compressed_body_is_a_415_saying_so(setup, gateway_url, upstream, path):
    content = gzip.compress(orjson.dumps(GOOD[path]))
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    message = assert_refused(post(gateway_url, setup.plaintext, path, content=content, headers=headers), path, 415)
    assert "Content-Encoding 'gzip' is not supported" in message
    assert upstream.requests == []


@pytest.mark.parametrize(
    "path", ["//v1/chat/completions", "///v1/chat/completions", "//chat/completions", "/v1//chat/completions"]
)
def test_a_doubled_leading_slash_is_the_path_meant(setup, gateway_url, path):
    """A base URL ending in "/" joined with "/v1/…" (Django's HTML 404 page before), or a ".../v1/"
    base URL joined with "/chat/completions" (the gateway's 404 before)."""
    r = post(gateway_url, setup.plaintext, path, body=GOOD["/v1/chat/completions"])
    assert r.status_code == 200 and r.json()["object"] == "chat.completion", r.text
    # (a bare GET /models is the portal's, not the gateway's)
    models_path = {"//chat/completions": "/v1//models"}.get(path, path.replace("/chat/completions", "/models"))
    models = httpx.get(gateway_url + models_path, headers={"Authorization": f"Bearer {setup.plaintext}"}, timeout=30)
    assert [m["id"] for m in models.json()["data"]] == ["qwen3-32b"]


def test_an_mcp_path_with_another_method_is_a_json_405(setup, gateway_url):
    """PUT /mcp/<slug> went to Django (an HTML 404)."""
    r = httpx.put(gateway_url + "/mcp/tools", content=b"{}", headers={"Authorization": f"Bearer {setup.plaintext}"})
    assert r.status_code == 405 and r.headers["allow"] == "DELETE, GET, OPTIONS, POST"
    assert r.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("path", ["/mcp", "/mcp/", "/mcp//"])
def test_an_mcp_path_without_a_server_is_a_json_404_naming_what_is_missing(setup, gateway_url, path):
    """Django's HTML 404 page before."""
    headers = {"Authorization": f"Bearer {setup.plaintext}", "Accept": "application/json, text/event-stream"}
    r = httpx.post(gateway_url + path, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/json"), r.text
    assert "/mcp/<server>" in r.json()["error"]["message"]
    anonymous = httpx.post(gateway_url + path, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert anonymous.status_code == 401 and anonymous.json()["error"]["message"].startswith("Missing API key")


def test_a_base_url_typed_with_an_upper_case_v1_is_the_path_meant(setup, gateway_url):
    """Django's HTML 404 page before; a path under it that does not exist is the gateway's JSON 404."""
    r = post(gateway_url, setup.plaintext, "/V1/chat/completions", body=GOOD["/v1/chat/completions"])
    assert r.status_code == 200 and r.json()["object"] == "chat.completion", r.text
    missing = post(gateway_url, setup.plaintext, "/V1/chat/complete", body=GOOD["/v1/chat/completions"])
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_path", missing.text


def raw_request(url: str, head: bytes, body: bytes) -> bytes:
    """One request as raw bytes on its own connection; the whole answer (the server closes)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize(
    "auth, status",
    [
        (b"Authorization: BEARER    {key}   \r\n", 200),  # any case, any spacing
        (b"Authorization: Bearer\r\n", 401),
        (b"Authorization: Bearer \xd0\xba\xd0\xbb\xd1\x8e\xd1\x87\r\n", 401),  # UTF-8 bytes in the value
        (b"Authorization: Bearer {key}\r\nUser-Agent: \xc3\xa9\xe4\xb8\xad\r\n", 200),
        (b"Authorization: Bearer {key}\r\nAuthorization: Bearer {key}\r\n", 200),  # the same key twice
        # Two keys: which one pays was the last header's choice (a proxy adding its own, a client
        # sending two env variables' keys).
        (b"Authorization: Bearer {key}\r\nAuthorization: Bearer sk-portal-other\r\n", 400),
        (b"X-Api-Key: sk-portal-other\r\nx-api-key: {key}\r\n", 400),
    ],
)
def test_odd_authorization_headers(setup, gateway_url, auth, status):
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + auth.replace(b"{key}", setup.plaintext.encode())
    answer = raw_request(gateway_url, head, orjson.dumps(GOOD["/v1/chat/completions"]))
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:300]
    assert b"application/json" in answer.split(b"\r\n\r\n")[0]


@pytest.mark.parametrize("path", GENERATING)
@pytest.mark.parametrize("value", [2**31, 2**63 - 1, 2**64 - 1])
def test_a_max_tokens_past_any_model_is_a_400_that_costs_nothing(setup, gateway_url, path, value):
    """Past 2**63 the admission script's counters failed half-way: a 503 blaming Redis, and the
    request-per-minute slot it had taken already was kept, refusing the next request."""
    setup.key.requests_per_minute = 1
    setup.key.save()
    field = "max_output_tokens" if path == "/v1/responses" else "max_tokens"
    body = orjson.dumps(GOOD[path])[:-1] + b',"%s":%d}' % (field.encode(), value)  # (orjson: 64-bit ints)
    message = assert_refused(post(gateway_url, setup.plaintext, path, content=body), path)
    assert f"`{field}` must be an integer from" in message
    assert post(gateway_url, setup.plaintext, path, body=GOOD[path]).status_code == 200
