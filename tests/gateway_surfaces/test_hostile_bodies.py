"""Bodies with the wrong types where a translation reads them (Responses on a Chat channel, Chat
on an Anthropic channel): a 400 naming what is wrong, never a 500. The real gateway in front of
FakeUpstream; the Messages surface's own cases are in tests/gateway/test_hostile_requests.py."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway_surfaces.conftest import add_native_channel

RESPONSES = {"model": "qwen3-32b", "max_output_tokens": 5}
FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}}


def post(url: str, key: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def assert_400(r: httpx.Response, param: str) -> str:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    return error["message"]


@pytest.mark.parametrize(
    "body, param",
    [
        (  # an earlier assistant turn whose output_text is not a string
            {
                "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": 1}]},
                    {"role": "user", "content": "go on"},
                ]
            },
            "input[1]",
        ),
        ({"input": [{"role": "user", "content": [{"type": "input_text", "text": ["hi"]}]}]}, "input[0]"),
        ({"input": "hi", "tools": [{**FUNCTION, "name": ["f"]}]}, "tools"),
        ({"input": "hi", "tools": [FUNCTION], "tool_choice": {"type": "function", "name": ["f"]}}, "tool_choice"),
    ],
)
def test_a_responses_body_of_the_wrong_types_is_a_400(setup, gateway_url, upstream, body, param):
    assert_400(post(gateway_url, setup.plaintext, "/v1/responses", {**RESPONSES, **body}), param)
    assert upstream.requests == []


@pytest.fixture
def anthropic_up():
    with FakeUpstream(api_key="sk-native-secret") as up:
        yield up


def test_a_chat_text_part_that_is_not_a_string_is_a_400_on_an_anthropic_channel(setup, gateway_url, anthropic_up):
    add_native_channel(setup, anthropic_up, kind="anthropic")
    body = {
        "model": "qwen3-32b",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}],
    }
    message = assert_400(post(gateway_url, setup.plaintext, "/v1/chat/completions", body), "messages[0]")
    assert "`text` is not a string" in message
    assert anthropic_up.requests == []


@pytest.mark.parametrize("arguments, sent", [({"city": "Paris"}, {"city": "Paris"}), (7, {"value": 7})])
def test_tool_call_arguments_sent_as_json_not_text_reach_an_anthropic_channel(
    setup, gateway_url, anthropic_up, arguments, sent
):
    """A sloppy client's object (or number) where the arguments' JSON text belongs: a 500 before."""
    add_native_channel(setup, anthropic_up, kind="anthropic")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    r = post(
        gateway_url,
        setup.plaintext,
        "/v1/chat/completions",
        {"model": "qwen3-32b", "max_tokens": 5, "messages": messages},
    )
    assert r.status_code == 200, r.text
    tool_use = anthropic_up.requests[-1].json["messages"][1]["content"][0]
    assert tool_use["type"] == "tool_use" and tool_use["input"] == sent


@pytest.mark.parametrize("model", [["qwen3-32b"], 5, {"name": "qwen3-32b"}, True])
@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 5}),
        ("/v1/embeddings", {"input": "hi"}),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 5}),
        ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
        ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "hi"}]}),
    ],
)
def test_a_model_that_is_not_a_string_is_a_400_saying_so(setup, gateway_url, upstream, path, body, model):
    """It was answered "The request has no `model`." though the request had one, on every surface."""
    r = post(gateway_url, setup.plaintext, path, {"model": model, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"] == "`model` must be a string.", error
    if not path.startswith("/v1/messages"):  # (Anthropic's errors have no `param` nor `code`)
        assert (error["param"], error["code"]) == ("model", "invalid_value")
    assert upstream.requests == []
