"""Chat Completions (and legacy Completions) on Anthropic channels: the wiring of
`gateway.translate.chat_request` / `chat_response` into the OpenAI surface (`surfaces.chat`).

`chat.py` asks `outgoing_for` what each route is sent (an Anthropic channel gets the request
translated to `/messages`, every other channel the body as sent) and hands an answer that came from
an Anthropic channel to `relay`. Legacy `/v1/completions` is translated when its `prompt` is one
string (it becomes one user message; the answer comes back as a `text_completion`); a prompt list,
token ids, `suffix`, `echo`, `best_of` or `logprobs` are refused with a 400 saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings

from gateway.cache import RouteInfo
from gateway.call import Call, Outgoing, UpstreamResponse
from gateway.http import GatewayError, sse_error_event
from gateway.relay import relay_sse
from gateway.translate import TranslationError, chat_request, chat_response
from gateway.usage import Usage, usage_from
from keys.choices import ApiSurface

from .messages import _anthropic_usage, _native_usage
from .translated import sse_payload


def translates(route: RouteInfo) -> bool:
    """Does this route need the Chat request translated to Messages?"""
    return route.kind == "anthropic"


def outgoing_for(
    surface: str, path: str, body: dict[str, Any], headers: dict[str, str], default_max_tokens: int | None
) -> Callable[[RouteInfo], Outgoing]:
    """What each route is sent: the body as is, or (Anthropic channels) its Messages translation,
    made once, when the first Anthropic route is tried. An untranslatable body fails the call with
    400 only if such a route is reached."""
    translated: dict[str, Any] | None = None

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
                chat = completions_as_chat(body) if surface == ApiSurface.COMPLETIONS else body
                default = default_max_tokens or int(settings.GATEWAY_DEFAULT_MAX_TOKENS)
                if route.max_output_tokens:
                    default = min(default, route.max_output_tokens)
                translated = chat_request.to_messages_request(chat, default_max_tokens=default)
            except TranslationError as exc:
                raise GatewayError(400, exc.message, code="invalid_request", param=exc.param) from None
        return Outgoing("/messages", dict(translated), headers, anthropic_native=True)

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


async def relay(call: Call, up: UpstreamResponse, *, surface: str, stream: bool, include_usage: bool) -> None:
    """Answer the client from an Anthropic channel's answer, in the Chat (or Completions) shape."""
    model = call.model.name
    legacy = surface == ApiSurface.COMPLETIONS
    if stream and up.status == 200:
        translator = chat_response.StreamTranslator(model=model, include_usage=include_usage)
        shape = as_completion_chunk if legacy else None

        def on_event(event: bytes) -> bytes | None:
            data = sse_payload(event)
            if not isinstance(data, dict) or translator.done:
                return None
            out = _encode(translator.feed(data), shape)
            # an upstream error event ended the stream: our own error event, then [DONE]
            return (out + b"data: [DONE]\n\n" if translator.done else out) or None

        def epilogue(usage: Usage | None) -> bytes:
            if translator.done:  # already ended by an error event
                return b""
            fallback = None
            if usage is not None:
                fallback = {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total,
                }
            return _encode(translator.finish(fallback), shape) + b"data: [DONE]\n\n"

        def on_error(err: GatewayError) -> bytes:
            translator.done = True
            return sse_error_event(err)  # with its [DONE]

        await relay_sse(call, up, on_event=on_event, epilogue=epilogue, on_error=on_error, usage_of_event=_native_usage)
        return
    await _relay_json(call, up, legacy=legacy)


def _encode(chunks: list[dict[str, Any]], shape: Callable[[dict[str, Any]], dict[str, Any]] | None) -> bytes:
    return chat_response.encode([shape(c) if shape and "error" not in c else c for c in chunks])


async def _relay_json(call: Call, up: UpstreamResponse, *, legacy: bool) -> None:
    try:
        data = orjson.loads(up.body)
    except orjson.JSONDecodeError:
        data = None
    if up.status >= 400:
        status, error = chat_response.error_from_anthropic(up.status, data)
        await call.send_json(status, orjson.dumps(error), None)
        return
    if not isinstance(data, dict) or data.get("type") != "message":
        err = GatewayError(502, "The upstream answered with something that is not a message.", code="upstream_error")
        await call.send_json(502, err.body(), None)
        return
    completion = chat_response.from_message(data, model=call.model.name)
    usage: Usage | None = _anthropic_usage(data["usage"]) if isinstance(data.get("usage"), dict) else None
    if usage is None:
        usage = usage_from(completion["usage"])
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
