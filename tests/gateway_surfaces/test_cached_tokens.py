"""Cached prompt tokens end to end: a fake upstream reports prompt-cache hits the way vLLM,
llama.cpp, Anthropic and the Responses API do; the usage records and daily buckets carry them, and
every surface's answer (passed through or translated) reports them in its own fields, as the
official openai and anthropic SDKs parse them."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from gateway.native import MessagesReader
from gateway.usage import Usage
from keys.models import UsageDaily
from tests.gateway_surfaces.conftest import add_native_channel, record_for

PROMPT = "one two three four five six seven eight nine ten"  # 10 prompt tokens upstream


@pytest.fixture
def oai(setup, gateway_url):
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)


@pytest.fixture
def claude(setup, gateway_url):
    return anthropic.Anthropic(base_url=gateway_url, api_key=setup.plaintext, max_retries=0)


@pytest.fixture
def llamacpp(setup, upstream):
    """The test model's channel is a llama.cpp server: cache hits come as `timings.cache_n`."""
    upstream.flavour = "llamacpp"
    setup.channel.kind = "llamacpp"
    setup.channel.save()
    return upstream


def chat_stream_usage(oai: openai.OpenAI) -> openai.types.CompletionUsage:
    stream = oai.chat.completions.create(
        model="qwen3-32b",
        messages=[{"role": "user", "content": PROMPT}],
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [c.usage for c in stream if c.usage is not None]
    assert len(usage) == 1
    return usage[0]


def test_chat_from_vllm_passes_cached_tokens_through_and_records_them(setup, oai, upstream):
    upstream.behave(cached=8)
    answer = oai.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": PROMPT}])
    assert answer.usage.prompt_tokens == 10 and answer.usage.prompt_tokens_details.cached_tokens == 8
    assert chat_stream_usage(oai).prompt_tokens_details.cached_tokens == 8
    first, second = record_for(setup.key, 2)
    assert (first.prompt_tokens, first.cached_tokens, first.cache_creation_tokens, first.stream) == (10, 8, 0, False)
    assert (second.prompt_tokens, second.cached_tokens, second.stream) == (10, 8, True)
    (bucket,) = UsageDaily.objects.filter(key=setup.key)
    assert (bucket.prompt_tokens, bucket.cached_tokens, bucket.requests) == (20, 16, 2)


def test_chat_from_llamacpp_records_its_cache_n(setup, oai, llamacpp):
    llamacpp.behave(cached=6)
    oai.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": PROMPT}])
    chat_stream_usage(oai)
    first, second = record_for(setup.key, 2)
    assert (first.cached_tokens, second.cached_tokens) == (6, 6)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_messages_translated_from_llamacpp_report_cache_read_input_tokens(setup, claude, llamacpp, stream):
    llamacpp.behave(cached=6)
    kwargs = {"model": "qwen3-32b", "max_tokens": 50, "messages": [{"role": "user", "content": PROMPT}]}
    if stream:
        with claude.messages.stream(**kwargs) as s:
            usage = s.get_final_message().usage
    else:
        usage = claude.messages.create(**kwargs).usage
    # Anthropic's input_tokens excludes what was read from the cache.
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (4, 6, 0)
    (record,) = record_for(setup.key)
    assert (record.surface, record.prompt_tokens, record.cached_tokens, record.stream) == ("messages", 10, 6, stream)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_responses_translated_from_chat_report_input_tokens_details(setup, oai, upstream, stream):
    upstream.behave(cached=7)
    if stream:
        events = list(oai.responses.create(model="qwen3-32b", input=PROMPT, stream=True))
        usage = events[-1].response.usage
    else:
        usage = oai.responses.create(model="qwen3-32b", input=PROMPT).usage
    assert (usage.input_tokens, usage.input_tokens_details.cached_tokens) == (10, 7)
    (record,) = record_for(setup.key)
    assert (record.surface, record.cached_tokens, record.stream) == ("responses", 7, stream)


def test_anthropic_channel_gets_cache_control_untouched_and_its_cache_split_is_recorded(setup, claude, native_upstream):
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(cached=4, cache_write=2)
    system = [{"type": "text", "text": "a long system prompt", "cache_control": {"type": "ephemeral"}}]
    block = {"type": "text", "text": "a b c", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    messages = [{"role": "user", "content": [block]}]
    message = claude.messages.create(model="qwen3-32b", max_tokens=9, system=system, messages=messages)
    sent = native_upstream.requests[-1].json
    assert sent["system"] == system and sent["messages"] == messages
    usage = message.usage
    # 7 prompt tokens upstream: 1 uncached, 4 read from the cache, 2 written to it.
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (1, 4, 2)
    with claude.messages.stream(model="qwen3-32b", max_tokens=9, system=system, messages=messages) as s:
        assert s.get_final_message().usage.cache_read_input_tokens == 4
    first, second = record_for(setup.key, 2)
    for record in (first, second):
        assert (record.prompt_tokens, record.cached_tokens, record.cache_creation_tokens) == (7, 4, 2)
    assert second.stream is True


def test_responses_channel_reports_cached_tokens_as_is(setup, oai, native_upstream):
    add_native_channel(setup, native_upstream, kind="openai", speaks_responses=True)
    native_upstream.behave(cached=2)
    assert oai.responses.create(model="qwen3-32b", input="a b c").usage.input_tokens_details.cached_tokens == 2
    events = list(oai.responses.create(model="qwen3-32b", input="a b c", stream=True))
    assert events[-1].response.usage.input_tokens_details.cached_tokens == 2
    first, second = record_for(setup.key, 2)
    assert (first.prompt_tokens, first.cached_tokens, second.cached_tokens) == (3, 2, 2)


def test_an_anthropic_stream_keeps_the_cache_split_when_message_delta_repeats_part_of_it():
    reader = MessagesReader(None)
    start = {"input_tokens": 2, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 3, "output_tokens": 1}
    reader.read(json.dumps({"type": "message_start", "message": {"usage": start}}).encode())
    delta = {"output_tokens": 9, "input_tokens": 2, "cache_read_input_tokens": None}
    reader.read(json.dumps({"type": "message_delta", "usage": delta}).encode())
    assert reader.usage == Usage(10, 9, cached_tokens=5, cache_creation_tokens=3)
    reader.read(json.dumps({"type": "message_delta", "usage": {"output_tokens": 11}}).encode())
    assert reader.usage == Usage(10, 11, cached_tokens=5, cache_creation_tokens=3)


def test_responses_from_an_anthropic_channel_report_its_cache_writes(setup, oai, native_upstream):
    """Responses → Chat → Messages: the cache writes Anthropic reports reach the Responses usage
    (they were 0 there while Chat on the same channel and the record had them)."""
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(cached=4, cache_write=2)
    details = oai.responses.create(model="qwen3-32b", input=PROMPT).usage.model_dump()["input_tokens_details"]
    assert (details["cached_tokens"], details["cache_write_tokens"]) == (4, 2)
    events = list(oai.responses.create(model="qwen3-32b", input=PROMPT, stream=True))
    assert events[-1].response.usage.model_dump()["input_tokens_details"]["cache_write_tokens"] == 2


def test_a_translated_response_echoes_the_requests_metadata(setup, oai):
    response = oai.responses.create(model="qwen3-32b", input="a b c", metadata={"ticket": "T-42"}, user="ci")
    assert response.metadata == {"ticket": "T-42"} and response.user == "ci"
