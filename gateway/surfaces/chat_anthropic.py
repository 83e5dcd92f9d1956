"""Chat Completions (and legacy Completions) on Anthropic channels: the wiring of
`gateway.translate.chat_request` / `chat_response` into the OpenAI surface (`surfaces.chat`).

`chat.py` asks `outgoing_for` what each route is sent (an Anthropic channel gets the request
translated to `/messages`, every other channel the body as sent) and relays a stream from an
Anthropic channel through `AnthropicChatDialect` (Messages events -> Chat chunks). Like Chat on
every other channel, a non-streaming request is streamed upstream too and its answer assembled
inside the attempt (`MessagesAsChat`, read by `call.send_upstream`), so a long answer is bounded
by liveness (first token, gaps) rather than the total deadline, and a failure fails over. Legacy
`/v1/completions` is translated when its `prompt` is one string (it becomes one user message; the
answer comes back as a `text_completion`); a prompt list, token ids, `suffix`, `echo`, `best_of`
or `logprobs` are refused with a 400 saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings

from gateway.cache import RouteInfo
from gateway.call import Call, Outgoing, UpstreamResponse
from gateway.chunks import ChatAssembly, event_data, parse_event
from gateway.errors import Failure, UpstreamStreamError
from gateway.http import GatewayError, sse_error_event
from gateway.native import MessagesReader, ReadsNative, anthropic_usage
from gateway.translate import TranslationError, chat_request, chat_response
from gateway.translate.common import answer_usage
from gateway.usage import Usage, estimate_tokens, usage_from
from keys.choices import ApiSurface


def translates(route: RouteInfo) -> bool:
    """Does this route need the Chat request translated to Messages?"""
    return route.kind == "anthropic"


def outgoing_for(
    call: Call,
    surface: str,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    default_max_tokens: int | None,
    as_sent: Callable[[TranslationError], TranslationError] | None = None,
) -> Callable[[RouteInfo], Outgoing]:
    """What each route is sent: the body as is, or (Anthropic channels) its Messages translation,
    made once, when the first Anthropic route is tried. An untranslatable body fails the call with
    400 only if such a route is reached; `as_sent` names the field as the client sent it when
    `body` is itself a translation (a Responses client's `input[2]` for `messages[3]`)."""
    translated: dict[str, Any] | None = None
    original = dict(body)  # as the client sent it: a Chat route tried first is asked for a stream
    model = call.model.name

    def assemble(limit: int | None) -> ChatAssembly:
        return ChatAssembly(limit, as_chat=MessagesAsChat(model))

    def outgoing(route: RouteInfo) -> Outgoing:
        nonlocal translated
        if not translates(route):
            return Outgoing(path, body, headers)
        if surface == ApiSurface.EMBEDDINGS:
            raise GatewayError(
                400, "This model's channel (Anthropic) serves no embeddings.", code="invalid_request", param="model"
            )
        if translated is None:
            try:
                chat = completions_as_chat(original) if surface == ApiSurface.COMPLETIONS else original
                # (each route is asked for no more than its max output: `call.within_route_output`)
                default = default_max_tokens or int(settings.GATEWAY_DEFAULT_MAX_TOKENS)
                translated = chat_request.to_messages_request(chat, default_max_tokens=default)
            except TranslationError as exc:
                named = as_sent(exc) if as_sent is not None else exc
                raise GatewayError(400, named.message, code="invalid_request", param=named.param) from None
        return Outgoing("/messages", dict(translated), headers, anthropic_native=True, assemble=assemble)

    return outgoing


def completions_as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A legacy Completions body as a Chat one: the one prompt string becomes one user message."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise TranslationError(
            "On this model's channel (Anthropic), legacy completions take one `prompt` string (it is sent as "
            "one user message); use /v1/chat/completions for anything else.",
            "prompt",
        )
    asked = {
        "suffix": bool(body.get("suffix")),
        "echo": bool(body.get("echo")),
        "best_of": body.get("best_of") not in (None, 1),
        "logprobs": body.get("logprobs") is not None,
    }
    for name, used in asked.items():
        if used:
            raise TranslationError(
                f"`{name}` is not available for legacy completions on this model's channel (Anthropic).", name
            )
    chat = {k: v for k, v in body.items() if k not in ("prompt", "suffix", "echo", "best_of", "logprobs")}
    chat["messages"] = [{"role": "user", "content": prompt}]
    return chat


def _event(data: bytes) -> dict[str, Any]:
    """One Messages event's JSON; an `error` event or junk raises (our own error goes out instead)."""
    parsed = parse_event(data)
    if parsed.get("type") == "error":
        raise UpstreamStreamError(Failure.STREAM_ERROR)
    return parsed


class MessagesAsChat:
    """A Messages stream read as Chat chunks (`chunks.ChatEvents`), for a non-streaming answer
    assembled in `call.send_upstream`: the usage chunk at the end, an incomplete stream an error."""

    def __init__(self, model: str) -> None:
        self.translator = chat_response.StreamTranslator(model=model, include_usage=True)

    def chunks(self, data: bytes) -> list[dict[str, Any]]:
        return self.translator.feed(_event(data))

    def end(self) -> list[dict[str, Any]]:
        closing = self.translator.finish()
        if any("error" in c for c in closing):  # ended before `message_stop`
            raise UpstreamStreamError(Failure.TRUNCATED)
        return closing


class AnthropicChatDialect(ReadsNative):
    """A Messages stream from an Anthropic channel relayed to a Chat (or legacy Completions)
    client (`relay.Dialect`): each event through the `StreamTranslator`, the usage, the output
    tokens and the cut read by a `MessagesReader` as on the Messages surface (cache reads and
    writes kept); at the reservation the answer ends with finish reason `length` and the relay
    closes the upstream; a stream that ends before `message_stop` is incomplete."""

    def __init__(self, call: Call, *, legacy: bool, include_usage: bool) -> None:
        self.translator = chat_response.StreamTranslator(model=call.model.name, include_usage=include_usage)
        self.legacy = legacy
        self.reader: MessagesReader = MessagesReader(call.max_tokens)

    def feed(self, event: bytes) -> bytes:
        data = event_data(event)
        if data is None:
            return b""  # comments and `ping`-less keep-alives: the relay sends its own
        parsed = self.reader.read(data)
        if parsed is None:  # past the reservation
            return self._encode(self.translator.cut())
        return self._encode(self.translator.feed(parsed))

    def close(self, usage: Usage) -> bytes:
        return self._encode(self.translator.finish(usage.as_chat())) + b"data: [DONE]\n\n"

    def error(self, err: GatewayError) -> bytes:
        self.translator.done = True
        return sse_error_event(err)  # with its [DONE]

    def _encode(self, chunks: list[dict[str, Any]]) -> bytes:
        if self.legacy:
            chunks = [c if "error" in c else as_completion_chunk(c) for c in chunks]
        return chat_response.encode(chunks)


async def relay_json(call: Call, up: UpstreamResponse, *, legacy: bool) -> None:
    """A non-streaming answer from an Anthropic channel: the Chat answer assembled from its
    stream (`MessagesAsChat`), or its error translated to the OpenAI shape."""
    data = up.json()
    if up.status >= 400:
        status, error = chat_response.error_from_anthropic(up.status, data)
        await call.send_json(status, orjson.dumps(error), None)
        return
    usage: Usage | None = None
    if isinstance(data, dict) and data.get("type") == "message":  # an upstream that did not stream
        completion = chat_response.from_message(data, model=call.model.name)
        if isinstance(data.get("usage"), dict):
            usage = anthropic_usage(data["usage"])
    elif isinstance(data, dict) and data.get("object") == "chat.completion":
        completion = data
    else:
        err = GatewayError(502, "The upstream answered with something that is not a message.", code="upstream_error")
        await call.send_json(502, err.body(), None)
        return
    usage = usage or usage_from(answer_usage(completion))
    if usage is None:  # cut at the reservation before the upstream's usage: estimated
        message = (completion.get("choices") or [{}])[0].get("message") or {}
        usage = Usage(call.prompt_estimate, estimate_tokens(message), estimated=True)
    out = as_completion(completion) if legacy else completion
    await call.send_json(200, orjson.dumps(out), usage)


def as_completion(completion: dict[str, Any]) -> dict[str, Any]:
    """A `chat.completion` as a legacy `text_completion`."""
    choice = completion["choices"][0]
    return {
        "id": completion["id"],
        "object": "text_completion",
        "created": completion["created"],
        "model": completion["model"],
        "choices": [
            {
                "text": choice["message"]["content"] or "",
                "index": 0,
                "logprobs": None,
                "finish_reason": choice["finish_reason"],
            }
        ],
        "usage": completion["usage"],
    }


def as_completion_chunk(chunk: dict[str, Any]) -> dict[str, Any]:
    """A `chat.completion.chunk` as a legacy streamed `text_completion`."""
    choices = [
        {
            "text": (c.get("delta") or {}).get("content") or "",
            "index": 0,
            "logprobs": None,
            "finish_reason": c.get("finish_reason"),
        }
        for c in chunk["choices"]
    ]
    out = {**chunk, "object": "text_completion", "choices": choices}
    return out
