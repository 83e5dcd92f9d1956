"""Codex's API: the official openai SDK's Responses client against the real gateway."""

from __future__ import annotations

import httpx
import openai
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from channels.models import Channel
from tests.gateway_surfaces.conftest import (
    RESPONSES_TOOLS,
    UPSTREAM_KEY,
    add_channel,
    add_native_channel,
    record_for,
    set_limits,
)


@pytest.fixture
def client(setup, gateway_url):
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)


def test_create_translates_to_chat_and_back(setup, client, upstream):
    response = client.responses.create(
        model="qwen3-32b", instructions="Be brief.", input="hello there", max_output_tokens=3, store=False
    )
    assert response.output_text == "tok0 tok1 tok2"
    assert response.model == "qwen3-32b" and response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (4, 3, 7)
    sent = upstream.requests[-1]
    assert sent.path == "/v1/chat/completions" and sent.json["model"] == "fake-model"
    assert sent.json["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    assert sent.json["max_tokens"] == 3 and sent.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    (record,) = record_for(setup.key)
    assert (record.surface, record.stream, record.prompt_tokens, record.completion_tokens) == ("responses", False, 4, 3)
    assert record.estimated is False and record.channel_id == setup.channel.id


def test_stream_emits_codex_events_and_records_exact_usage(setup, client):
    stream = client.responses.create(model="qwen3-32b", input="hi", stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    for needed in ("response.output_item.added", "response.output_text.delta", "response.output_item.done"):
        assert needed in kinds
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response
    assert done.output_text == "tok0 tok1 tok2 tok3 tok4"
    assert (done.usage.input_tokens, done.usage.output_tokens) == (1, 5)
    (record,) = record_for(setup.key)
    assert (record.surface, record.stream, record.prompt_tokens, record.completion_tokens) == ("responses", True, 1, 5)
    assert record.estimated is False


def test_a_function_call_round_trips(setup, client, upstream):
    upstream.behave(mode="tool_call")
    with client.responses.stream(model="qwen3-32b", input="weather in Paris?", tools=RESPONSES_TOOLS) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        first = stream.get_final_response()
    assert len(deltas) > 5
    (call,) = [o for o in first.output if o.type == "function_call"]
    assert call.name == "get_weather" and call.arguments == '{"city": "Paris", "unit": "celsius"}'
    assert upstream.requests[-1].json["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": RESPONSES_TOOLS[0]["parameters"],
        },
    }

    record_for(setup.key)  # usage written: the next request does not race the writer (SQLite)
    upstream.behave(mode="ok")
    second = client.responses.create(
        model="qwen3-32b",
        tools=RESPONSES_TOOLS,
        input=[
            {"role": "user", "content": "weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "18C"},
        ],
    )
    assert second.output_text.startswith("tok0")
    messages = upstream.requests[-1].json["messages"]
    assert messages[1]["tool_calls"][0]["id"] == call.call_id
    assert messages[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "18C"}


def test_a_codex_shaped_request_drops_tools_the_upstream_cannot_run(setup, gateway_url, upstream):
    body = {
        "model": "qwen3-32b",
        "instructions": "You are Codex.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandboxed"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        ],
        "tools": [RESPONSES_TOOLS[0], {"type": "web_search"}, {"type": "namespace", "name": "mcp__x", "tools": []}],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto", "effort": "medium"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "abc",
    }
    with httpx.stream(
        "POST",
        gateway_url + "/v1/responses",
        json=body,
        headers={"authorization": f"Bearer {setup.plaintext}", "accept": "text/event-stream", "originator": "codex"},
    ) as r:
        assert r.status_code == 200
        names = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert names[-1] == "response.completed"
    sent = upstream.requests[-1].json
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather"]
    assert sent["messages"][0] == {"role": "system", "content": "You are Codex.\n\nsandboxed"}


def test_errors_keep_the_openai_shape(setup, client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="qwen3-32b", input="x", previous_response_id="resp_123")
    assert caught.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="nope", input="x")


def test_request_limit_answers_429_and_records_it(setup, client):
    set_limits(setup.key, requests_per_minute=1)
    client.responses.create(model="qwen3-32b", input="hi")
    record_for(setup.key)
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="qwen3-32b", input="hi", stream=True)
    assert int(caught.value.response.headers["retry-after"]) >= 1
    records = record_for(setup.key, 2)
    assert [(r.status, r.surface) for r in records] == [("ok", "responses"), ("rate_limited", "responses")]


def test_an_upstream_dying_mid_stream_ends_with_response_failed(setup, client, upstream):
    upstream.behave(mode="disconnect", disconnect_after=3)
    kinds = [e.type for e in client.responses.create(model="qwen3-32b", input="hi", stream=True)]
    assert kinds[-2:] == ["error", "response.failed"] and "response.completed" not in kinds
    (record,) = record_for(setup.key)
    assert record.status == "upstream_error"


def test_failover_before_the_first_byte(setup, client, upstream, second_upstream):
    backup, _ = add_channel(second_upstream, "backup", priority=-1, model=setup.model)
    upstream.enqueue(mode="status", status=500)
    kinds = [e.type for e in client.responses.create(model="qwen3-32b", input="hi", stream=True)]
    assert kinds[-1] == "response.completed"
    (record,) = record_for(setup.key)
    assert record.channel_id == backup.id


def test_a_channel_speaking_responses_gets_the_request_as_is(setup, client, native_upstream):
    channel = add_native_channel(setup, native_upstream, kind="openai", speaks_responses=True)
    response = client.responses.create(model="qwen3-32b", input="a b c")
    assert response.output_text == "tok0 tok1 tok2 tok3 tok4"
    sent = native_upstream.requests[-1]
    assert sent.path == "/v1/responses" and sent.json["model"] == "native-model" and sent.json["input"] == "a b c"
    assert sent.headers["Authorization"] == "Bearer sk-native-secret"
    record_for(setup.key)
    kinds = [e.type for e in client.responses.create(model="qwen3-32b", input="a b", stream=True)]
    assert kinds[-1] == "response.completed"
    first, second = record_for(setup.key, 2)
    assert (first.prompt_tokens, first.completion_tokens, first.channel_id) == (3, 5, channel.id)
    assert (second.prompt_tokens, second.completion_tokens, second.estimated) == (2, 5, False)


def test_a_websocket_handshake_is_refused_at_once(setup, gateway_url):
    ws_url = gateway_url.replace("http://", "ws://") + "/v1/responses"
    with pytest.raises(InvalidStatus) as caught:
        connect(ws_url, additional_headers={"authorization": f"Bearer {setup.plaintext}"}, open_timeout=5)
    assert caught.value.response.status_code == 426
    plain = httpx.get(gateway_url + "/v1/responses", headers={"authorization": f"Bearer {setup.plaintext}"})
    assert plain.status_code == 426 and plain.json()["error"]["code"] == "websocket_not_supported"


def test_an_upstream_client_error_is_relayed_in_openai_shape(setup, client, upstream):
    upstream.enqueue(mode="status", status=400, error_message="tools[0].function.name must not be empty")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="qwen3-32b", input="x", stream=True)
    assert caught.value.body["message"] == "tools[0].function.name must not be empty"
    (record,) = record_for(setup.key)
    assert record.http_status == 400 and record.surface == "responses"


def test_codexs_recorded_request_streams_through(setup, gateway_url, upstream):
    from tests.translate.test_real_clients import load

    recorded = load("codex_0.171.0_request.json")
    body = {**recorded["body"], "model": "qwen3-32b"}
    headers = {**recorded["headers"], "authorization": f"Bearer {setup.plaintext}"}
    headers.pop("Accept-Encoding", None)
    with httpx.stream("POST", gateway_url + "/v1/responses", json=body, headers=headers) as r:
        assert r.status_code == 200
        names = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert names[0] == "response.created" and names[-1] == "response.completed"


def test_upstream_reasoning_becomes_a_reasoning_item(setup, client, upstream):
    upstream.behave(reasoning="the user wants a greeting")
    with client.responses.stream(model="qwen3-32b", input="hi") as stream:
        final = stream.get_final_response()
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "the user wants a greeting"
    assert final.output_text == "tok0 tok1 tok2 tok3 tok4"


@pytest.mark.parametrize("stream", [False, True])
def test_usage_is_estimated_not_zero_when_the_upstream_reports_none(setup, client, upstream, stream):
    upstream.behave(mode="omit_usage")
    if stream:
        with client.responses.stream(model="qwen3-32b", input="abcdefgh") as s:
            response = s.get_final_response()
    else:
        response = client.responses.create(model="qwen3-32b", input="abcdefgh")
    assert response.output_text == "tok0 tok1 tok2 tok3 tok4"
    (record,) = record_for(setup.key)
    # The channel (vLLM) has /tokenize: 1 token by the fake's tokenizer + 4 for the message's markers.
    assert record.estimated is True and record.prompt_tokens == 1 + 4 and record.completion_tokens > 0
    assert response.usage.output_tokens == record.completion_tokens


def test_reasoning_effort_reaches_a_chat_channel(setup, client, upstream):
    client.responses.create(model="qwen3-32b", input="think", reasoning={"effort": "high", "summary": "auto"})
    assert upstream.requests[-1].json["reasoning_effort"] == "high"


def test_a_tool_name_a_cloud_chat_channel_refuses_is_our_400_by_the_clients_field(setup, client, upstream):
    """OpenAI's 400 would name Chat's `tools[0].function.name`; the client sent `tools[1].name`."""
    tools = [{"type": "web_search"}, {**RESPONSES_TOOLS[0], "name": "weather.get"}]
    Channel.objects.filter(pk=setup.channel.pk).update(kind="openai")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="qwen3-32b", input="hi", tools=tools)
    assert caught.value.body["param"] == "tools[1].name"
    assert caught.value.body["message"] == (
        "`tools[1].name` is not a tool name this model's channel (OpenAI-compatible cloud) accepts: "
        "use letters, digits, underscores and dashes, at most 64 of them."
    )
    assert not upstream.requests
    setup.channel.kind = "vllm"  # a local server takes it
    setup.channel.save()
    client.responses.create(model="qwen3-32b", input="hi", tools=tools)
    assert [t["function"]["name"] for t in upstream.requests[-1].json["tools"]] == ["weather.get"]


def test_a_function_call_of_an_earlier_turn_a_cloud_chat_channel_refuses_is_our_400_by_the_clients_field(
    setup, client, upstream
):
    history = [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "x" * 65, "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "18"},
    ]
    Channel.objects.filter(pk=setup.channel.pk).update(kind="openai")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="qwen3-32b", input=history, tools=RESPONSES_TOOLS)
    assert caught.value.body["param"] == "input[1].name"
    assert caught.value.body["message"] == (
        "`input[1].name` is not a tool name this model's channel (OpenAI-compatible cloud) accepts: "
        "use letters, digits, underscores and dashes, at most 64 of them."
    )
    assert not upstream.requests
