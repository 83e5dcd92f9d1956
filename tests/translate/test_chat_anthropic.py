"""Chat Completions -> Messages requests and Messages -> Chat answers, checked against the official
SDKs' own types (anthropic's request params, openai's completion and chunk models and its stream
accumulator)."""

from __future__ import annotations

import json

import pytest
from anthropic.types import MessageCreateParams
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import TypeAdapter

from gateway.surfaces.chat_anthropic import as_completion, completions_as_chat
from gateway.translate import TranslationError, chat_request, chat_response
from tests.translate.tables import Ids

MESSAGE_PARAMS = TypeAdapter(MessageCreateParams)
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]


def translate(body: dict, default: int = 1000) -> dict:
    out = chat_request.to_messages_request({"model": "m", **body}, default_max_tokens=default)
    MESSAGE_PARAMS.validate_python(out)
    return out


def test_system_and_developer_messages_become_the_system_prompt():
    out = translate(
        {
            "messages": [
                {"role": "system", "content": "A."},
                {"role": "user", "content": "hi"},
                {"role": "developer", "content": [{"type": "text", "text": "B."}]},
            ]
        }
    )
    assert out["system"] == "A.\n\nB."
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert out["max_tokens"] == 1000  # the default: Messages requires max_tokens


def test_a_tool_loop_merges_results_into_one_user_turn_first():
    out = translate(
        {
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": "Calling.",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
                        {"id": "c2", "type": "function", "function": {"name": "f", "arguments": ""}},
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "one"},
                {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "two"}]},
                {"role": "user", "content": "and?"},
            ],
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "f"}},
        }
    )
    assert out["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
            {"type": "tool_use", "id": "c2", "name": "f", "input": {}},
        ],
    }
    assert out["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "one"},
            {"type": "tool_result", "tool_use_id": "c2", "content": [{"type": "text", "text": "two"}]},
            {"type": "text", "text": "and?"},
        ],
    }
    assert out["tools"] == [{"name": "f", "input_schema": {"type": "object", "properties": {}}}]
    assert out["tool_choice"] == {"type": "tool", "name": "f"}


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("call_abc-1", "call_abc-1"),  # valid: as sent
        ("toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9"),
        ("functions.get_weather:0", "functions_get_weather_0_79ac1aaab216"),
        ("functions_get_weather_0", "functions_get_weather_0"),
        ("a b", "a_b_c8687a08aa5d"),
        ("a_b", "a_b"),
        ("天气", "___4d947325473f"),
    ],
)
def test_tool_call_ids_anthropic_refuses_are_rewritten_in_calls_and_results(sent, expected):
    out = translate(
        {
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "tool_calls": [{"id": sent, "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": sent, "content": "one"},
            ],
        }
    )
    assert out["messages"][1]["content"][0]["id"] == expected
    assert out["messages"][2]["content"][0]["tool_use_id"] == expected


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        ("none", None, {"type": "none"}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
def test_tool_choice_maps(choice, parallel, expected):
    body = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
    if choice is not None:
        body["tool_choice"] = choice
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    assert translate(body)["tool_choice"] == expected


def test_stop_temperature_user_and_max_completion_tokens():
    out = translate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "stop": ["END", "  "],
            "temperature": 1.7,
            "top_p": 0.9,
            "user": "u-1",
            "max_completion_tokens": 77,
            "seed": 3,
        }
    )
    assert out["stop_sequences"] == ["END"] and out["temperature"] == 1.0 and out["top_p"] == 0.9
    assert out["metadata"] == {"user_id": "u-1"} and out["max_tokens"] == 77 and "seed" not in out
    assert translate({"messages": [{"role": "user", "content": "x"}], "stop": "\n\n"}).get("stop_sequences") is None


@pytest.mark.parametrize(
    ("effort", "max_tokens", "expected"),
    [("low", 4000, 1024), ("medium", 8000, 4096), ("high", 8000, 7999), ("low", 1024, None), ("minimal", 8000, None)],
)
def test_reasoning_effort_becomes_a_thinking_budget_below_max_tokens(effort, max_tokens, expected):
    out = translate(
        {"messages": [{"role": "user", "content": "x"}], "reasoning_effort": effort, "temperature": 0.3},
        default=max_tokens,
    )
    if expected is None:
        assert "thinking" not in out and out["temperature"] == 0.3
    else:
        assert out["thinking"] == {"type": "enabled", "budget_tokens": expected} and "temperature" not in out


def test_no_thinking_inside_a_tool_loop():
    out = translate(
        {
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "ok"},
            ],
            "reasoning_effort": "high",
        },
        default=20000,
    )
    assert "thinking" not in out


def test_images_and_cache_control():
    out = translate(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "long", "cache_control": {"type": "ephemeral"}},
                        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                        {"type": "image_url", "image_url": {"url": "http://example.com/a.png", "detail": "low"}},
                    ],
                }
            ]
        }
    )
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "long", "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
        {"type": "image", "source": {"type": "url", "url": "http://example.com/a.png"}},
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 2}, "n"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}, "messages[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}]},
            "messages[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:image/bmp;base64,AA=="}}],
                    }
                ]
            },
            "messages[0]",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
        ({"messages": [{"role": "system", "content": "only a system prompt"}]}, "messages"),
        ({"reasoning_effort": "max"}, "reasoning_effort"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
    ],
)
def test_it_refuses_what_messages_cannot_express_naming_the_param(body, param):
    with pytest.raises(TranslationError) as caught:
        chat_request.to_messages_request(
            {"model": "m", "messages": [{"role": "user", "content": "x"}], **body}, default_max_tokens=10
        )
    assert caught.value.param == param


MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude",
    "content": [
        {"type": "thinking", "thinking": "Hmm.", "signature": "s"},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": [1, 2]}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 7, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 5},
}


def test_a_message_becomes_a_chat_completion_with_cache_usage():
    out = chat_response.from_message(MESSAGE, model="team-model", created=1, make_id=Ids())
    completion = ChatCompletion.model_validate(out)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me check."
    assert out["choices"][0]["message"]["reasoning_content"] == "Hmm."
    (call,) = choice.message.tool_calls
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("toolu_1", "f", {"a": [1, 2]})
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (45, 7, 52)
    assert usage.prompt_tokens_details.cached_tokens == 30
    assert completion.model == "team-model"


@pytest.mark.parametrize(
    ("stop", "finish"),
    [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("refusal", "content_filter")],
)
def test_stop_reasons_map_to_finish_reasons(stop, finish):
    out = chat_response.from_message(
        {**MESSAGE, "content": [{"type": "text", "text": "x"}], "stop_reason": stop}, model="m"
    )
    assert out["choices"][0]["finish_reason"] == finish


def test_errors_keep_the_openai_shape_and_529_becomes_503():
    status, body = chat_response.error_from_anthropic(
        529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    assert (
        status == 503 and body["error"]["type"] == "service_unavailable" and body["error"]["code"] == "overloaded_error"
    )
    status, body = chat_response.error_from_anthropic(
        400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    )
    assert (status, body["error"]["message"], body["error"]["type"]) == (400, "bad", "invalid_request_error")
    status, body = chat_response.error_from_anthropic(502, None)
    assert status == 502 and "502" in body["error"]["message"]


STREAM = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 1,
                "cache_read_input_tokens": 30,
                "cache_creation_input_tokens": 5,
            },
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm."}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me "}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "check."}},
    {"type": "content_block_stop", "index": 1},
    {
        "type": "content_block_start",
        "index": 2,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
    },
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"a": '}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "[1, 2]}"}},
    {"type": "content_block_stop", "index": 2},
    {
        "type": "content_block_start",
        "index": 3,
        "content_block": {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}},
    },
    {"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
    {"type": "content_block_stop", "index": 3},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 20},
    },
    {"type": "message_stop"},
]


def run(events: list[dict], **kwargs) -> tuple[chat_response.StreamTranslator, list[dict]]:
    state = chat_response.StreamTranslator(model="team-model", created=1, make_id=Ids(), **kwargs)
    out = [chunk for event in events for chunk in state.feed(event)]
    return state, out + state.finish()


def test_a_stream_becomes_chunks_the_openai_accumulator_assembles():
    state, chunks = run(STREAM, include_usage=True)
    accumulator = ChatCompletionStreamState()
    for chunk in chunks:
        accumulator.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    final = accumulator.get_final_completion()
    choice = final.choices[0]
    assert choice.message.content == "Let me check." and choice.finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [
        ("toolu_1", "f", '{"a": [1, 2]}'),
        ("toolu_2", "g", "{}"),
    ]
    assert [
        c["choices"][0]["delta"]["tool_calls"][0]["index"]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ] == [0, 0, 0, 1, 1]
    assert "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks if c["choices"]) == "Hmm."
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"] == {
        "prompt_tokens": 45,
        "completion_tokens": 20,
        "total_tokens": 65,
        "prompt_tokens_details": {"cached_tokens": 30, "cache_write_tokens": 5},
    }
    assert state.done
    assert chat_response.encode(chunks[:1], done=True).endswith(b"\n\ndata: [DONE]\n\n")


def test_without_include_usage_no_chunk_carries_usage():
    _, chunks = run(STREAM)
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_an_error_event_ends_the_stream_without_the_upstreams_text():
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "secret sk-ant-123"}}
    state, chunks = run([*STREAM[:8], error, *STREAM[8:]])
    assert "error" in chunks[-1] and "sk-ant" not in json.dumps(chunks)
    assert chunks[-1]["error"]["code"] == "overloaded_error" and state.done


def test_a_stream_cut_before_message_stop_ends_with_an_error():
    _, chunks = run(STREAM[:9])
    assert chunks[-1]["error"]["code"] == "api_error"


def test_legacy_completions_are_one_user_message_and_come_back_as_text_completion():
    chat = completions_as_chat({"model": "m", "prompt": ["Say hi"], "max_tokens": 3})
    assert chat == {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "Say hi"}]}
    message = {**MESSAGE, "content": [{"type": "text", "text": "hi"}], "stop_reason": "max_tokens"}
    out = as_completion(chat_response.from_message(message, model="m"))
    Completion.model_validate(out)
    assert out["choices"][0]["text"] == "hi" and out["choices"][0]["finish_reason"] == "length"
    for body, param in (
        ({"prompt": [1, 2]}, "prompt"),
        ({"prompt": "x", "echo": True}, "echo"),
        ({"prompt": "x", "logprobs": 2}, "logprobs"),
    ):
        with pytest.raises(TranslationError) as caught:
            completions_as_chat(body)
        assert caught.value.param == param
