"""The official openai SDK against the real gateway (uvicorn) in front of a fake upstream."""

from __future__ import annotations

import openai
import pytest

from keys.models import UsageRecord
from tests.gateway.conftest import UPSTREAM_KEY, wait_for


@pytest.fixture
def client(setup, gateway_url):
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)


def test_chat_completion_reaches_the_upstream_with_the_channel_key_and_upstream_model(setup, gateway_url, upstream):
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    reply = client.chat.completions.create(
        model="qwen3-32b", messages=[{"role": "user", "content": "hello there"}], max_tokens=3
    )
    assert reply.choices[0].message.content == "tok0 tok1 tok2"
    assert reply.usage.prompt_tokens == 2 and reply.usage.completion_tokens == 3
    sent = upstream.requests[-1]
    assert sent.json["model"] == "fake-model"
    assert reply.model == "qwen3-32b"  # the name asked for, not the upstream's id (`relay.model_renames`)
    assert sent.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert setup.plaintext not in str(sent.headers)


def test_usage_record_is_written_with_exact_tokens(setup, client):
    client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "one two three"}])
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert (record.prompt_tokens, record.completion_tokens, record.total_tokens) == (3, 5, 8)
    assert record.estimated is False
    assert record.user_id == setup.key.owner_id
    assert record.channel_id == setup.channel.id
    assert record.model == "qwen3-32b" and record.status == "ok" and record.http_status == 200
    assert record.latency_ms is not None and record.latency_ms > 0
    setup.key.refresh_from_db()
    wait_for(lambda: type(setup.key).objects.get(pk=setup.key.pk).last_used_at)


def test_streaming_chat_relays_every_chunk_and_hides_the_usage_chunk_it_added(setup, client, upstream):
    stream = client.chat.completions.create(
        model="qwen3-32b", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 tok3 tok4"
    assert all(c.usage is None for c in chunks)
    assert {c.model for c in chunks} == {"qwen3-32b"}  # (the fake writes `"model": "fake-model"`, with a space)
    assert upstream.requests[-1].json["stream_options"] == {"include_usage": True}
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert (record.prompt_tokens, record.completion_tokens, record.estimated) == (1, 5, False)
    assert record.stream is True and record.ttft_ms is not None


def test_streaming_chat_passes_the_usage_chunk_to_a_client_that_asked(client):
    stream = client.chat.completions.create(
        model="qwen3-32b",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert {c.model for c in chunks} == {"qwen3-32b"}


async def test_async_client_chat_and_stream(setup, gateway_url):
    client = openai.AsyncOpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    reply = await client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "a b"}])
    assert reply.choices[0].message.content.startswith("tok0")
    stream = await client.chat.completions.create(
        model="qwen3-32b", messages=[{"role": "user", "content": "a b"}], stream=True
    )
    pieces = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == "tok0 tok1 tok2 tok3 tok4"
    await client.close()


def test_embeddings(setup, client):
    result = client.embeddings.create(model="qwen3-32b", input=["one two", "three"])
    assert len(result.data) == 2 and result.usage.prompt_tokens == 3 and result.model == "qwen3-32b"
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key, surface="embeddings").first())
    assert record.prompt_tokens == 3 and record.completion_tokens == 0


def test_legacy_completions_stream_and_not(client):
    reply = client.completions.create(model="qwen3-32b", prompt="say something", max_tokens=2)
    assert reply.choices[0].text == "tok0 tok1" and reply.model == "qwen3-32b"
    chunks = list(client.completions.create(model="qwen3-32b", prompt="x", stream=True))
    pieces = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(pieces).split() == ["tok0", "tok1", "tok2", "tok3", "tok4"]
    assert {c.model for c in chunks} == {"qwen3-32b"}


def test_models_list_shows_only_usable_models_with_limits(setup, client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == ["qwen3-32b"]
    entry = models.data[0].model_dump()
    assert entry["max_model_len"] == 8192 and entry["context_window"] == 8192
    assert entry["max_output_tokens"] == 2048
    one = client.models.retrieve("qwen3-32b")
    assert one.id == "qwen3-32b"
