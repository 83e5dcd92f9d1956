"""Chat Completions, legacy Completions and Responses clients on an Anthropic channel: the official openai
SDK against the real gateway in front of FakeUpstream's Anthropic Messages API."""

from __future__ import annotations

import base64
import json
import re

import httpx
import openai
import pytest

from channels.models import Channel, ModelRoute
from tests.fakes.upstream import FakeUpstream
from tests.gateway_surfaces.conftest import RESPONSES_TOOLS, add_native_channel, record_for

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}},
        },
    }
]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


@pytest.fixture
def anthropic_up():
    with FakeUpstream(api_key="sk-native-secret") as up:
        yield up


@pytest.fixture
def channel(setup, anthropic_up):
    return add_native_channel(setup, anthropic_up, kind="anthropic")


@pytest.fixture
def client(setup, gateway_url, channel):
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)


def test_a_chat_completion_is_translated_to_messages_and_back(setup, client, anthropic_up, channel):
    anthropic_up.behave(cached=2, cache_write=1)
    answer = client.chat.completions.create(
        model="qwen3-32b",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Use French."},
            {"role": "user", "content": "hello there"},
        ],
        temperature=1.5,
    )
    assert answer.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4"
    assert answer.choices[0].finish_reason == "stop" and answer.object == "chat.completion"
    assert answer.model == "qwen3-32b"
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (6, 5)
    sent = anthropic_up.requests[-1]
    assert sent.path == "/v1/messages" and sent.json["stream"] is True  # streamed upstream, assembled here
    assert sent.json["model"] == "native-model" and sent.json["system"] == "Be brief.\n\nUse French."
    assert sent.json["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}]
    assert (
        sent.json["max_tokens"] == 4096
    )  # none sent: the reservation (GATEWAY_DEFAULT_MAX_TOKENS); Messages needs one
    assert sent.json["temperature"] == 1.0  # Messages' maximum
    headers = {k.lower(): v for k, v in sent.headers.items()}
    assert headers["x-api-key"] == "sk-native-secret" and headers["anthropic-version"]
    assert "authorization" not in headers and setup.plaintext not in str(headers)
    (record,) = record_for(setup.key)
    assert (record.surface, record.status, record.channel_id) == ("chat", "ok", channel.id)
    assert (record.prompt_tokens, record.completion_tokens, record.estimated) == (6, 5, False)
    assert (record.cached_tokens, record.cache_creation_tokens) == (2, 1)  # assembled, the cache parts kept
    assert answer.usage.prompt_tokens_details.cached_tokens == 2


def test_a_stream_has_chunks_usage_with_cache_hits_and_done(setup, client, anthropic_up, gateway_url):
    anthropic_up.behave(cached=2, cache_write=1)
    stream = client.chat.completions.create(
        model="qwen3-32b",
        messages=[{"role": "user", "content": "one two three four"}],
        max_tokens=50,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "tok0 tok1 tok2 tok3 tok4"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.prompt_tokens_details.cached_tokens) == (4, 5, 2)
    (record,) = record_for(setup.key)
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens, record.cache_creation_tokens) == (
        4,
        5,
        2,
        1,
    )
    assert record.stream and not record.estimated
    # Without include_usage: no usage chunk and no `usage` key on any chunk; the raw stream ends with [DONE].
    with httpx.stream(
        "POST",
        gateway_url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {setup.plaintext}"},
        json={"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    ) as raw:
        lines = [line for line in raw.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    payloads = [json.loads(line[6:]) for line in lines[:-1]]
    assert all("usage" not in p and p["object"] == "chat.completion.chunk" for p in payloads)


def test_a_tool_round_trip(setup, client, anthropic_up):
    anthropic_up.enqueue(mode="tool_call")
    stream = client.chat.completions.create(
        model="qwen3-32b",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=TOOLS,
        tool_choice="auto",
        parallel_tool_calls=False,
        stream=True,
    )
    chunks = list(stream)
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert len(deltas) > 2 and {d.index for d in deltas} == {0}  # the arguments arrive in pieces
    call_id, name = deltas[0].id, deltas[0].function.name
    arguments = "".join(d.function.arguments or "" for d in deltas)
    assert name == "get_weather" and json.loads(arguments) == {"city": "Paris", "unit": "celsius"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    sent = anthropic_up.requests[-1].json
    assert sent["tools"] == [
        {"name": "get_weather", "description": "Weather for a city", "input_schema": TOOLS[0]["function"]["parameters"]}
    ]
    assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}

    # The result goes back; the fake refuses a tool_result that does not answer the previous tool_use.
    answer = client.chat.completions.create(
        model="qwen3-32b",
        tools=TOOLS,
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
            },
            {"role": "tool", "tool_call_id": call_id, "content": "18 degrees, sunny"},
        ],
    )
    assert answer.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4"
    sent = anthropic_up.requests[-1].json
    assert sent["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": call_id, "name": "get_weather", "input": json.loads(arguments)}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "18 degrees, sunny"}]},
    ]
    # Not streamed, a tool call comes back as one tool_calls entry.
    anthropic_up.enqueue(mode="tool_call")
    answer = client.chat.completions.create(
        model="qwen3-32b", messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS
    )
    (call,) = answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == "tool_calls"
    assert call.id.startswith("toolu_") and json.loads(call.function.arguments)["city"] == "Paris"


def test_images_become_image_blocks(setup, client, anthropic_up):
    client.chat.completions.create(
        model="qwen3-32b",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in these?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                ],
            }
        ],
    )
    (message,) = anthropic_up.requests[-1].json["messages"]
    assert message["content"] == [
        {"type": "text", "text": "What is in these?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


def test_a_stop_sequence_and_max_tokens_finish_as_chat_says(setup, client, anthropic_up):
    answer = client.chat.completions.create(
        model="qwen3-32b", messages=[{"role": "user", "content": "count"}], stop=["tok3"]
    )
    assert answer.choices[0].message.content == "tok0 tok1 tok2 " and answer.choices[0].finish_reason == "stop"
    assert anthropic_up.requests[-1].json["stop_sequences"] == ["tok3"]
    answer = client.chat.completions.create(
        model="qwen3-32b", messages=[{"role": "user", "content": "count"}], max_completion_tokens=2
    )
    assert answer.choices[0].message.content == "tok0 tok1" and answer.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(
        model="qwen3-32b", messages=[{"role": "user", "content": "count"}], stop="tok2", stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "tok0 tok1 "
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_reasoning_effort_asks_for_thinking_and_comes_back_as_reasoning_content(setup, client, anthropic_up):
    answer = client.chat.completions.create(
        model="qwen3-32b",
        messages=[{"role": "user", "content": "think"}],
        reasoning_effort="low",
        max_completion_tokens=2000,
        temperature=0.2,
    )
    sent = anthropic_up.requests[-1].json
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024} and "temperature" not in sent
    assert answer.choices[0].message.model_extra["reasoning_content"] == "Let me think."


def test_an_overloaded_anthropic_channel_is_a_503_with_retry_after(setup, client, anthropic_up):
    anthropic_up.behave(mode="status", status=529, error_message="Overloaded", retry_after="7")
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 503
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body["code"] == "upstream_overloaded"
    (record,) = record_for(setup.key)
    assert (record.status, record.http_status) == ("upstream_error", 503)


def test_an_anthropic_refusal_has_the_openai_shape(setup, client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "hi"}], n=2)
    assert caught.value.body["param"] == "n" and "Anthropic" in caught.value.body["message"]


def test_a_mid_stream_error_event_ends_the_stream_with_our_own_message(setup, client, anthropic_up):
    anthropic_up.behave(mode="stream_error", error_message="overloaded; key sk-native-secret")
    with pytest.raises(openai.APIError) as caught:
        list(
            client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "hi"}], stream=True)
        )
    assert "sk-native-secret" not in str(caught.value) and "incomplete" in str(caught.value)


def test_legacy_completions_take_one_prompt_and_refuse_the_rest(setup, client, anthropic_up):
    answer = client.completions.create(model="qwen3-32b", prompt="Say hi", max_tokens=3)
    assert answer.object == "text_completion" and answer.choices[0].text == "tok0 tok1 tok2"
    assert answer.choices[0].finish_reason == "length"
    assert anthropic_up.requests[-1].json["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Say hi"}]}
    ]
    streamed = client.completions.create(model="qwen3-32b", prompt="Say hi", stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == "tok0 tok1 tok2 tok3 tok4"
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="qwen3-32b", prompt="def f(", suffix="return 1")
    assert caught.value.body["param"] == "suffix"
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="qwen3-32b", prompt=["a", "b"])
    assert caught.value.body["param"] == "prompt" and "one `prompt` string" in caught.value.body["message"]


def test_an_overloaded_anthropic_channel_fails_over_to_a_chat_channel(setup, gateway_url, anthropic_up, upstream):
    # The vLLM channel of `setup` stays, below an Anthropic channel of higher priority.
    channel = Channel.objects.create(
        name="claude",
        kind="anthropic",
        base_url=anthropic_up.base_url,
        api_key="sk-native-secret",
        priority=10,
        status="healthy",
    )
    ModelRoute.objects.create(model=setup.model, channel=channel, upstream_model="native-model")
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    ask = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert client.chat.completions.create(**ask).choices[0].message.content == "tok0 tok1 tok2 tok3"
    assert anthropic_up.requests[-1].path == "/v1/messages" and not upstream.requests
    anthropic_up.behave(mode="status", status=529, error_message="Overloaded")
    assert client.chat.completions.create(**ask).choices[0].message.content == "tok0 tok1 tok2 tok3"
    sent = upstream.requests[-1]
    assert sent.path == "/v1/chat/completions" and sent.json["messages"] == ask["messages"]
    assert sent.json["max_tokens"] == 4
    # A non-streaming answer is assembled inside the attempt: an error event mid-stream fails over too.
    anthropic_up.behave(mode="stream_error", error_message="overloaded")
    assert client.chat.completions.create(**ask).choices[0].message.content == "tok0 tok1 tok2 tok3"
    assert len(upstream.requests) == 2 and anthropic_up.requests[-1].json["stream"] is True


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_past_the_reservation_is_cut_with_finish_reason_length(setup, client, anthropic_up, stream):
    anthropic_up.behave(tokens=10, ignore_max_tokens=True)
    ask = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    if stream:
        chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    else:
        answer = client.chat.completions.create(**ask)
        text, finishes = answer.choices[0].message.content, [answer.choices[0].finish_reason]
    assert text.split() == ["tok0", "tok1", "tok2"] and finishes == ["length"]
    (record,) = record_for(setup.key)
    assert record.status == "ok" and record.estimated
    if stream:
        assert record.completion_tokens == 3 and "cut at max_tokens" in record.error


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_that_stalls_names_the_idle_timeout(setup, client, anthropic_up, settings, stream):
    # Liveness, not a wall, for streamed and non-streamed answers alike (both are streamed upstream).
    settings.GATEWAY_IDLE_TIMEOUT = 1.0
    anthropic_up.behave(mode="stall", stall_after=2)
    ask = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}]}
    patient = client.with_options(timeout=60)
    if stream:
        with pytest.raises(openai.APIError) as caught:
            list(patient.chat.completions.create(**ask, stream=True))
        assert "GATEWAY_IDLE_TIMEOUT" in str(caught.value)
    else:
        with pytest.raises(openai.APIStatusError) as caught:
            patient.chat.completions.create(**ask)
        assert caught.value.status_code == 504 and "GATEWAY_IDLE_TIMEOUT" in caught.value.message


# --- Responses clients (Codex) on an Anthropic channel: Responses -> Chat -> Messages ------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_client_is_translated_to_messages_and_back(setup, client, anthropic_up, channel, stream):
    asked = {"model": "qwen3-32b", "instructions": "Be brief.", "input": "hello there"}
    if stream:
        events = list(client.responses.create(**asked, stream=True))
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        response = events[-1].response
    else:
        response = client.responses.create(**asked)
    assert response.output_text == "tok0 tok1 tok2 tok3 tok4" and response.model == "qwen3-32b"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (4, 5)
    sent = anthropic_up.requests[-1]
    assert sent.path == "/v1/messages" and sent.json["system"] == "Be brief." and sent.json["stream"] is True
    headers = {k.lower(): v for k, v in sent.headers.items()}
    assert headers["x-api-key"] == "sk-native-secret" and "authorization" not in headers
    (record,) = record_for(setup.key)
    assert (record.surface, record.status, record.channel_id) == ("responses", "ok", channel.id)
    assert (record.prompt_tokens, record.completion_tokens, record.estimated) == (4, 5, False)


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_function_call_round_trips_through_an_anthropic_channel(setup, client, anthropic_up, stream):
    anthropic_up.enqueue(mode="tool_call")
    asked = {"model": "qwen3-32b", "input": "Weather in Paris?", "tools": RESPONSES_TOOLS}
    if stream:
        response = list(client.responses.create(**asked, stream=True))[-1].response
    else:
        response = client.responses.create(**asked)
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris", "unit": "celsius"}
    assert call.call_id.startswith("toolu_")
    # The result goes back; the fake refuses a tool_result that does not answer the previous tool_use.
    answer = client.responses.create(
        model="qwen3-32b",
        tools=RESPONSES_TOOLS,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees, sunny"},
        ],
    )
    assert answer.output_text == "tok0 tok1 tok2 tok3 tok4"
    last = anthropic_up.requests[-1].json["messages"][-1]
    assert last == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call.call_id, "content": "18 degrees, sunny"}],
    }


def test_a_responses_client_gets_an_anthropic_refusal_in_the_openai_shape(setup, client, anthropic_up):
    anthropic_up.behave(mode="status", status=400, error_type="invalid_request_error", error_message="bad request")
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="qwen3-32b", input="hi")
    assert raised.value.status_code == 400 and raised.value.body["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "fmt", [{"type": "json_schema", "name": "answer", "schema": {"type": "object"}}, {"type": "json_object"}]
)
def test_a_responses_output_format_the_channel_cannot_keep_is_refused_by_its_own_name(setup, client, anthropic_up, fmt):
    """Codex's --output-schema: the 400 names `text.format`, which the client sent, not Chat's `response_format`."""
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="qwen3-32b", input="hi", text={"format": fmt})
    error = raised.value.body
    assert error["param"] == "text.format" and "`text.format`" in error["message"]
    assert "response_format" not in error["message"] and not anthropic_up.requests


BMP = "data:image/bmp;base64," + base64.b64encode(b"BM" + b"\0" * 16).decode()
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}


@pytest.mark.parametrize(
    ("input", "sent"),
    [
        (  # the function call joins the assistant's message: input[4] is Chat's messages[3]
            [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Let me look."},
                CALL,
                {"type": "function_call_output", "call_id": "call_1", "output": "18 degrees"},
                {"role": "user", "content": [{"type": "input_image", "image_url": BMP}]},
            ],
            "input[4]",
        ),
        (  # an image in a tool's output goes in a user message after it
            [
                {"role": "user", "content": "Draw it"},
                CALL,
                {
                    "type": "function_call_output",
                    "call_id": "call_1",
                    "output": [{"type": "input_image", "image_url": BMP}],
                },
            ],
            "input[2]",
        ),
    ],
)
def test_a_responses_item_the_channel_cannot_take_is_named_as_the_client_sent_it(client, anthropic_up, input, sent):
    """The Chat -> Messages translation names Chat's `messages[3]`, which the Responses client never sent."""
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="qwen3-32b", input=input, tools=RESPONSES_TOOLS)
    error = raised.value.body
    assert error["param"] == sent
    assert error["message"] == f"`{sent}` has an image data URL that is not base64 JPEG, PNG, GIF or WebP."
    assert not anthropic_up.requests


@pytest.mark.parametrize(
    ("input", "sent", "message"),
    [
        (  # only instructions: Chat's `messages` has no turn for Messages
            [{"role": "developer", "content": "Be brief."}],
            "input",
            "`input` needs at least one user or assistant message.",
        ),
        (
            [{"role": "user", "content": "Weather?"}, {**CALL, "call_id": 7}],
            "input[1]",
            "`input[1]` (function_call) needs `call_id` and `name` (strings).",
        ),
        (  # was Chat's "(a tool message) needs a `tool_call_id`"
            [
                {"role": "user", "content": "Weather?"},
                CALL,
                {"type": "function_call_output", "call_id": 7, "output": "18"},
            ],
            "input[2]",
            "`input[2]` (function_call_output) needs `call_id` (a string).",
        ),
    ],
)
def test_a_responses_refusal_on_an_anthropic_channel_names_the_clients_field(
    client, anthropic_up, input, sent, message
):
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="qwen3-32b", input=input, tools=RESPONSES_TOOLS)
    assert (raised.value.body["param"], raised.value.body["message"]) == (sent, message)
    assert not anthropic_up.requests


NAME_RULE = (
    "is not a tool name this model's channel (Anthropic) accepts: use letters, digits, underscores and dashes, "
    "at most 128 of them."
)


@pytest.mark.parametrize("name", ["files.read", "read file", "x" * 129, ""])
def test_a_chat_tool_name_anthropic_refuses_is_our_400_by_the_clients_field(client, anthropic_up, name):
    """Anthropic's 400 would name `tools.1.custom.name`, of the translation the client never sent."""
    tools = [TOOLS[0], {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}]
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "hi"}], tools=tools)
    error = raised.value.body
    if name:
        assert error["param"] == "tools[1].function.name"
        assert error["message"] == f"`tools[1].function.name` {NAME_RULE}"
    else:
        assert error["message"] == "Each tool needs a `function.name`."
    assert not anthropic_up.requests
    tools[1]["function"]["name"] = "files_read-" + "x" * 117  # 128: taken
    client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "hi"}], tools=tools)
    assert [t["name"] for t in anthropic_up.requests[-1].json["tools"]] == ["get_weather", tools[1]["function"]["name"]]


def test_a_responses_tool_name_anthropic_refuses_is_named_as_the_client_sent_it(client, anthropic_up):
    """Codex's tools: the dropped web_search and an MCP namespace's function (`mcp__docs__read.page`
    as Chat's tools[1]) named by where the client put them."""
    tools = [
        {"type": "web_search"},
        *RESPONSES_TOOLS,
        {
            "type": "namespace",
            "name": "mcp__docs",
            "description": "docs server",
            "tools": [{"type": "custom", "name": "patch"}, {"type": "function", "name": "read.page", "parameters": {}}],
        },
    ]
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="qwen3-32b", input="hi", tools=tools)
    assert raised.value.body["param"] == "tools[2].tools[1].name"
    assert raised.value.body["message"] == f"`tools[2].tools[1].name` {NAME_RULE}"
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="qwen3-32b", input="hi", tools=[{**RESPONSES_TOOLS[0], "name": "get weather"}])
    assert raised.value.body["param"] == "tools[0].name"
    assert raised.value.body["message"] == f"`tools[0].name` {NAME_RULE}"
    assert not anthropic_up.requests


@pytest.mark.parametrize("name", ["files.read", "read file", "x" * 129])
def test_a_tool_call_of_an_earlier_turn_with_a_name_anthropic_refuses_is_our_400_by_the_clients_field(
    client, anthropic_up, name
):
    """A call in the history is a `tool_use` block upstream, whose name Anthropic checks as it checks
    a declared tool's: its 400 would name `messages.1.content.0.name` of the translation."""
    history = [
        {"role": "user", "content": "Read it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_chat_call("call_1", "get_weather"), _chat_call("call_2", name)],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18"},
        {"role": "tool", "tool_call_id": "call_2", "content": "text"},
    ]
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="qwen3-32b", messages=history, tools=TOOLS)
    assert raised.value.body["param"] == "messages[1].tool_calls[1].function.name"
    assert raised.value.body["message"] == f"`messages[1].tool_calls[1].function.name` {NAME_RULE}"
    assert not anthropic_up.requests


def test_a_responses_function_call_with_a_name_anthropic_refuses_is_named_as_the_client_sent_it(client, anthropic_up):
    history = [
        {"role": "user", "content": "Weather?"},
        {**CALL, "name": "weather.get"},
        {"type": "function_call_output", "call_id": "call_1", "output": "18"},
    ]
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="qwen3-32b", input=history, tools=RESPONSES_TOOLS)
    assert raised.value.body["param"] == "input[1].name"
    assert raised.value.body["message"] == f"`input[1].name` {NAME_RULE}"
    assert not anthropic_up.requests


def _chat_call(call_id: str, name: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")


def _pairs(sent: dict) -> list[tuple[list[str], list[str]]]:
    """(the tool_use ids of each assistant turn, the tool_use_ids of the results in the turn after it)."""
    turns = sent["messages"]
    return [
        (
            [b["id"] for b in turn["content"] if b["type"] == "tool_use"],
            [b["tool_use_id"] for b in turns[n + 1]["content"] if b["type"] == "tool_result"],
        )
        for n, turn in enumerate(turns)
        if turn["role"] == "assistant"
    ]


def test_tool_call_ids_anthropic_refuses_are_rewritten_in_calls_and_results_alike(client, anthropic_up):
    """A history from Kimi (`functions.get_weather:0`) or another provider: Anthropic's 400 would
    refuse the whole conversation. Its valid ids go as they are, and no two ids become one."""
    kimi, dotted, valid = "functions.get_weather:0", "call.1 x", "functions_get_weather_0"
    history = [
        {"role": "user", "content": "Weather in Paris, Rome and Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_chat_call(kimi, "get_weather"), _chat_call(dotted, "get_weather"), _chat_call(valid, "x")],
        },
        {"role": "tool", "tool_call_id": valid, "content": "5"},  # results in any order
        {"role": "tool", "tool_call_id": kimi, "content": "18"},
        {"role": "tool", "tool_call_id": dotted, "content": "21"},
    ]
    answer = client.chat.completions.create(model="qwen3-32b", messages=history, tools=TOOLS)
    assert answer.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4"
    sent = anthropic_up.requests[-1].json
    ((calls, results),) = _pairs(sent)
    assert all(ANTHROPIC_ID.fullmatch(i) for i in calls)
    assert calls[2] == valid and len(set(calls)) == 3  # untouched; distinct from Kimi's
    assert calls[0].startswith("functions_get_weather_0_") and calls[1].startswith("call_1_x_")
    assert results == [calls[2], calls[0], calls[1]]  # each result still finds its call
    # The same history is sent the same next time: Anthropic's prompt cache still hits.
    client.chat.completions.create(model="qwen3-32b", messages=history, tools=TOOLS)
    assert anthropic_up.requests[-1].json["messages"] == sent["messages"]


def test_a_responses_call_id_anthropic_refuses_is_rewritten_in_the_call_and_its_output(client, anthropic_up):
    history = [
        {"role": "user", "content": "Weather?"},
        {**CALL, "call_id": "functions.get_weather:0"},
        {"type": "function_call_output", "call_id": "functions.get_weather:0", "output": "18"},
    ]
    assert client.responses.create(model="qwen3-32b", input=history, tools=RESPONSES_TOOLS).status == "completed"
    ((calls, results),) = _pairs(anthropic_up.requests[-1].json)
    assert results == calls and ANTHROPIC_ID.fullmatch(calls[0])


def test_a_call_without_an_id_gets_one_when_its_result_is_the_one_tool_message_without(client, anthropic_up):
    history = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [_chat_call("", "get_weather"), _chat_call("c.2", "x")]},
        {"role": "tool", "tool_call_id": "c.2", "content": "21"},
        {"role": "tool", "tool_call_id": "", "content": "18"},
    ]
    client.chat.completions.create(model="qwen3-32b", messages=history, tools=TOOLS)
    ((calls, results),) = _pairs(anthropic_up.requests[-1].json)
    assert all(ANTHROPIC_ID.fullmatch(i) for i in calls) and results == [calls[1], calls[0]]


@pytest.mark.parametrize(
    ("calls", "results", "field"),
    [
        ([_chat_call("", "get_weather"), _chat_call("", "get_weather")], ["", ""], "messages[1].tool_calls[1].id"),
        ([_chat_call("", "get_weather")], [], "messages[1].tool_calls[0].id"),
        ([_chat_call("", "get_weather")], ["call_9"], "messages[1].tool_calls[0].id"),
    ],
)
def test_a_call_without_an_id_whose_result_cannot_be_told_apart_is_our_400(client, anthropic_up, calls, results, field):
    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": r, "content": "18"} for r in results),
    ]
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="qwen3-32b", messages=history, tools=TOOLS)
    assert raised.value.body["param"] == field
    assert raised.value.body["message"].startswith(f"`{field}` is missing and the call's tool message cannot be told")
    assert not anthropic_up.requests
