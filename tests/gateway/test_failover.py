"""Failover before the first byte only, streams that break, client disconnects, header hygiene."""

from __future__ import annotations

import socket
import time

import httpx
import openai
import pytest

from channels.health import passive
from keys.models import UsageRecord
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import UPSTREAM_KEY, add_channel, retry_locked, wait_for

CHAT = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def backup(setup):
    """A second, lower-priority channel for the same model on its own fake upstream."""
    with FakeUpstream(api_key=UPSTREAM_KEY) as up:
        channel, _ = add_channel(up, "backup", priority=-10, model=setup.model)
        up.channel = channel
        yield up


def auth(setup) -> dict:
    return {"Authorization": f"Bearer {setup.plaintext}"}


def sse_events(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize(
    "failure",
    [{"mode": "status", "status": 500}, {"mode": "status", "status": 429}, {"mode": "status", "status": 503}],
)
def test_it_fails_over_on_429_and_5xx(setup, gateway_url, upstream, backup, failure):
    retry_locked(passive.collect)  # start from an empty health window
    upstream.behave(**failure)
    r = httpx.post(gateway_url + "/v1/chat/completions", json=CHAT, headers=auth(setup))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].startswith("tok0")
    assert len(upstream.requests) == 1 and len(backup.requests) == 1
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.channel_id == backup.channel.id
    # What the health checks fold into each channel's window (collected once the usage writer
    # is idle: in-memory SQLite cannot run two write transactions side by side).
    tallies = passive.collect()
    failed, served = tallies[setup.channel.id], tallies[backup.channel.id]
    assert (failed.fail_count, failed.ok_count, failed.last_status) == (1, 0, failure["status"])
    assert (served.ok_count, served.fail_count) == (1, 0)


def test_it_fails_over_on_connection_refused(setup, gateway_url, backup):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    setup.channel.base_url = f"http://127.0.0.1:{dead_port}/v1"
    setup.channel.save()
    r = httpx.post(gateway_url + "/v1/chat/completions", json=CHAT, headers=auth(setup))
    assert r.status_code == 200 and len(backup.requests) == 1


def test_it_fails_over_when_the_stream_breaks_before_the_first_byte(setup, gateway_url, upstream, backup):
    upstream.behave(mode="disconnect", disconnect_after=0)
    with httpx.stream(
        "POST", gateway_url + "/v1/chat/completions", json={**CHAT, "stream": True}, headers=auth(setup)
    ) as r:
        events = sse_events(r.read().decode())
    assert events[-1] == "[DONE]" and len(backup.requests) == 1


def test_all_channels_failing_gives_an_openai_error(setup, gateway_url, upstream, backup):
    upstream.behave(mode="status", status=500)
    backup.behave(mode="status", status=502)
    r = httpx.post(gateway_url + "/v1/chat/completions", json=CHAT, headers=auth(setup))
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.status == "upstream_error" and record.total_tokens == 0


def test_no_failover_after_the_first_byte_the_client_gets_an_error_event(setup, gateway_url, upstream, backup):
    upstream.behave(mode="disconnect", disconnect_after=3)
    with httpx.stream(
        "POST", gateway_url + "/v1/chat/completions", json={**CHAT, "stream": True}, headers=auth(setup)
    ) as r:
        assert r.status_code == 200
        events = sse_events(r.read().decode())
    assert len(backup.requests) == 0
    assert '"upstream_stream_error"' in events[-2] and events[-1] == "[DONE]"
    relayed = sum("tok" in e for e in events)
    assert 1 <= relayed <= 2  # what was in flight when the connection died may be lost
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.status == "upstream_error" and record.estimated
    assert record.completion_tokens == relayed and record.prompt_tokens >= 1


def test_it_fails_over_on_timeout_before_the_first_byte(setup, transactional_db, upstream, backup, settings):
    from tests.gateway.conftest import ThreadServer

    settings.GATEWAY_IDLE_TIMEOUT = 0.5  # the answer is assembled from a stream: its idle gap
    upstream.behave(mode="stall")
    server = ThreadServer().start()
    try:
        r = httpx.post(server.url + "/v1/chat/completions", json=CHAT, headers=auth(setup), timeout=10)
    finally:
        server.stop()
    assert r.status_code == 200 and len(backup.requests) == 1


def test_client_disconnect_cancels_upstream_and_records_what_was_generated(setup, gateway_url, upstream):
    upstream.behave(tokens=200, token_delay=0.02)
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    stream = client.chat.completions.create(model="qwen3-32b", messages=CHAT["messages"], stream=True)
    seen = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            seen += 1
        if seen == 3:
            break
    stream.close()
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.status == "client_disconnected" and record.estimated
    assert 3 <= record.completion_tokens < 200
    wait_for(lambda: upstream.open_streams == 0, timeout=5)


def test_upstream_omitting_usage_is_counted_locally_and_marked_estimated(setup, gateway_url, upstream):
    upstream.behave(mode="omit_usage", tokens=4)
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    client.chat.completions.create(model="qwen3-32b", messages=CHAT["messages"])
    list(client.chat.completions.create(model="qwen3-32b", messages=CHAT["messages"], stream=True))
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() == 2)
    for record in UsageRecord.objects.filter(key=setup.key):
        assert record.estimated and record.completion_tokens > 0 and record.prompt_tokens > 0
    streamed = UsageRecord.objects.get(key=setup.key, stream=True)
    assert streamed.completion_tokens == 4


LONG_PROMPT = " ".join(f"w{i % 9}" for i in range(600))  # 600 tokens by the fake's tokenizer (words)


@pytest.mark.parametrize("stream", [False, True])
def test_usage_an_upstream_omits_is_counted_by_its_own_tokenizer(setup, gateway_url, upstream, stream):
    """The fake counts tokens as words, in its usage and in /tokenize; with usage omitted the gateway
    asks /tokenize (vLLM and llama.cpp have it) and lands within 5 % of what the fake would have
    reported. The 4-characters-a-token estimate it replaces is 25 % low on this text."""
    messages = [{"role": "user", "content": LONG_PROMPT}]
    upstream.behave(tokens=7)
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    client.chat.completions.create(model="qwen3-32b", messages=messages)
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() == 1)
    reported = UsageRecord.objects.get(key=setup.key)
    assert not reported.estimated and reported.prompt_tokens == 600  # the fake's own count

    upstream.behave(mode="omit_usage", tokens=7)
    if stream:
        list(client.chat.completions.create(model="qwen3-32b", messages=messages, stream=True))
    else:
        client.chat.completions.create(model="qwen3-32b", messages=messages)
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() == 2)
    counted = UsageRecord.objects.filter(key=setup.key).latest("created")
    assert counted.estimated  # not reported by the upstream, and on the record as such
    assert abs(counted.prompt_tokens - 600) <= 0.05 * 600, counted.prompt_tokens
    assert abs(-(-len(LONG_PROMPT) // 4) - 600) > 0.05 * 600  # what the character estimate says
    assert counted.completion_tokens == 7  # "tok0 … tok6": events when streamed, /tokenize otherwise
    assert any(r.path.endswith("/tokenize") for r in upstream.requests)


@pytest.mark.parametrize("surface", ["embeddings", "completions", "completions-stream"])
def test_usage_omitted_on_embeddings_and_completions_is_counted_from_their_input(setup, gateway_url, upstream, surface):
    """Regression (probe): the recount read only Chat's `messages`, so an embedding's `input` and a
    legacy completion's `prompt` were tokenized as "" and recorded as 0 prompt tokens (free)."""
    upstream.behave(mode="omit_usage", tokens=7)
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    if surface == "embeddings":
        usage = client.embeddings.create(model="qwen3-32b", input=LONG_PROMPT).usage
    elif surface == "completions":
        usage = client.completions.create(model="qwen3-32b", prompt=LONG_PROMPT, max_tokens=7).usage
    else:
        chunks = client.completions.create(
            model="qwen3-32b", prompt=LONG_PROMPT, max_tokens=7, stream=True, stream_options={"include_usage": True}
        )
        usage = [c.usage for c in chunks if c.usage][-1]
    assert abs(usage.prompt_tokens - 600) <= 0.05 * 600, usage
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.estimated and abs(record.prompt_tokens - 600) <= 0.05 * 600, record.prompt_tokens
    assert next(r.json["prompt"] for r in upstream.requests if r.path.endswith("/tokenize")) == LONG_PROMPT


def test_a_stray_field_of_the_wrong_shape_does_not_break_the_recount(setup, gateway_url, upstream):
    """`messages` on an embeddings request is not ours to check; the recount skips what it cannot read."""
    upstream.behave(mode="omit_usage")
    r = httpx.post(
        gateway_url + "/v1/embeddings",
        json={"model": "qwen3-32b", "input": "a b", "messages": "x"},
        headers=auth(setup),
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] >= 2


def test_header_hygiene(setup, gateway_url, upstream):
    r = httpx.post(
        gateway_url + "/v1/chat/completions",
        json=CHAT,
        headers={
            **auth(setup),
            "x-api-key": setup.plaintext,
            "Cookie": "sessionid=secret-session",
            "Proxy-Authorization": "Basic abc",
            "OpenAI-Organization": "org-123",
            "X-Trace-Id": "trace-42",
            "Connection": "keep-alive",
            # the key again in other providers' credential headers; the portal's own headers
            "x-goog-api-key": setup.plaintext,
            "Ocp-Apim-Subscription-Key": setup.plaintext,
            "X-Auth-Token": setup.plaintext,
            "X-Portal-Debug": "route",
            "Idempotency-Key": "retry-7",
        },
    )
    assert r.status_code == 200
    sent = {k.lower(): v for k, v in upstream.requests[-1].headers.items()}
    assert sent["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert sent["x-trace-id"] == "trace-42" and sent["idempotency-key"] == "retry-7"
    for name in ("x-api-key", "cookie", "proxy-authorization", "openai-organization", "x-goog-api-key"):
        assert name not in sent
    assert not [name for name in sent if name.startswith("x-portal-") or name.endswith("subscription-key")]
    assert setup.plaintext not in str(sent)
    assert sent["host"].startswith("127.0.0.1:")  # the upstream's own host, not ours


def test_streams_are_relayed_without_buffering(setup, gateway_url, upstream):
    # The upstream spaces 6 tokens 0.2 s apart. Relayed chunk by chunk, tok0 reaches the client about
    # a second before the stream ends; buffered, both happen at once. Relative, so load can't flake it.
    upstream.behave(tokens=6, token_delay=0.2)
    started = time.monotonic()
    with httpx.stream(
        "POST", gateway_url + "/v1/chat/completions", json={**CHAT, "stream": True}, headers=auth(setup)
    ) as r:
        first = None
        for line in r.iter_lines():
            if first is None and '"tok0"' in line:
                first = time.monotonic() - started
    total = time.monotonic() - started
    assert first is not None and total - first >= 0.8, (first, total)


@pytest.mark.parametrize("stream", [False, True])
def test_a_route_whose_model_the_server_does_not_serve_fails_over_without_harming_the_channel(
    setup, gateway_url, backup, stream
):
    """vLLM answers 404 for a model id it does not serve (the route's typo, a server started with
    another name): that answer went to the client, half of the requests failed while the other
    channel served the model. Now the next channel answers, and the first one's health is not
    counted against it (its other models answer)."""
    with FakeUpstream(api_key=UPSTREAM_KEY, models=["Qwen/Qwen3-32B"], strict_models=True) as strict:
        setup.channel.base_url = strict.base_url
        setup.channel.save()
        retry_locked(passive.collect)
        client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
        reply = client.chat.completions.create(**CHAT, stream=stream, max_tokens=4)
        text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices) if stream else None
        assert (text if stream else reply.choices[0].message.content).startswith("tok0")
        assert [r.path for r in strict.requests] == ["/v1/chat/completions"] and len(backup.requests) == 1
        record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
        assert record.channel_id == backup.channel.id
        assert "failover after 404 from primary" in record.route_explanation
        tallies = passive.collect()
        assert setup.channel.id not in tallies and tallies[backup.channel.id].ok_count == 1

        backup.channel.delete()  # the only route left is the one the server does not serve
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(**CHAT, stream=stream, max_tokens=4)
        error = caught.value.body
        assert error["code"] == "upstream_not_found" and "`fake-model` does not exist" in error["message"]


def test_a_llamacpp_router_without_the_model_fails_over_as_a_404_does(setup, gateway_url, upstream, backup):
    """llama.cpp's router mode refuses a model it does not have with a 400 (ggml-org/llama.cpp#17968),
    which went to the client although another channel served the model."""
    setup.channel.kind = "llamacpp"
    setup.channel.save()
    retry_locked(passive.collect)
    upstream.behave(mode="status", status=400, error_type="invalid_request_error", error_message="model not found")
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    reply = client.chat.completions.create(**CHAT, max_tokens=4)
    assert reply.choices[0].message.content.startswith("tok0")
    assert len(upstream.requests) == 1 and len(backup.requests) == 1
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.channel_id == backup.channel.id
    assert "failover after 400 from primary" in record.route_explanation
    assert setup.channel.id not in passive.collect()

    backup.channel.delete()
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(**CHAT, max_tokens=4)
    assert caught.value.body["code"] == "upstream_not_found"

    upstream.behave(mode="status", status=400, error_type="invalid_request_error", error_message="bad grammar")
    with pytest.raises(openai.BadRequestError) as caught:  # any other 400 is the request's, as it was
        client.chat.completions.create(**CHAT, max_tokens=4)
    assert caught.value.body["message"] == "bad grammar"


@pytest.mark.parametrize(
    ("status", "words", "spared"),
    [
        (501, "This server does not support embeddings. Start it with `--embeddings`", True),
        (500, "tools param requires --jinja flag", True),
        (500, "image input is not supported - hint: you may need to provide the mmproj", True),
        (500, "upstream failure", False),  # a failure: counted against the channel, as before
    ],
)
def test_a_request_a_llamacpp_server_was_not_started_for_fails_over_and_spares_its_health(
    setup, gateway_url, upstream, backup, status, words, spared
):
    """llama.cpp answers a request it was not started for (no `--jinja`, `--mmproj`, `--embeddings`)
    with a 500 or 501: another channel of the model may take it, and the server is well."""
    setup.channel.kind = "llamacpp"
    setup.channel.save()
    retry_locked(passive.collect)
    upstream.behave(mode="status", status=status, error_type="server_error", error_message=words)
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    assert client.chat.completions.create(**CHAT, max_tokens=4).choices[0].message.content.startswith("tok0")
    assert len(upstream.requests) == 1 and len(backup.requests) == 1
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.channel_id == backup.channel.id
    assert f"failover after {status} from primary" in record.route_explanation
    assert (setup.channel.id in passive.collect()) is not spared

    backup.channel.delete()  # alone: a 400 in the server's words, which no SDK retries
    if spared:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(**CHAT, max_tokens=4)
        assert caught.value.body["code"] == "unsupported_by_upstream" and words in caught.value.body["message"]
    else:
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(**CHAT, max_tokens=4)
