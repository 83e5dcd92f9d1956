"""An upstream that ignores `stream: true` and answers a whole JSON answer (the gateway asks every
Chat upstream for a stream, a non-streaming client's too): a Chat or Completions answer goes to a
streaming client of any surface as the stream it would have sent, counted and cut as one; a
Messages or Responses server's fails over with an error that says so, never "invalid JSON"."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import add_channel
from tests.gateway_surfaces.conftest import RESPONSES_TOOLS, UPSTREAM_KEY, add_native_channel, record_for
from tests.gateway_surfaces.test_messages import TOOLS

WORDS = "tok0 tok1 tok2 tok3 tok4"
ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'  # the fake's tool call


@pytest.fixture
def oai(setup, gateway_url):
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0, timeout=60)


@pytest.fixture
def claude(setup, gateway_url):
    return anthropic.Anthropic(base_url=gateway_url, api_key=setup.plaintext, max_retries=0)


def test_a_chat_client_gets_the_json_answer_as_a_stream_with_its_usage(setup, oai, upstream):
    upstream.behave(mode="ignore_stream")
    chunks = list(
        oai.chat.completions.create(
            model="qwen3-32b",
            messages=[{"role": "user", "content": "one two three"}],
            max_tokens=50,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert upstream.requests[-1].json["stream"] is True  # asked for, ignored
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == WORDS
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 5 and chunks[-1].model == "qwen3-32b"
    record = record_for(setup.key)[0]
    assert (record.status, record.stream, record.completion_tokens, record.estimated) == ("ok", True, 5, False)
    assert len(upstream.requests) == 1  # answered, not failed over


def test_a_completions_client_gets_the_json_answer_as_a_stream(setup, oai, upstream):
    upstream.behave(mode="ignore_stream")
    chunks = list(oai.completions.create(model="qwen3-32b", prompt="one two", max_tokens=50, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == WORDS
    assert record_for(setup.key)[0].completion_tokens == 5


def test_a_json_answer_past_the_reservation_is_cut_there_streamed_or_not(setup, oai, upstream):
    """A server that ignores max_tokens too: the stream stops at the reservation (finish
    `length`), and either answer is charged no more than it."""
    upstream.behave(mode="ignore_stream", ignore_max_tokens=True, tokens=20)
    ask = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "go"}], "max_tokens": 3}
    chunks = list(oai.chat.completions.create(**ask, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "tok0 tok1 tok2"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    answer = oai.chat.completions.create(**ask)
    assert answer.usage.completion_tokens == 3  # the upstream's 20, shown as charged
    streamed, whole = record_for(setup.key, 2)
    assert (streamed.completion_tokens, whole.completion_tokens) == (3, 3)


def test_a_messages_client_on_a_chat_channel_gets_the_full_event_sequence(setup, claude, upstream):
    upstream.behave(mode="ignore_stream")
    with claude.messages.stream(model="qwen3-32b", max_tokens=50, messages=[{"role": "user", "content": "hi"}]) as s:
        message = s.get_final_message()
    assert message.content[0].text == WORDS and message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 5


def test_a_responses_client_on_a_chat_channel_gets_a_completed_response(setup, oai, upstream):
    upstream.behave(mode="ignore_stream")
    events = list(oai.responses.create(model="qwen3-32b", input="hi", max_output_tokens=50, stream=True))
    done = events[-1]
    assert done.type == "response.completed" and done.response.output_text == WORDS


def test_a_chat_client_gets_a_whole_answers_tool_call_as_a_stream(setup, oai, upstream):
    upstream.behave(mode="tool_call", ignore_stream=True)
    ask = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "weather in Paris?"}], "max_tokens": 200}
    chunks = list(oai.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
    assert upstream.requests[-1].json["stream"] is True  # asked for, ignored
    deltas = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or ()]
    assert deltas[0].id.startswith("call_") and deltas[0].function.name == "get_weather"
    assert "".join(d.function.arguments or "" for d in deltas) == ARGUMENTS
    assert {d.index for d in deltas} == {0}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    record = record_for(setup.key)[0]
    assert (record.status, record.completion_tokens, record.estimated) == ("ok", 4, False)  # as reported


def test_a_messages_client_on_a_chat_channel_gets_a_whole_answers_tool_use(setup, claude, upstream):
    upstream.behave(mode="tool_call", ignore_stream=True)
    ask = {"model": "qwen3-32b", "max_tokens": 200, "tools": TOOLS, "messages": [{"role": "user", "content": "?"}]}
    with claude.messages.stream(**ask) as s:
        message = s.get_final_message()
    assert message.stop_reason == "tool_use"
    (call,) = message.content
    assert (call.type, call.name, call.input) == ("tool_use", "get_weather", {"city": "Paris", "unit": "celsius"})
    assert call.id


def test_a_responses_client_on_a_chat_channel_gets_a_whole_answers_function_call(setup, oai, upstream):
    upstream.behave(mode="tool_call", ignore_stream=True)
    with oai.responses.stream(model="qwen3-32b", input="weather in Paris?", tools=RESPONSES_TOOLS) as stream:
        done = stream.get_final_response()
    (call,) = [o for o in done.output if o.type == "function_call"]
    assert (call.name, call.arguments, call.status) == ("get_weather", ARGUMENTS, "completed")
    assert call.call_id.startswith("call_")


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    "mode, reasoning, out",
    [("ok", "", WORDS), ("ok", "think it over first", WORDS + " think it over first"), ("tool_call", "", ARGUMENTS)],
)
def test_a_whole_answer_without_usage_is_charged_an_estimate(setup, oai, upstream, mode, reasoning, out, stream):
    """Nothing reported: the prompt is estimated and the output counted, a streaming client's as a
    stream's is. A tool call's arguments were one chunk (charged 1 token, however long), and the
    non-streaming answer's count by the upstream's tokenizer left out its tool calls and its
    reasoning (a tool call was charged 0)."""
    upstream.behave(mode=mode, reasoning=reasoning, ignore_stream=True, omit_usage=True)
    ask = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 200}
    if stream:
        chunks = list(oai.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        shown = chunks[-1].usage
    else:
        shown = oai.chat.completions.create(**ask).usage
    record = record_for(setup.key)[0]
    assert (record.status, record.stream, record.estimated) == ("ok", stream, True)
    assert record.prompt_tokens >= 3 and record.completion_tokens >= len(out.split())
    assert (shown.prompt_tokens, shown.completion_tokens) == (record.prompt_tokens, record.completion_tokens)


@pytest.mark.parametrize("flag", ["speaks_messages", "speaks_responses"])
def test_a_native_server_that_ignores_stream_fails_over_saying_so(setup, gateway_url, native_upstream, flag):
    add_native_channel(setup, native_upstream, kind="vllm", **{flag: True})
    native_upstream.behave(mode="ignore_stream")
    path, body = {
        "speaks_messages": ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
        "speaks_responses": ("/v1/responses", {"input": "hi", "max_output_tokens": 5}),
    }[flag]
    headers = {"Authorization": f"Bearer {setup.plaintext}"}
    body = {"model": "qwen3-32b", **body, "stream": True}
    r = httpx.post(gateway_url + path, json=body, headers=headers, timeout=30)
    assert r.status_code == 502, r.text
    assert "ignores `stream`" in r.text and "invalid JSON" not in r.text, r.text
    with FakeUpstream(api_key=UPSTREAM_KEY) as backup:  # a Chat channel of the model, tried next
        add_channel(backup, "backup", priority=-1, model=setup.model)
        setup.model.save()  # reload the gateway's catalog
        r = httpx.post(gateway_url + path, json=body, headers=headers, timeout=30)
        assert r.status_code == 200 and "tok4" in r.text, r.text
        assert len(backup.requests) == 1
    failed, answered = record_for(setup.key, 2)
    assert failed.status != "ok" and answered.status == "ok"
    assert "failover after protocol" in " ".join(answered.route_explanation), answered.route_explanation
