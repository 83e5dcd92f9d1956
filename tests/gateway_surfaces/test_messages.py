"""Claude Code's API: the official anthropic SDK against the real gateway in front of FakeUpstream."""

from __future__ import annotations

import functools

import anthropic
import httpx
import pytest

from channels.models import Channel, Model
from keys.services import issue_key
from tests.gateway_surfaces.conftest import (
    UPSTREAM_KEY,
    add_channel,
    add_native_channel,
    record_for,
    set_limits,
)

TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}},
    }
]


@pytest.fixture
def client(setup, gateway_url):
    # Claude Code's ANTHROPIC_BASE_URL has no /v1; the SDK appends /v1/messages.
    return anthropic.Anthropic(base_url=gateway_url, api_key=setup.plaintext, max_retries=0)


def test_create_translates_to_chat_for_a_vllm_channel(setup, client, upstream):
    message = client.messages.create(
        model="qwen3-32b",
        max_tokens=3,
        system="Be brief.",
        messages=[{"role": "user", "content": "hello there"}],
    )
    assert [b.text for b in message.content] == ["tok0 tok1 tok2"]
    assert message.model == "qwen3-32b" and message.stop_reason == "max_tokens"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (4, 3)
    sent = upstream.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.json["model"] == "fake-model" and sent.json["max_tokens"] == 3
    assert sent.json["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    assert sent.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert "anthropic-version" not in {k.lower() for k in sent.headers}
    assert setup.plaintext not in str(sent.headers)
    (record,) = record_for(setup.key)
    assert (record.surface, record.stream, record.status) == ("messages", False, "ok")
    assert (record.prompt_tokens, record.completion_tokens, record.estimated) == (4, 3, False)
    assert record.channel_id == setup.channel.id


@pytest.mark.parametrize("kind, continues", [("vllm", True), ("sglang", True), ("llamacpp", False), ("openai", False)])
def test_an_assistant_prefill_is_continued_where_the_server_must_be_asked(setup, client, upstream, kind, continues):
    """Anthropic's prefill (the conversation ends with the start of the answer): vLLM and SGLang
    open a new assistant turn after it unless asked to continue it; llama-server continues it by
    itself, and a cloud provider would refuse the unknown fields."""
    Channel.objects.filter(pk=setup.channel.pk).update(kind=kind)
    prefill = [{"role": "user", "content": "Give me JSON."}, {"role": "assistant", "content": "{"}]
    client.messages.create(model="qwen3-32b", max_tokens=3, messages=prefill)
    sent = upstream.requests[-1].json
    assert sent["messages"][-1] == {"role": "assistant", "content": "{"}
    expected = {"continue_final_message": True, "add_generation_prompt": False} if continues else {}
    assert {k: sent[k] for k in ("continue_final_message", "add_generation_prompt") if k in sent} == expected

    client.messages.create(model="qwen3-32b", max_tokens=3, messages=prefill[:1])  # no prefill: nothing added
    assert "continue_final_message" not in upstream.requests[-1].json


def test_claude_codes_beta_query_and_bearer_auth_work(setup, gateway_url, upstream):
    client = anthropic.Anthropic(base_url=gateway_url, auth_token=setup.plaintext, max_retries=0)
    message = client.beta.messages.create(
        model="qwen3-32b",
        max_tokens=4000,
        betas=["claude-code-20250219", "interleaved-thinking-2025-05-14"],
        messages=[{"role": "user", "content": "hi"}],
        metadata={"user_id": "session-1"},
    )
    assert message.content[0].text == "tok0 tok1 tok2 tok3 tok4"
    sent = upstream.requests[-1]
    assert "anthropic-beta" not in {k.lower() for k in sent.headers}
    assert sent.json["max_tokens"] == 2048  # the route's max output, not the 4000 asked for


def test_stream_emits_the_full_event_sequence_and_records_exact_usage(setup, client):
    with client.messages.stream(model="qwen3-32b", max_tokens=100, messages=[{"role": "user", "content": "hi"}]) as s:
        kinds = []
        for event in s:
            kinds.append(event.type)
        final = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop", "message_delta"} <= set(kinds)
    assert final.content[0].text == "tok0 tok1 tok2 tok3 tok4"
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (1, 5)
    (record,) = record_for(setup.key)
    assert (record.surface, record.stream, record.prompt_tokens, record.completion_tokens) == ("messages", True, 1, 5)
    assert record.estimated is False and record.ttft_ms is not None


def test_raw_stream_has_ping_and_event_lines(setup, gateway_url):
    with httpx.stream(
        "POST",
        gateway_url + "/v1/messages?beta=true",
        headers={"x-api-key": setup.plaintext, "anthropic-version": "2023-06-01"},
        json={"model": "qwen3-32b", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "x"}]},
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        names = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_a_tool_call_split_over_many_chunks_round_trips(setup, client, upstream):
    upstream.behave(mode="tool_call")
    with client.messages.stream(
        model="qwen3-32b", max_tokens=200, tools=TOOLS, messages=[{"role": "user", "content": "weather in Paris?"}]
    ) as s:
        partial = [e.delta.partial_json for e in s if e.type == "content_block_delta"]
        first = s.get_final_message()
    assert len(partial) > 5  # the fake splits the arguments 4 characters at a time
    assert first.stop_reason == "tool_use"
    (call,) = first.content
    assert (call.type, call.name, call.input) == ("tool_use", "get_weather", {"city": "Paris", "unit": "celsius"})
    sent = upstream.requests[-1].json
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tools"][0]["function"]["parameters"] == TOOLS[0]["input_schema"]

    record_for(setup.key)  # usage written: the next request does not race the writer (SQLite)
    upstream.behave(mode="ok")
    second = client.messages.create(
        model="qwen3-32b",
        max_tokens=200,
        tools=TOOLS,
        messages=[
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}]},
        ],
    )
    assert second.stop_reason == "end_turn"
    messages = upstream.requests[-1].json["messages"]
    assert messages[1]["tool_calls"][0]["id"] == call.id
    assert messages[2] == {"role": "tool", "tool_call_id": call.id, "content": "18C"}


def test_a_streamed_tool_call_whose_arguments_are_not_json_still_parses(setup, client, upstream):
    """Regression (probe): a model whose arguments were not JSON (single quotes here) made the
    SDK's `messages.stream()` raise mid-answer. The block now ends as one object: the JSON part as
    the model wrote it, the rest kept as `raw_arguments` (a non-streamed answer keeps it all so)."""
    arguments = '{"city": "Paris", \'unit\': celsius}'
    upstream.behave(mode="tool_call", tool_arguments=arguments)
    ask = {"model": "qwen3-32b", "max_tokens": 200, "tools": TOOLS, "messages": [{"role": "user", "content": "?"}]}
    with client.messages.stream(**ask) as s:
        message = s.get_final_message()
    assert message.stop_reason == "tool_use"
    (call,) = message.content
    assert (call.name, call.input) == ("get_weather", {"city": "Paris", "raw_arguments": "'unit': celsius}"})
    record_for(setup.key)
    (call,) = client.messages.create(**ask).content
    assert call.input == {"raw_arguments": arguments}


def test_a_non_streamed_tool_call_has_parsed_input(setup, client, upstream):
    upstream.behave(mode="tool_call")
    message = client.messages.create(
        model="qwen3-32b",
        max_tokens=200,
        tools=TOOLS,
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "weather?"}],
    )
    assert message.stop_reason == "tool_use"
    assert message.content[0].input == {"city": "Paris", "unit": "celsius"}
    assert upstream.requests[-1].json["tool_choice"] == "required"


def test_a_non_streamed_tool_call_from_a_server_without_delta_indexes_is_one_block(setup, client, upstream):
    upstream.behave(mode="tool_call", tool_index=False)  # the call's argument pieces carry no `index`
    message = client.messages.create(
        model="qwen3-32b", max_tokens=200, tools=TOOLS, messages=[{"role": "user", "content": "weather?"}]
    )
    (call,) = message.content
    assert (call.name, call.input) == ("get_weather", {"city": "Paris", "unit": "celsius"})
    assert message.stop_reason == "tool_use"


def test_count_tokens_uses_the_vllm_tokenizer(setup, client, upstream):
    count = client.messages.count_tokens(
        model="qwen3-32b", messages=[{"role": "user", "content": "one two three four"}]
    )
    assert count.input_tokens == 4 + 4  # four words from /tokenize + one message's template overhead
    tokenize = upstream.requests[-1]
    assert tokenize.path == "/tokenize" and tokenize.json == {"model": "fake-model", "prompt": "one two three four"}


def test_count_tokens_estimates_for_a_channel_without_tokenizer(setup, client):
    Channel.objects.filter(pk=setup.channel.pk).update(kind="openai")
    setup.channel.refresh_from_db()
    setup.channel.save()  # invalidate the gateway's route cache
    count = client.messages.count_tokens(model="qwen3-32b", messages=[{"role": "user", "content": "x" * 40}])
    assert count.input_tokens == 10 + 4


def test_errors_have_the_anthropic_shape(setup, gateway_url, client):
    bad = anthropic.Anthropic(base_url=gateway_url, api_key="gpk-not-a-real-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        bad.messages.create(model="qwen3-32b", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "authentication_error"
    assert "gpk-not-a-real-key" not in caught.value.body["error"]["message"]

    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(model="qwen3-32B", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["error"]["type"] == "not_found_error"
    assert "qwen3-32b" in caught.value.body["error"]["message"]

    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="qwen3-32b",
            max_tokens=5,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
                        }
                    ],
                }
            ],
        )
    assert caught.value.body["error"]["type"] == "invalid_request_error"


def test_a_misspelt_model_suggests_the_closest_model_the_key_may_use(setup, gateway_url, upstream, alice):
    """Claude Code's model typo gets Anthropic's not_found_error with the "did you mean" the
    OpenAI surfaces give, among the models the key may use only."""
    hidden = Model.objects.create(name="qwen3-32b-instruct")
    add_channel(upstream, "second", model=hidden)
    _key, scoped = issue_key(owner=alice, name="scoped", allowed_models=[setup.model])
    said = {}
    for name, key in (("all", setup.plaintext), ("scoped", scoped)):
        client = anthropic.Anthropic(base_url=gateway_url, api_key=key, max_retries=0)
        for model in ("qwen-32b", "qwen3-32b-instrct"):
            with pytest.raises(anthropic.NotFoundError) as caught:
                client.messages.create(model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
            assert caught.value.body["error"]["type"] == "not_found_error"
            said[name, model] = caught.value.body["error"]["message"]
        with pytest.raises(anthropic.NotFoundError) as caught:
            client.models.retrieve("qwen-32b")
        said[name, "retrieve"] = caught.value.body["error"]["message"]
    assert (
        "Did you mean 'qwen3-32b'?" in said["all", "qwen-32b"]
        and "Did you mean 'qwen3-32b'?" in said["all", "retrieve"]
    )
    assert "Did you mean 'qwen3-32b-instruct'?" in said["all", "qwen3-32b-instrct"]
    for model in ("qwen-32b", "qwen3-32b-instrct", "retrieve"):
        assert "Did you mean 'qwen3-32b'?" in said["scoped", model]
        assert "qwen3-32b-instruct" not in said["scoped", model]


def test_request_limit_answers_429_in_anthropic_shape_and_records_it(setup, client):
    set_limits(setup.key, requests_per_minute=2)
    for n in range(1, 3):
        client.messages.create(model="qwen3-32b", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        record_for(setup.key, n)
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model="qwen3-32b", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["error"]["type"] == "rate_limit_error"
    assert int(caught.value.response.headers["retry-after"]) >= 1
    records = record_for(setup.key, 3)
    assert [r.status for r in records] == ["ok", "ok", "rate_limited"]
    assert {r.surface for r in records} == {"messages"}


def test_token_reservations_settle_to_the_real_usage(setup, client):
    # Each request reserves its prompt estimate + max_tokens (40) and settles to what it used (~6).
    # Without settling, the third request would not fit in 100 tokens a day.
    set_limits(setup.key, tokens_per_day=100)
    for n in range(1, 4):
        with client.messages.stream(
            model="qwen3-32b", max_tokens=40, messages=[{"role": "user", "content": "hi"}]
        ) as s:
            s.get_final_message()
        record_for(setup.key, n)  # settled by now: the record is written after the settle
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model="qwen3-32b", max_tokens=90, messages=[{"role": "user", "content": "hi"}])


def test_failover_to_the_next_channel_before_the_first_byte(setup, client, upstream, second_upstream):
    backup, _ = add_channel(second_upstream, "backup", priority=-1, model=setup.model)
    upstream.enqueue(mode="status", status=503)
    with client.messages.stream(model="qwen3-32b", max_tokens=50, messages=[{"role": "user", "content": "hi"}]) as s:
        assert s.get_final_message().content[0].text.startswith("tok0")
    assert second_upstream.requests[-1].path == "/v1/chat/completions"
    (record,) = record_for(setup.key)
    assert record.channel_id == backup.id and record.status == "ok"


def test_an_upstream_dying_mid_stream_becomes_an_anthropic_error_event(setup, client, upstream):
    upstream.behave(mode="disconnect", disconnect_after=3)
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(
            model="qwen3-32b", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        ) as s:
            s.get_final_message()
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "api_error"
    (record,) = record_for(setup.key)
    assert record.status == "upstream_error" and record.completion_tokens > 0


def test_a_client_disconnect_cancels_the_upstream_and_records_usage(setup, gateway_url, upstream):
    upstream.behave(mode="stall", stall_after=3)
    with httpx.stream(
        "POST",
        gateway_url + "/v1/messages",
        headers={"x-api-key": setup.plaintext},
        json={"model": "qwen3-32b", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "x"}]},
        timeout=10,
    ) as r:
        for line in r.iter_lines():
            if "text_delta" in line:
                break
    (record,) = record_for(setup.key)
    assert record.status == "client_disconnected" and record.surface == "messages"
    assert record.completion_tokens >= 1
    from tests.gateway_surfaces.conftest import wait_for

    wait_for(lambda: upstream.open_streams == 0)


def test_an_anthropic_channel_gets_the_request_as_is(setup, client, native_upstream):
    channel = add_native_channel(setup, native_upstream, kind="anthropic")
    message = client.beta.messages.create(
        model="qwen3-32b", max_tokens=9, betas=["claude-code-20250219"], messages=[{"role": "user", "content": "a b"}]
    )
    assert message.content[0].text == "tok0 tok1 tok2 tok3 tok4"
    sent = native_upstream.requests[-1]
    assert sent.path == "/v1/messages" and sent.json["model"] == "native-model" and sent.json["max_tokens"] == 9
    headers = {k.lower(): v for k, v in sent.headers.items()}
    assert headers["x-api-key"] == "sk-native-secret" and "authorization" not in headers
    assert headers["anthropic-version"]  # whatever the SDK sent, unchanged
    assert headers["anthropic-beta"] == "claude-code-20250219"
    record_for(setup.key)
    with client.messages.stream(model="qwen3-32b", max_tokens=9, messages=[{"role": "user", "content": "a b c"}]) as s:
        assert s.get_final_message().usage.output_tokens == 5
    first, second = record_for(setup.key, 2)
    assert (first.prompt_tokens, first.completion_tokens) == (2, 5)
    assert (second.prompt_tokens, second.completion_tokens, second.stream, second.estimated) == (3, 5, True, False)
    assert second.channel_id == channel.id


@pytest.mark.parametrize("empty", ["", []])
@pytest.mark.parametrize("channel", ["vllm", "anthropic"])
def test_a_message_without_content_is_anthropics_400_before_any_upstream(
    setup, client, upstream, native_upstream, empty, channel
):
    """Anthropic refuses it; a Chat channel was sent an empty user message and answered it."""
    if channel == "anthropic":
        add_native_channel(setup, native_upstream, kind="anthropic")
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": empty},
    ]
    for messages, index in ((turns, 2), ([turns[0], {"role": "assistant", "content": empty}, turns[0]], 1)):
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(model="qwen3-32b", max_tokens=5, messages=messages)
        assert caught.value.body == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": f"`messages[{index}]`: all messages must have non-empty content "
                "except for the optional final assistant message.",
            },
        }
    assert not upstream.requests and not native_upstream.requests
    # The final assistant message, a prefill, may be empty.
    client.messages.create(
        model="qwen3-32b", max_tokens=5, messages=[turns[0], {"role": "assistant", "content": empty}]
    )
    assert len((native_upstream if channel == "anthropic" else upstream).requests) == 1


@pytest.mark.parametrize(
    ("content", "field", "says"),
    [
        ("   ", "content", "must contain non-whitespace text"),
        ([{"type": "text", "text": " \n"}], "content[0]", "must contain non-whitespace text"),
        ([{"type": "text", "text": "look"}, {"type": "text", "text": ""}], "content[1]", "must be non-empty"),
    ],
)
@pytest.mark.parametrize("channel", ["vllm", "anthropic"])
def test_a_message_of_blank_text_is_anthropics_400_before_any_upstream(
    setup, client, upstream, native_upstream, content, field, says, channel
):
    """Anthropic refuses a text block without words, in any message but the final assistant one;
    a Chat channel was sent the blank turn and answered it, and count_tokens counted it."""
    if channel == "anthropic":
        add_native_channel(setup, native_upstream, kind="anthropic")
    for messages, index in (
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": content},
            ],
            2,
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": content},
                {"role": "user", "content": "hi"},
            ],
            1,
        ),
    ):
        for call in (functools.partial(client.messages.create, max_tokens=5), client.messages.count_tokens):
            with pytest.raises(anthropic.BadRequestError) as caught:
                call(model="qwen3-32b", messages=messages)
            assert caught.value.body == {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": f"`messages[{index}].{field}`: text content blocks {says}.",
                },
            }
    assert not upstream.requests and not native_upstream.requests


@pytest.mark.parametrize("empty", ["", []])
@pytest.mark.parametrize("channel", ["vllm", "anthropic"])
def test_count_tokens_refuses_a_message_without_content_before_any_tokenizer(
    setup, client, upstream, native_upstream, empty, channel
):
    if channel == "anthropic":
        add_native_channel(setup, native_upstream, kind="anthropic")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.count_tokens(model="qwen3-32b", messages=[{"role": "user", "content": empty}])
    assert caught.value.body["error"]["message"] == (
        "`messages[0]`: all messages must have non-empty content except for the optional final assistant message."
    )
    assert not upstream.requests and not native_upstream.requests


@pytest.mark.parametrize("name", ["Read.File", "x" * 65])
def test_a_tool_name_a_cloud_chat_channel_refuses_is_our_400_by_the_clients_field(setup, client, upstream, name):
    """OpenAI takes 64 letters, digits, `_` and `-` where Anthropic takes 128: its 400 would name
    `tools[1].function.name`, which Claude Code never sent. A local server takes any name."""
    tools = [{"type": "web_search_20250305", "name": "web_search"}, {**TOOLS[0], "name": name}]
    turn = [{"role": "user", "content": "hi"}]
    Channel.objects.filter(pk=setup.channel.pk).update(kind="openai")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="qwen3-32b", max_tokens=5, messages=turn, tools=tools)
    assert caught.value.body["error"]["message"] == (
        "`tools[1].name` is not a tool name this model's channel (OpenAI-compatible cloud) accepts: "
        "use letters, digits, underscores and dashes, at most 64 of them."
    )
    assert not upstream.requests
    for kind, locality in (("openai", "local"), ("vllm", "external"), ("llamacpp", "external")):
        setup.channel.kind, setup.channel.locality = kind, locality
        setup.channel.save()  # (through the model: the gateway's route cache hears of it)
        client.messages.create(model="qwen3-32b", max_tokens=5, messages=turn, tools=tools)
        assert [t["function"]["name"] for t in upstream.requests[-1].json["tools"]] == [name]


def test_a_chat_channel_marked_as_speaking_messages_gets_it_as_is_with_bearer_auth(setup, client, native_upstream):
    add_native_channel(setup, native_upstream, kind="vllm", speaks_messages=True)
    client.messages.create(model="qwen3-32b", max_tokens=9, messages=[{"role": "user", "content": "hi"}])
    sent = native_upstream.requests[-1]
    assert sent.path == "/v1/messages"
    assert sent.headers["Authorization"] == "Bearer sk-native-secret"


def test_hello_probe_and_anthropic_model_discovery(setup, gateway_url, client):
    assert httpx.head(gateway_url + "/api/hello").status_code == 200
    page = client.models.list(limit=1000)
    assert [m.id for m in page.data] == ["qwen3-32b"]
    model = page.data[0]
    assert model.type == "model" and model.display_name == "qwen3-32b" and model.created_at.year >= 1970
    raw = httpx.get(
        gateway_url + "/v1/models?limit=1000",
        headers={"x-api-key": setup.plaintext, "anthropic-version": "2023-06-01"},
    ).json()
    assert raw["has_more"] is False and raw["first_id"] == raw["last_id"] == "qwen3-32b"
    openai_shape = httpx.get(gateway_url + "/v1/models", headers={"authorization": f"Bearer {setup.plaintext}"})
    assert openai_shape.json()["object"] == "list"


def test_count_tokens_checks_the_model_like_create(setup, client):
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.count_tokens(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["error"]["type"] == "not_found_error"


def test_an_upstream_client_error_is_relayed_in_anthropic_shape(setup, client, upstream):
    upstream.enqueue(mode="status", status=400, error_message="tools[0].function.name must not be empty")
    with pytest.raises(anthropic.BadRequestError) as caught:
        with client.messages.stream(model="qwen3-32b", max_tokens=5, messages=[{"role": "user", "content": "x"}]) as s:
            s.get_final_message()
    assert caught.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "tools[0].function.name must not be empty",
    }
    (record,) = record_for(setup.key)
    assert record.http_status == 400 and record.surface == "messages"


def test_claude_codes_recorded_request_streams_through(setup, gateway_url, upstream):
    from tests.translate.test_real_clients import load

    recorded = load("claude_code_2.1.197_request.json")
    body = {**recorded["body"], "model": "qwen3-32b"}
    headers = {**recorded["headers"], "authorization": f"Bearer {setup.plaintext}"}
    with httpx.stream("POST", gateway_url + "/v1/messages?beta=true", json=body, headers=headers) as r:
        assert r.status_code == 200
        names = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert len(upstream.requests[-1].json["tools"]) == len(body["tools"])


def test_upstream_reasoning_becomes_thinking_only_when_asked(setup, client, upstream):
    upstream.behave(reasoning="the user wants a greeting")
    ask = {"model": "qwen3-32b", "max_tokens": 1024, "messages": [{"role": "user", "content": "hi"}]}
    with client.messages.stream(**ask, thinking={"type": "enabled", "budget_tokens": 512}) as s:
        thought = s.get_final_message()
    assert [b.type for b in thought.content] == ["thinking", "text"]
    assert thought.content[0].thinking == "the user wants a greeting"
    assert thought.usage.output_tokens == 5 + 5
    plain = client.messages.create(**ask)
    assert [b.type for b in plain.content] == ["text"]


def test_a_single_model_in_anthropic_shape(setup, client, gateway_url):
    model = client.models.retrieve("qwen3-32b")
    assert (model.id, model.type, model.display_name) == ("qwen3-32b", "model", "qwen3-32b")
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("nope")
    openai_shape = httpx.get(
        gateway_url + "/v1/models/qwen3-32b", headers={"authorization": f"Bearer {setup.plaintext}"}
    )
    assert openai_shape.json()["object"] == "model"


def test_count_tokens_asks_an_anthropic_channel(setup, client, native_upstream):
    add_native_channel(setup, native_upstream, kind="anthropic")
    count = client.messages.count_tokens(
        model="qwen3-32b", system="be nice", messages=[{"role": "user", "content": "one two three"}]
    )
    assert count.input_tokens == 5
    sent = native_upstream.requests[-1]
    assert sent.path == "/v1/messages/count_tokens" and sent.json["model"] == "native-model"
    assert sent.headers["x-api-key"] == "sk-native-secret"


@pytest.mark.parametrize("stream", [False, True])
def test_usage_is_estimated_not_zero_when_the_upstream_reports_none(setup, client, upstream, stream):
    upstream.behave(mode="omit_usage")
    ask = {"model": "qwen3-32b", "max_tokens": 50, "messages": [{"role": "user", "content": "abcdefgh"}]}
    if stream:
        with client.messages.stream(**ask) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**ask)
    assert message.content[0].text == "tok0 tok1 tok2 tok3 tok4"
    (record,) = record_for(setup.key)
    # The channel (vLLM) has /tokenize: 1 token by the fake's tokenizer + 4 for the message's markers.
    assert record.estimated is True and record.prompt_tokens == 1 + 4 and record.completion_tokens > 0
    assert message.usage.output_tokens == record.completion_tokens


def test_a_stop_sequence_comes_back_as_stop_sequence_streamed_or_not(setup, client, upstream):
    ask = {
        "model": "qwen3-32b",
        "max_tokens": 50,
        "stop_sequences": ["tok3"],
        "messages": [{"role": "user", "content": "n"}],
    }
    message = client.messages.create(**ask)
    assert upstream.requests[-1].json["stop"] == ["tok3"]
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "tok3")
    assert message.content[0].text == "tok0 tok1 tok2"
    with client.messages.stream(**ask) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "tok3")
    # A server that does not say which stop string matched (llama.cpp): the end of the turn.
    upstream.flavour = "llamacpp"
    assert client.messages.create(**ask).stop_reason == "end_turn"


def test_an_overloaded_anthropic_channel_is_a_529_with_retry_after(setup, client, native_upstream):
    add_native_channel(setup, native_upstream, kind="anthropic")
    native_upstream.behave(mode="status", status=529, error_message="Overloaded", retry_after="5")
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="qwen3-32b", max_tokens=9, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 529 and caught.value.response.headers["retry-after"] == "5"
    assert caught.value.body["error"]["type"] == "overloaded_error"


def test_the_access_log_names_the_key_and_model_of_a_count_tokens_call(setup, settings, tmp_path, monkeypatch, caplog):
    """Every authenticated path logs its key prefix and model, count_tokens too (it reserves nothing)."""
    from gateway.asgi import build_application
    from portal import asgi
    from tests.gateway.conftest import ThreadServer

    monkeypatch.setenv("PORTAL_ACCESS_LOG", "1")  # read when the application is built, as `portal up` does
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    server = ThreadServer(asgi.TrustedProxies(asgi.BodyDeadline(build_application(asgi.django_app)))).start()
    try:
        client = anthropic.Anthropic(base_url=server.url, api_key=setup.plaintext, max_retries=0)
        with caplog.at_level("INFO", logger="gateway.access"):
            client.messages.count_tokens(model="qwen3-32b", messages=[{"role": "user", "content": "one two"}])
    finally:
        server.stop()
    (line,) = [
        r.getMessage() for r in caplog.records if r.name == "gateway.access" and "/count_tokens" in r.getMessage()
    ]
    assert "model=qwen3-32b" in line and f"key={setup.key.prefix}…" in line, line
    assert setup.plaintext not in line


def test_a_tool_use_of_an_earlier_turn_a_cloud_chat_channel_refuses_is_our_400_by_the_clients_field(
    setup, client, upstream
):
    """Sent as `tool_calls`, its name meets OpenAI's rule; OpenAI's 400 would name
    `messages[2].tool_calls[0].function.name`, a field of the translation."""
    turns = [
        {"role": "user", "content": "Read it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read.File", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "text"}]},
    ]
    Channel.objects.filter(pk=setup.channel.pk).update(kind="openai")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="qwen3-32b", max_tokens=5, messages=turns, tools=TOOLS)
    assert caught.value.body["error"]["message"] == (
        "`messages[1].content[0].name` is not a tool name this model's channel (OpenAI-compatible cloud) accepts: "
        "use letters, digits, underscores and dashes, at most 64 of them."
    )
    assert not upstream.requests
    setup.channel.kind = "vllm"  # a local server takes it
    setup.channel.save()
    client.messages.create(model="qwen3-32b", max_tokens=5, messages=turns, tools=TOOLS)
    assert upstream.requests[-1].json["messages"][1]["tool_calls"][0]["function"]["name"] == "Read.File"
