"""Responses <-> Chat Completions translation, checked against golden tables and the openai SDK."""

from __future__ import annotations

import httpx2 as httpx  # the openai SDK is built on httpx2
import openai
import pytest
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.chat import CompletionCreateParams
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.translate import TranslationError, responses_request, responses_response
from gateway.translate.common import encode_sse
from tests.translate.tables import Ids, assemble, cases, check_golden, chunk_source

EVENT = TypeAdapter(ResponseStreamEvent)
CHAT_PARAMS = TypeAdapter(CompletionCreateParams)
REQUEST = {
    "model": "team-model",
    "input": "hi",
    "tools": [{"type": "function", "name": "get_weather", "parameters": {}}],
}


def _row(table: str, name: str) -> dict:
    return {r.values[0]["name"]: r.values[0] for r in cases(table)}[name]


def _comparable(response: dict) -> dict:
    """A response without the ids that legitimately differ between two translations."""
    output = [{k: v for k, v in item.items() if k != "id"} for item in response["output"]]
    return {**response, "id": "-", "created_at": 0, "output": output}


@pytest.mark.parametrize("row", cases("responses_requests"))
def test_it_translates_responses_requests_to_chat(row):
    chat = responses_request.to_chat_request(row["input"])
    CHAT_PARAMS.validate_python(chat)
    check_golden("responses_requests", "chat", row["name"], chat)


@pytest.mark.parametrize("row", cases("responses_request_errors"))
def test_it_refuses_untranslatable_responses_requests_with_the_offending_param(row):
    with pytest.raises(TranslationError) as caught:
        responses_request.to_chat_request(row["input"])
    assert caught.value.param == row["param"]


@pytest.mark.parametrize(
    ("effort", "expected"),
    [("high", "high"), ("medium", "medium"), ("minimal", "low"), ("xhigh", "high"), ("none", None)],
)
def test_reasoning_effort_is_forwarded_as_chats_reasoning_effort(effort, expected):
    chat = responses_request.to_chat_request({"model": "m", "input": "x", "reasoning": {"effort": effort}})
    assert chat.get("reasoning_effort") == expected
    CHAT_PARAMS.validate_python(chat)
    off = responses_request.to_chat_request(
        {"model": "m", "input": "x", "reasoning": {"effort": effort}}, map_reasoning=False
    )
    assert "reasoning_effort" not in off


@pytest.mark.parametrize("row", cases("completions"))
def test_it_translates_chat_completions_to_response_objects(row):
    response = responses_response.from_chat_completion(
        row["completion"], request=REQUEST, response_id="resp_1", created_at=1700000000, make_id=Ids()
    )
    Response.model_validate(response)
    check_golden("completions", "responses", row["name"], response)


@pytest.mark.parametrize("row", cases("streams"))
async def test_it_translates_chat_streams_to_response_events(row):
    request = row.get("request") or REQUEST
    events = [
        e
        async for e in responses_response.stream_from_chat(
            chunk_source(row), request=request, response_id="resp_1", created_at=1700000000, make_id=Ids()
        )
    ]
    check_golden("streams", "responses", row["name"], events)

    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    state = ResponseStreamState(input_tools=request.get("tools") or [], text_format=openai.omit)
    for event in events:
        state.handle_event(EVENT.validate_python(event))
    last = events[-1]
    if last["type"] == "response.failed":
        assert events[-2]["type"] == "error"
        assert last["response"]["error"]["code"] in ("server_error", "rate_limit_exceeded")
        return
    assert last["type"] in ("response.completed", "response.incomplete")
    # Items announced by output_item.done (what Codex reads) are the final response's output.
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == last["response"]["output"]
    # The stream's final response equals the translation of the whole completion.
    whole = responses_response.from_chat_completion(assemble(row["chunks"]), request=request)
    assert _comparable(last["response"]) == _comparable(whole)


async def test_a_split_tool_call_becomes_one_function_call_item_keeping_the_upstream_call_id():
    row = _row("streams", "tool call split over many chunks (FakeUpstream tool_call mode)")
    events = [e async for e in responses_response.stream_from_chat(chunk_source(row), request=REQUEST)]
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"ci', 'ty": ', '"Par', 'is"}']
    (item,) = events[-1]["response"]["output"]
    assert (item["type"], item["call_id"], item["name"], item["arguments"]) == (
        "function_call",
        "call_x",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert events[-1]["response"]["usage"]["total_tokens"] == 36


# --- the SDK parsing our bytes -------------------------------------------------------------------


def _client_answering(handler) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-test",
        base_url="http://gateway.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
        max_retries=0,
    )


def _sse_response(events: list[dict]) -> httpx.Response:
    body = b"".join(encode_sse(e) for e in events)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


async def _events(name: str) -> list[dict]:
    row = _row("streams", name)
    return [e async for e in responses_response.stream_from_chat(chunk_source(row), request=REQUEST)]


async def test_the_sdk_response_stream_assembles_text_and_usage():
    events = await _events("text split over chunks with usage chunk last")
    client = _client_answering(lambda request: _sse_response(events))
    with client.responses.stream(model="team-model", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert deltas == ["Hel", "lo"]
    assert final.output_text == "Hello"
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (7, 2, 9)


async def test_the_sdk_response_stream_assembles_parallel_function_calls():
    events = await _events("text then two parallel tool calls")
    client = _client_answering(lambda request: _sse_response(events))
    with client.responses.stream(model="team-model", input="hi") as stream:
        final = stream.get_final_response()
    calls = [(o.call_id, o.name, o.arguments) for o in final.output if o.type == "function_call"]
    assert calls == [("call_p", "get_weather", '{"city": "Paris"}'), ("call_r", "get_weather", '{"city": "Rome"}')]
    assert final.output_text == "Checking both."


async def test_the_sdk_sees_response_failed_after_an_upstream_error():
    events = await _events("upstream rate limit error chunk mid-stream")
    client = _client_answering(lambda request: _sse_response(events))
    stream = client.responses.create(model="team-model", input="hi", stream=True)
    kinds = [e.type for e in stream]
    assert kinds[-2:] == ["error", "response.failed"]


def test_the_sdk_parses_a_whole_response():
    completion = _row("completions", "tool call answer with content null")["completion"]
    response = responses_response.from_chat_completion(completion, request=REQUEST)
    client = _client_answering(lambda request: httpx.Response(200, json=response))
    parsed = client.responses.create(model="team-model", input="hi")
    assert parsed.output[0].type == "function_call"
    assert parsed.output[0].arguments == '{"city": "Paris"}'
    assert parsed.usage.input_tokens == 20


def test_it_logs_the_tools_it_drops(caplog):
    caplog.set_level("INFO", logger="gateway.translate.responses_request")
    responses_request.to_chat_request({"model": "m", "input": "x", "tools": [{"type": "web_search"}]})
    assert "dropped web_search tool" in caplog.text


async def test_each_delta_goes_out_before_the_next_upstream_chunk_is_read():
    pulled = []

    async def source():
        for i in range(3):
            pulled.append(i)
            yield {"choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}]}
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}

    seen = []
    async for event in responses_response.stream_from_chat(source(), request=REQUEST):
        if event["type"] == "response.output_text.delta":
            seen.append((event["delta"], len(pulled)))
    assert seen == [("t0", 1), ("t1", 2), ("t2", 3)]


# Codex 0.169's shape for one MCP server's tools (captured from a real run) next to a namespace it
# keeps for OpenAI (multi-agent): the first becomes plain functions, the second stays dropped.
MCP_TOOLS = [
    {
        "type": "namespace",
        "name": "mcp__teamgw_tracker",
        "description": "Tools in the mcp__teamgw_tracker namespace.",
        "tools": [
            {"type": "function", "name": "echo", "strict": False, "parameters": {"type": "object", "properties": {}}}
        ],
    },
    {"type": "namespace", "name": "multi_agent_v1", "tools": [{"type": "function", "name": "spawn_agent"}]},
]


def test_mcp_namespaces_become_flat_functions_and_a_call_is_split_back():
    request = {"model": "m", "input": "x", "tools": MCP_TOOLS}
    chat = responses_request.to_chat_request(request)
    assert [t["function"]["name"] for t in chat["tools"]] == ["mcp__teamgw_tracker__echo"]
    call = {"id": "call_1", "type": "function", "function": {"name": "mcp__teamgw_tracker__echo", "arguments": "{}"}}
    completion = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
    (item,) = responses_response.from_chat_completion(completion, request=request)["output"]
    assert (item["namespace"], item["name"], item["call_id"]) == ("mcp__teamgw_tracker", "echo", "call_1")
    # The call comes back in the next request's input with its namespace: one flat name again.
    again = responses_request.to_chat_request({**request, "input": [{**item, "type": "function_call"}]})
    assert again["messages"][-1]["tool_calls"][0]["function"]["name"] == "mcp__teamgw_tracker__echo"


async def test_a_streamed_mcp_call_names_its_namespace():
    async def source():
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "mcp__teamgw_tracker__echo"}}
        yield {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}
        yield {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}

    request = {"model": "m", "input": "x", "tools": MCP_TOOLS}
    events = [e async for e in responses_response.stream_from_chat(source(), request=request)]
    added = next(e["item"] for e in events if e["type"] == "response.output_item.added")
    (done,) = events[-1]["response"]["output"]
    assert (added["namespace"], added["name"]) == (done["namespace"], done["name"]) == ("mcp__teamgw_tracker", "echo")
