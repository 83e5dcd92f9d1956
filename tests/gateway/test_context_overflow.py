"""A prompt the model server counts past its window (the gateway's count is an estimate): the error
coding clients compact the conversation on, in each API's words, and a larger window tried first."""

from __future__ import annotations

import re

import anthropic
import openai
import orjson
import pytest

from channels.health import passive
from gateway.errors import context_overflow
from keys.models import UsageRecord
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import UPSTREAM_KEY, add_channel, retry_locked, wait_for

CHAT = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}


def vllm_refusal(message: str) -> dict:
    """vLLM's 400 for a request past --max-model-len: its words, no code the OpenAI SDK knows."""
    return {"mode": "status", "status": 400, "error_type": "BadRequestError", "error_message": message}


# vLLM 0.6 to 0.8: the prompt alone is too long.
PROMPT_TOO_LONG = vllm_refusal(
    "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens "
    "(9000 in the messages, 100 in the completion). Please reduce the length of the messages or completion."
)
# vLLM 0.10: the prompt fits, the output asked for does not.
OUTPUT_TOO_LONG = vllm_refusal(
    "'max_tokens' or 'max_completion_tokens' is too large: 2048. This model's maximum context length is "
    "8192 tokens and your request has 7000 input tokens (2048 > 8192 - 7000)."
)


def test_an_embedding_input_past_vllms_window_is_refused_on_the_input(setup, gateway_url, upstream):
    """vLLM's words for an embeddings input past --max-model-len: the error is about the input (its
    `param`, its advice), with the server's figures, not a conversation to shorten."""
    upstream.behave(
        **vllm_refusal(
            "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens in the "
            "input for embedding generation. Please reduce the length of the input."
        )
    )
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(setup, gateway_url).embeddings.create(model="qwen3-32b", input="hi")
    error = caught.value.body
    assert (error["code"], error["param"]) == ("context_length_exceeded", "input")
    assert error["message"] == (
        "This model's maximum context length is 8,192 tokens; the input is 9,000 tokens (the model server's "
        "count). Shorten or split the input."
    )


@pytest.fixture
def bigger(setup):
    """A second channel for the model, with a larger window, on its own fake upstream."""
    with FakeUpstream(api_key=UPSTREAM_KEY) as up:
        channel, route = add_channel(up, "bigger", priority=-10, model=setup.model)
        route.context_window = 32768
        route.save()
        up.channel, up.route = channel, route
        yield up


def openai_client(setup, gateway_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
def test_vllms_words_become_openais_code(setup, gateway_url, upstream, stream):
    """Cline and Codex compact the conversation on `context_length_exceeded`; vLLM said it in words only."""
    upstream.behave(**PROMPT_TOO_LONG)
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(setup, gateway_url).chat.completions.create(**CHAT, stream=stream)
    error = caught.value.body
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert error["message"].startswith("This model's maximum context length is 8192 tokens; the prompt is 9000 tokens")
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.http_status == 400 and "maximum context length is 8192" in record.error


def test_another_400_still_passes_through_as_the_upstream_said_it(setup, gateway_url, upstream):
    upstream.behave(**vllm_refusal("temperature must be non-negative"))
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(setup, gateway_url).chat.completions.create(**CHAT)
    assert caught.value.body["message"] == "temperature must be non-negative"


@pytest.mark.parametrize(
    ("refusal", "said"),
    [
        (PROMPT_TOO_LONG, r"prompt is too long: 9000 tokens > 8192 maximum"),
        (OUTPUT_TOO_LONG, r"input length and `max_tokens` exceed context limit: 7000 \+ 100 > 8192, decrease .*"),
    ],
)
def test_anthropic_clients_get_anthropics_words(setup, gateway_url, upstream, refusal, said):
    """Claude Code compacts on "prompt is too long", and lowers max_tokens on the second form's figures."""
    upstream.behave(**refusal)
    client = anthropic.Anthropic(base_url=gateway_url, api_key=setup.plaintext, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(**CHAT)
    error = caught.value.body["error"]
    assert error["type"] == "invalid_request_error" and re.fullmatch(said, error["message"]), error


@pytest.mark.parametrize("stream", [False, True])
def test_a_larger_window_takes_what_the_smaller_refused(setup, gateway_url, upstream, bigger, stream):
    retry_locked(passive.collect)
    upstream.behave(**PROMPT_TOO_LONG)
    reply = openai_client(setup, gateway_url).chat.completions.create(**CHAT, stream=stream)
    text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices) if stream else None
    assert (text if stream else reply.choices[0].message.content).startswith("tok0")
    assert len(upstream.requests) == 1 and len(bigger.requests) == 1
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.channel_id == bigger.channel.id
    assert "failover after context_length from primary" in record.route_explanation
    tallies = passive.collect()  # the smaller server answered as it should: no mark against it
    assert (tallies[setup.channel.id].ok_count, tallies[setup.channel.id].fail_count) == (1, 0)


def test_a_window_no_larger_than_the_refused_one_is_not_tried(setup, gateway_url, upstream, bigger):
    bigger.route.context_window = 8192
    bigger.route.save()
    upstream.behave(**PROMPT_TOO_LONG)
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(setup, gateway_url).chat.completions.create(**CHAT)
    assert caught.value.body["code"] == "context_length_exceeded"
    assert len(upstream.requests) == 1 and bigger.requests == []


def test_responses_clients_get_openais_code(setup, gateway_url, upstream):
    """Codex (the Responses API, always streamed) stops a turn and compacts on this code."""
    upstream.behave(**PROMPT_TOO_LONG)
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(setup, gateway_url).responses.create(model="qwen3-32b", input="hi", stream=True)
    assert caught.value.body["code"] == "context_length_exceeded"


ANTHROPIC = {
    "type": "error",
    "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"},
}


@pytest.mark.parametrize(
    ("said", "figures"),
    [
        (  # llama.cpp
            {
                "error": {
                    "code": 400,
                    "message": "request (1625 tokens) exceeds the available context size (512 tokens), "
                    "try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 1625,
                    "n_ctx": 512,
                }
            },
            (1625, 512),
        ),
        (  # vLLM before 0.10: the error object at the top
            {
                "object": "error",
                "message": "This model's maximum context length is 4096 tokens. However, you requested "
                "5000 tokens (4900 in the messages, 100 in the completion). Please reduce the length of the "
                "messages or "
                "completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
            (4900, 4096),
        ),
        (  # vLLM's V1 engine
            {
                "error": {
                    "message": "The decoder prompt (length 5000) is longer than the maximum model length of 4096. "
                    "Make sure that `max_model_len` is no smaller than the number of text tokens.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            },
            (5000, 4096),
        ),
        (  # SGLang
            {
                "object": "error",
                "message": "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
            (5000, 4096),
        ),
        (  # OpenAI
            {
                "error": {
                    "message": "This model's maximum context length is 128000 tokens. However, your messages "
                    "resulted in 130000 tokens. Please reduce the length of the messages.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
            (130000, 128000),
        ),
        (ANTHROPIC, (210000, 200000)),
    ],
    ids=["llama.cpp", "vllm-0.8", "vllm-v1", "sglang", "openai", "anthropic"],
)
def test_each_servers_words_are_read_with_their_figures(said, figures):
    overflow = context_overflow(400, orjson.dumps(said))
    assert overflow is not None and (overflow.prompt_tokens, overflow.window) == figures
    assert overflow.code == "context_length_exceeded" and overflow.status == 400


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, {"error": {"message": "temperature must be non-negative", "type": "BadRequestError", "code": 400}}),
        (400, {"object": "error", "message": "n must be 1 when stream is set", "type": "BadRequestError", "code": 400}),
        (500, ANTHROPIC),  # a server error is never the request's size
        (400, ["context length"]),
    ],
)
def test_other_answers_are_not_taken_for_it(status, body):
    assert context_overflow(status, orjson.dumps(body)) is None
