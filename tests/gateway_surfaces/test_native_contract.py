"""Channels that speak the client's API (Anthropic Messages, OpenAI Responses) keep the gateway's
contract with real model servers (issue 24): a non-streaming answer is asked for as a stream and
assembled from it, so it is bounded by liveness rather than GATEWAY_HEADERS_TIMEOUT and keeps every
field of the upstream's own non-streaming answer; an answer cut at its reservation ends as a real
one does; a stream that stops before its last event is recorded as an error. The official
`anthropic` and `openai` SDKs as clients, the real gateway, fakes that send a non-streaming
answer's headers only once it is generated."""

from __future__ import annotations

import re
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.gateway_surfaces.conftest import add_native_channel, record_for, wait_for

pytestmark = [pytest.mark.slow]

ASK = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "one two three four"}]}
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}},
    }
]
VOLATILE = {"id", "signature", "model", "created_at", "call_id"}  # differ between any two answers


def shape(value: Any) -> Any:
    """An answer with the values that differ between two answers (ids, signatures, times) masked."""
    if isinstance(value, dict):
        return {k: "*" if k in VOLATILE else shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return value


@pytest.fixture
def liveness(settings):
    """A headers deadline far below the fake's answer time: only liveness can let it through."""
    settings.GATEWAY_HEADERS_TIMEOUT = 1.0
    settings.GATEWAY_FIRST_TOKEN_TIMEOUT = 30.0
    settings.GATEWAY_IDLE_TIMEOUT = 30.0


@pytest.fixture
def claude(setup, gateway_url):
    return anthropic.Anthropic(base_url=gateway_url, api_key=setup.plaintext, max_retries=0, timeout=60)


@pytest.fixture
def oai(setup, gateway_url):
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0, timeout=60)


def direct(far_end, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The upstream's own non-streaming answer to `body`."""
    r = httpx.post(far_end.base_url + path, json={**body, "model": "native-model"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


# --- Anthropic Messages -----------------------------------------------------------------------


def test_a_slow_non_streaming_message_is_assembled_from_a_stream(setup, claude, native_upstream, liveness):
    """The fake answers a non-streaming request after 3 s (headers included), three times
    GATEWAY_HEADERS_TIMEOUT: asked for as a stream, it starts at once, and the assembled answer
    is the upstream's own non-streaming one, field for field."""
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(tokens=6, token_delay=0.5, cached=1, cache_write=1)
    ask = {**ASK, "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    started = time.monotonic()
    raw = claude.messages.with_raw_response.create(**ask)
    took = time.monotonic() - started
    message = raw.parse()
    assert took > 2.5  # longer than the headers deadline: it was not what bounded the call
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].signature.startswith("sig-")
    assert message.content[1].text == "tok0 tok1 tok2 tok3 tok4 tok5"
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens) == (2, 6)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (1, 1)
    assert native_upstream.requests[-1].json["stream"] is True
    native_upstream.behave(tokens=6, cached=1, cache_write=1)
    assert shape(raw.http_response.json()) == shape(direct(native_upstream, "/messages", ask))
    (record,) = record_for(setup.key)
    assert (record.status, record.stream, record.estimated) == ("ok", False, False)
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (4, 6, 1)
    assert record.cache_creation_tokens == 1
    assert record.ttft_ms is not None and record.ttft_ms < record.latency_ms


@pytest.mark.parametrize("stream", [False, True])
def test_a_message_without_max_tokens_gets_the_output_reserved_on_an_anthropic_channel(
    setup, gateway_url, native_upstream, stream
):
    """Regression (probe): a Messages request without max_tokens was answered on a Chat channel
    (the output reserved goes with the translation) and refused by an Anthropic one, whose API
    requires the field: it now carries what the gateway reserved there too."""
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(tokens=3)
    r = httpx.post(
        gateway_url + "/v1/messages",
        json={**ASK, "stream": stream},
        headers={"x-api-key": setup.plaintext, "anthropic-version": "2023-06-01"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert "tok2" in r.text
    sent = native_upstream.requests[-1].json["max_tokens"]
    assert isinstance(sent, int) and 0 < sent <= 4096


def test_a_non_streaming_tool_use_and_stop_sequence_keep_their_fields(setup, claude, native_upstream, liveness):
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(mode="tool_call")
    ask = {**ASK, "max_tokens": 200, "tools": TOOLS}
    raw = claude.messages.with_raw_response.create(**ask)
    message = raw.parse()
    assert message.stop_reason == "tool_use"
    (call,) = message.content
    assert (call.type, call.name, call.input) == ("tool_use", "get_weather", {"city": "Paris", "unit": "celsius"})
    assert shape(raw.http_response.json()) == shape(direct(native_upstream, "/messages", ask))

    native_upstream.behave()
    ask = {**ASK, "max_tokens": 200, "stop_sequences": ["tok3"]}
    raw = claude.messages.with_raw_response.create(**ask)
    message = raw.parse()
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "tok3")
    assert shape(raw.http_response.json()) == shape(direct(native_upstream, "/messages", ask))


@pytest.mark.parametrize("stream", [False, True])
def test_a_message_past_its_reservation_ends_at_max_tokens(setup, claude, native_upstream, stream):
    """An upstream that ignores max_tokens: cut at exactly 5 deltas, and the answer ends as
    Anthropic ends one at max_tokens (a stream: `message_delta` with that stop reason, then
    `message_stop`; no error event)."""
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(tokens=40, ignore_max_tokens=True)
    ask = {**ASK, "max_tokens": 5}
    if stream:
        with claude.messages.stream(**ask) as s:
            kinds = [event.type for event in s]
            message = s.get_final_message()
        assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
        assert "error" not in kinds
    else:
        message = claude.messages.create(**ask)
    assert message.content[0].text == "tok0 tok1 tok2 tok3 tok4 "
    assert (message.stop_reason, message.stop_sequence) == ("max_tokens", None)
    assert message.usage.output_tokens == 5
    (record,) = record_for(setup.key)
    assert record.status == "ok" and record.completion_tokens == 5 and record.estimated
    wait_for(lambda: native_upstream.open_streams == 0)  # the upstream was let go at the cut


@pytest.mark.parametrize("stream", [False, True])
def test_a_message_stream_that_ends_before_message_stop_is_an_error(setup, claude, native_upstream, stream):
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(mode="truncate", stall_after=2)
    with pytest.raises(anthropic.APIStatusError) as caught:
        if stream:
            with claude.messages.stream(**ASK, max_tokens=50) as s:
                s.get_final_message()
        else:
            claude.messages.create(**ASK, max_tokens=50)
    assert caught.value.body["type"] == "error"
    (record,) = record_for(setup.key)
    assert record.status == "upstream_error" and "truncated" in record.error, record.error


def test_a_non_streaming_message_that_stalls_names_the_idle_timeout(setup, claude, native_upstream, settings):
    settings.GATEWAY_HEADERS_TIMEOUT = 30.0
    settings.GATEWAY_IDLE_TIMEOUT = 1.0
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(mode="stall", stall_after=2)
    with pytest.raises(anthropic.APIStatusError) as caught:
        claude.messages.create(**ASK, max_tokens=50)
    assert caught.value.status_code == 504 and "GATEWAY_IDLE_TIMEOUT" in caught.value.body["error"]["message"]


def test_chat_on_an_anthropic_stream_that_ends_before_message_stop_is_an_error(setup, oai, native_upstream):
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(mode="truncate", stall_after=2)
    with pytest.raises(openai.APIError):
        for _ in oai.chat.completions.create(model="qwen3-32b", messages=ASK["messages"], stream=True):
            pass
    (record,) = record_for(setup.key)
    assert record.status == "upstream_error" and "truncated" in record.error, record.error


# --- OpenAI Responses -------------------------------------------------------------------------


def test_a_slow_non_streaming_response_is_assembled_from_a_stream(setup, oai, native_upstream, liveness):
    add_native_channel(setup, native_upstream, kind="openai", speaks_responses=True)
    native_upstream.behave(tokens=6, token_delay=0.5, reasoning="think it over", cached=1)
    ask = {"model": "qwen3-32b", "input": "one two three four"}
    started = time.monotonic()
    raw = oai.responses.with_raw_response.create(**ask)
    took = time.monotonic() - started
    response = raw.parse()
    assert took > 2.5
    assert [o.type for o in response.output] == ["reasoning", "message"]
    assert response.output[0].content[0].text == "think it over"
    assert response.output_text == "tok0 tok1 tok2 tok3 tok4 tok5" and response.status == "completed"
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.output_tokens_details.reasoning_tokens) == (4, 9, 3)
    assert usage.input_tokens_details.cached_tokens == 1
    assert native_upstream.requests[-1].json["stream"] is True
    native_upstream.behave(reasoning="think it over", cached=1, tokens=6)
    assert shape(raw.http_response.json()) == shape(direct(native_upstream, "/responses", ask))
    (record,) = record_for(setup.key)
    assert (record.status, record.stream, record.estimated) == ("ok", False, False)
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (4, 9, 1)
    assert record.ttft_ms is not None and record.ttft_ms < record.latency_ms

    native_upstream.behave(mode="tool_call")
    raw = oai.responses.with_raw_response.create(**ask)
    (call,) = raw.parse().output
    assert (call.type, call.name, call.arguments) == (
        "function_call",
        "get_weather",
        '{"city": "Paris", "unit": "celsius"}',
    )
    assert shape(raw.http_response.json()) == shape(direct(native_upstream, "/responses", ask))


@pytest.mark.parametrize("kind", ["anthropic", "responses"])
def test_a_long_native_answer_read_in_batches_is_the_upstreams_own(
    setup, native_upstream, gateway_url, unread_gaps, kind
):
    """300 tokens 3 ms apart: the gateway reads the rest of the stream in batches
    (`call._unread_for`), whose pieces cut Messages' and Responses' events anywhere; the assembled
    answer is still the upstream's own non-streaming one, field for field. (A guard.)"""
    if kind == "anthropic":
        add_native_channel(setup, native_upstream, kind="anthropic")
        path, ask = "/messages", {**ASK, "max_tokens": 1000}
        url, headers = gateway_url + "/v1/messages", {"x-api-key": setup.plaintext, "anthropic-version": "2023-06-01"}
    else:
        add_native_channel(setup, native_upstream, kind="openai", speaks_responses=True)
        path, ask = "/responses", {"model": "qwen3-32b", "input": "one two three four"}
        url, headers = gateway_url + "/v1/responses", {"Authorization": f"Bearer {setup.plaintext}"}
    native_upstream.behave(tokens=300, token_delay=0.003)
    r = httpx.post(url, json=ask, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    assert unread_gaps  # it was read in batches
    native_upstream.behave(tokens=300)
    assert shape(r.json()) == shape(direct(native_upstream, path, ask))
    assert " ".join(f"tok{i}" for i in range(300)) in r.text


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_past_its_reservation_is_incomplete_at_max_output_tokens(setup, oai, native_upstream, stream):
    add_native_channel(setup, native_upstream, kind="openai", speaks_responses=True)
    native_upstream.behave(tokens=40, ignore_max_tokens=True)
    ask = {"model": "qwen3-32b", "input": "one two", "max_output_tokens": 5}
    if stream:
        with oai.responses.stream(**ask) as s:
            events = list(s)
        kinds = [e.type for e in events]
        assert kinds[-4:] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete",
        ]
        assert "error" not in kinds and "response.failed" not in kinds
        numbers = [e.sequence_number for e in events]
        assert numbers == list(range(len(events)))
        response = events[-1].response
    else:
        response = oai.responses.create(**ask)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "tok0 tok1 tok2 tok3 tok4"
    assert response.output[0].status == "incomplete"
    assert response.usage.output_tokens == 5
    (record,) = record_for(setup.key)
    assert record.status == "ok" and record.completion_tokens == 5 and record.estimated
    wait_for(lambda: native_upstream.open_streams == 0)


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_stream_that_ends_before_response_completed_is_an_error(setup, oai, native_upstream, stream):
    add_native_channel(setup, native_upstream, kind="openai", speaks_responses=True)
    native_upstream.behave(mode="truncate", stall_after=2)
    ask = {"model": "qwen3-32b", "input": "one two"}
    if stream:
        events = list(oai.responses.create(**ask, stream=True))
        assert [e.type for e in events][-2:] == ["error", "response.failed"]
        assert events[-1].response.id == events[0].response.id  # our error ends the upstream's response
    else:
        with pytest.raises(openai.APIStatusError) as caught:
            oai.responses.create(**ask)
        assert caught.value.status_code == 502
    (record,) = record_for(setup.key)
    assert record.status == "upstream_error" and "truncated" in record.error, record.error


# --- the model's name ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("kind", "path", "ask"),
    [
        ("anthropic", "/v1/messages", {**ASK, "max_tokens": 5}),  # a cut at the reservation: our closing events too
        ("responses", "/v1/responses", {"model": "qwen3-32b", "input": "one two", "max_output_tokens": 5}),
    ],
)
def test_a_native_answer_names_the_model_asked_for_not_the_upstreams_id(
    setup, native_upstream, gateway_url, kind, path, ask, stream
):
    """A channel that speaks the client's API answered with its own id (a cloud's dated model id;
    which upstream serves a model is the operators' business): now the public name, in the stream's
    events, in the closing events the gateway writes at the reservation, and in an assembled answer."""
    if kind == "anthropic":
        add_native_channel(setup, native_upstream, kind="anthropic")
    else:
        add_native_channel(setup, native_upstream, kind="openai", speaks_responses=True)
    native_upstream.behave(tokens=40, ignore_max_tokens=True)
    headers = {"Authorization": f"Bearer {setup.plaintext}", "anthropic-version": "2023-06-01"}
    answer = httpx.post(gateway_url + path, json={**ask, "stream": stream}, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    assert native_upstream.requests[-1].json["model"] == "native-model"
    assert b"native-model" not in answer.content
    named = re.findall(rb'"model": ?"qwen3-32b"', answer.content)  # the fake writes JSON with spaces, we without
    assert len(named) >= (2 if stream and kind == "responses" else 1)  # response.created and our response.incomplete
