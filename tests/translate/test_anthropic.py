"""Messages <-> Chat Completions translation, checked against golden tables and the anthropic SDK."""

from __future__ import annotations

import anthropic
import httpx2 as httpx  # the anthropic SDK is built on httpx2
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import ErrorResponse, Message, MessageCreateParams, RawMessageStreamEvent
from openai.types.chat import CompletionCreateParams
from pydantic import TypeAdapter

from gateway.translate import TranslationError, anthropic_request, anthropic_response
from gateway.translate.common import encode_sse
from tests.translate.tables import Ids, assemble, cases, check_golden, chunk_source

EVENT = TypeAdapter(RawMessageStreamEvent)
CHAT_PARAMS = TypeAdapter(CompletionCreateParams)
MESSAGE_PARAMS = TypeAdapter(MessageCreateParams)


def _without_ids(message: dict) -> dict:
    message = {**message, "id": "-"}
    message["content"] = [{**b, "id": "-"} if b["type"] == "tool_use" else b for b in message["content"]]
    return message


@pytest.mark.parametrize("row", cases("anthropic_requests"))
def test_it_translates_message_requests_to_chat(row):
    MESSAGE_PARAMS.validate_python(row["input"])  # the table speaks real Messages
    chat = anthropic_request.to_chat_request(row["input"])
    CHAT_PARAMS.validate_python(chat)
    check_golden("anthropic_requests", "chat", row["name"], chat)


@pytest.mark.parametrize("row", cases("anthropic_request_errors"))
def test_it_refuses_untranslatable_message_requests_with_the_offending_param(row):
    with pytest.raises(TranslationError) as caught:
        anthropic_request.to_chat_request(row["input"])
    assert caught.value.param == row["param"]


def test_it_keeps_tool_results_right_after_the_assistant_tool_calls():
    chat = anthropic_request.to_chat_request(
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "before"},
                        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    ],
                },
            ],
        }
    )
    assert [m["role"] for m in chat["messages"]] == ["assistant", "tool", "user"]


@pytest.mark.parametrize("row", cases("completions"))
def test_it_translates_chat_completions_to_messages(row):
    message = anthropic_response.from_chat_completion(
        row["completion"], model="team-model", thinking=row.get("thinking", False), make_id=Ids()
    )
    Message.model_validate(message)
    check_golden("completions", "anthropic", row["name"], message)


@pytest.mark.parametrize("row", cases("streams"))
async def test_it_translates_chat_streams_to_message_events(row):
    events = [
        e
        async for e in anthropic_response.stream_from_chat(
            chunk_source(row), model="team-model", thinking=row.get("thinking", False), make_id=Ids()
        )
    ]
    check_golden("streams", "anthropic", row["name"], events)

    last = events[-1]
    if last["type"] == "error":
        ErrorResponse.model_validate(last)
        assert all(e["type"] not in ("message_delta", "message_stop") for e in events)
        events = events[:-1]
    else:
        assert [e["type"] for e in events[-2:]] == ["message_delta", "message_stop"]
    snapshot, bufs = None, {}
    for event in events:
        if event["type"] == "ping":  # not a RawMessageStreamEvent: the SDK skips it by SSE name
            continue
        snapshot = accumulate_event(event=EVENT.validate_python(event), current_snapshot=snapshot, json_bufs=bufs)
    if last["type"] != "error":
        # The SDK's accumulation of the stream equals the translation of the whole completion.
        whole = anthropic_response.from_chat_completion(
            assemble(row["chunks"]), model="team-model", thinking=row.get("thinking", False)
        )
        assert _without_ids(snapshot.to_dict(exclude_none=True)) == _without_ids(
            Message.model_validate(whole).to_dict(exclude_none=True)
        )


async def test_stream_blocks_open_and_close_in_order_with_one_ping():
    events = await _events("text then two parallel tool calls")
    shape = [(e["type"], e.get("index")) for e in events if e["type"] != "content_block_delta"]
    assert shape == [
        ("message_start", None),
        ("content_block_start", 0),
        ("ping", None),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_stop", 1),
        ("content_block_start", 2),
        ("content_block_stop", 2),
        ("message_delta", None),
        ("message_stop", None),
    ]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
    ],
)
def test_it_maps_openai_errors_to_anthropic_error_types(status, kind):
    body = anthropic_response.error_from_openai(status, {"error": {"message": "nope", "type": "x", "code": "y"}})
    assert body == {"type": "error", "error": {"type": kind, "message": "nope"}}
    ErrorResponse.model_validate(body)


# --- the SDK parsing our bytes -------------------------------------------------------------------


def _client_answering(handler) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-test",
        base_url="http://gateway.test",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


def _sse_response(events: list[dict]) -> httpx.Response:
    body = b"".join(encode_sse(e) for e in events)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


async def _events(row_name: str, **kwargs) -> list[dict]:
    row = {r.values[0]["name"]: r.values[0] for r in cases("streams")}[row_name]
    return [e async for e in anthropic_response.stream_from_chat(chunk_source(row), model="team-model", **kwargs)]


async def test_the_sdk_message_stream_assembles_a_split_tool_call():
    events = await _events("tool call split over many chunks (FakeUpstream tool_call mode)")
    client = _client_answering(lambda request: _sse_response(events))
    with client.messages.stream(model="team-model", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in final.content] == [("tool_use", "get_weather", {"city": "Paris"})]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (30, 6)


async def test_the_sdk_message_stream_yields_text_deltas():
    events = await _events("text split over chunks with usage chunk last")
    client = _client_answering(lambda request: _sse_response(events))
    with client.messages.stream(model="team-model", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
        assert list(s.text_stream) == ["Hel", "lo"]
        final = s.get_final_message()
    assert final.content[0].text == "Hello"
    assert final.stop_reason == "end_turn"


async def test_the_sdk_raises_on_a_mid_stream_error_event():
    events = await _events("upstream error chunk mid-stream")
    client = _client_answering(lambda request: _sse_response(events))
    with pytest.raises(anthropic.APIStatusError, match="upstream failure"):
        with client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
            s.get_final_message()


def test_the_sdk_parses_a_whole_message_and_an_error_body():
    rows = {r.values[0]["name"]: r.values[0] for r in cases("completions")}
    message = anthropic_response.from_chat_completion(
        rows["tool call answer with content null"]["completion"], model="m"
    )
    client = _client_answering(lambda request: httpx.Response(200, json=message))
    parsed = client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert parsed.content[0].input == {"city": "Paris"}

    denied = _client_answering(
        lambda request: httpx.Response(429, json=anthropic_response.error_body(429, "slow down"))
    )
    with pytest.raises(anthropic.RateLimitError) as caught:
        denied.with_options(max_retries=0).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.body["error"]["type"] == "rate_limit_error"


def test_it_logs_the_server_tools_it_drops(caplog):
    caplog.set_level("INFO", logger="gateway.translate.anthropic_request")
    chat = anthropic_request.to_chat_request(
        {
            "model": "m",
            "max_tokens": 1,
            "messages": [],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        }
    )
    assert "tools" not in chat
    assert "dropped server tool web_search" in caplog.text


async def test_each_delta_goes_out_before_the_next_upstream_chunk_is_read():
    pulled = []

    async def source():
        for i in range(3):
            pulled.append(i)
            yield {"choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}]}
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}

    seen = []
    async for event in anthropic_response.stream_from_chat(source(), model="m"):
        if event["type"] == "content_block_delta":
            seen.append((event["delta"]["text"], len(pulled)))
    assert seen == [("t0", 1), ("t1", 2), ("t2", 3)]


def test_claude_codes_mid_conversation_system_messages_join_the_system_prompt():
    # Seen from Claude Code 2.1.197 (beta `mid-conversation-system-2026-04-07`): a system-role
    # message after the first user turn, alongside `thinking: adaptive` and `output_config`.
    chat = anthropic_request.to_chat_request(
        {
            "model": "m",
            "max_tokens": 32000,
            "system": [{"type": "text", "text": "You are Claude Code."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "say hello"}]},
                {"role": "system", "content": "Available agent types: claude, Explore."},
                {"role": "assistant", "content": "Hello"},
                {"role": "system", "content": [{"type": "text", "text": "Skills: none."}]},
                {"role": "user", "content": "again"},
            ],
            "thinking": {"type": "adaptive"},
            "output_config": {"effort": "high"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        }
    )
    assert chat["messages"] == [
        {
            "role": "system",
            "content": "You are Claude Code.\n\nAvailable agent types: claude, Explore.\n\nSkills: none.",
        },
        {"role": "user", "content": "say hello"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "again"},
    ]
    assert set(chat) == {"model", "messages", "max_tokens"}
