"""OpenAI Responses surface (Codex): `POST /v1/responses`, streaming and not.

Channels marked `speaks_responses` get the request as is, always as a stream: a non-streaming
answer is assembled from it (`native.ResponsesReader`), so a long answer is bounded by its liveness
rather than a headers deadline, and cut exactly at the reservation. All others get it translated to
Chat Completions and the answer translated back (`gateway.translate.responses_*`); Anthropic
channels get that Chat request translated on to Messages, as Chat clients' are (`chat_anthropic`). Errors keep the
OpenAI shape, as for Chat Completions. Codex's built-in `openai` provider first tries Responses
over a WebSocket; that gets a 426 at once (`refuse_websocket`, `refuse_get`) so it falls back to
HTTP instead of retrying.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from gateway.cache import RouteInfo
from gateway.call import Call, Outgoing, Plan, UpstreamResponse, recount
from gateway.http import GatewayError, Receive, Request, Scope, Send
from gateway.native import ResponsesReader, responses_usage
from gateway.relay import model_renames, relay, renamed
from gateway.translate import TranslationError, chat_response, responses_request, responses_response
from gateway.translate.common import (
    ANTHROPIC_TOOL_NAME_MAX,
    OPENAI_TOOL_NAME_MAX,
    answer_usage,
    refuse_openai_function_names,
)
from gateway.usage import Usage, estimate_tokens, usage_from
from keys.choices import ApiSurface

from . import chat_anthropic
from .translated import ReadsNativeEvents, cloud_openai, encode, open_translated_call, relay_stream

logger = logging.getLogger(__name__)

WEBSOCKET_REFUSAL = GatewayError(
    426,
    "This gateway serves the Responses API over HTTP only: send POST /v1/responses (in Codex, use a custom "
    "model provider, whose `supports_websockets` is false).",
    code="websocket_not_supported",
)


async def create_response(req: Request) -> None:
    try:
        await _create_response(req)
    except TranslationError as exc:
        raise GatewayError(400, exc.message, code="invalid_request", param=exc.param) from None


async def _create_response(req: Request) -> None:
    body = await req.json()
    opened = await open_translated_call(
        req,
        body,
        surface=ApiSurface.RESPONSES,
        to_chat=responses_request.to_chat_request,
        max_tokens_field="max_output_tokens",
        prompt_field="input",
    )
    call, prompt = opened.call, opened.prompt
    via_messages: Callable[[RouteInfo], Outgoing] | None = None

    def outgoing(route: RouteInfo) -> Outgoing:
        nonlocal via_messages
        if route.speaks_responses:  # streamed upstream even for a non-streaming client (`ResponsesReader`)
            return Outgoing("/responses", dict(body), req.headers, assemble=ResponsesReader)
        if chat_anthropic.translates(route):  # Responses -> Chat -> Messages, made once
            if via_messages is None:
                responses_request.refuse_call_names(body, channel="Anthropic", longest=ANTHROPIC_TOOL_NAME_MAX)
                chat = opened.chat_request()
                asked = chat.get("max_tokens")
                via_messages = chat_anthropic.outgoing_for(
                    call,
                    ApiSurface.CHAT,
                    "/chat/completions",
                    chat,
                    opened.chat_headers,
                    asked if isinstance(asked, int) else call.max_tokens,
                    as_sent=lambda exc: responses_request.as_sent(body, exc),
                )
            return via_messages(route)
        chat = opened.chat_request()
        if cloud_openai(route):
            try:
                refuse_openai_function_names(chat)
            except TranslationError as exc:
                raise responses_request.as_sent(body, exc) from None
            responses_request.refuse_call_names(body, channel="OpenAI-compatible cloud", longest=OPENAI_TOOL_NAME_MAX)
        return Outgoing("/chat/completions", chat, opened.chat_headers)

    up = await call.forward(Plan(call.routes, outgoing))
    native = up.route.speaks_responses
    # Echo the public model name, never the upstream id.
    echo = {**body, "model": call.model.name}
    if up.streaming:
        if chat_anthropic.translates(up.route):
            await relay(call, up, AnthropicResponsesDialect(call, echo))
            return
        await relay_stream(
            call,
            up,
            native=ResponsesDialect(call.max_tokens, call.model.name) if native else None,
            translator=lambda: responses_response.StreamTranslator(echo),
        )
        return
    if up.status >= 400 and chat_anthropic.translates(up.route):
        status, error = chat_response.error_from_anthropic(up.status, up.json())
        await call.send_json(status, orjson.dumps(error), None)
        return
    await _relay_json(call, up, native=native, request=echo, prompt=prompt)


class AnthropicResponsesDialect(chat_anthropic.AnthropicChatDialect):
    """A Messages stream from an Anthropic channel relayed to a Responses client: each event read
    as Chat chunks (`AnthropicChatDialect`: the usage, the tokens and the cut as on the Messages
    surface), each chunk translated to Responses events as from a Chat channel."""

    def __init__(self, call: Call, request: dict[str, Any]) -> None:
        super().__init__(call, legacy=False, include_usage=True)
        self.responses = responses_response.StreamTranslator(request)

    def _encode(self, chunks: list[dict[str, Any]]) -> bytes:
        return encode([event for chunk in chunks for event in self.responses.feed(chunk)])

    def close(self, usage: Usage) -> bytes:
        settled = usage.as_chat()
        return self._encode(self.translator.finish(settled)) + encode(self.responses.finish(settled))

    def error(self, err: GatewayError) -> bytes:
        self.translator.done = True
        return encode(self.responses.fail(err.status, err.message))


class ResponsesDialect(ReadsNativeEvents):
    """A Responses stream from a channel that speaks it, relayed to a Responses client
    (`relay.Dialect`): events go out as they came; the usage, the output tokens and the cut are
    read by a `ResponsesReader`. A stream cut at its reservation ends as one the upstream stops
    at max_output_tokens (the open items' `.done` events, `response.incomplete`); one that ends
    before `response.completed` is incomplete. Our error events continue the upstream's response
    (its id, the next sequence numbers), never its text."""

    __slots__ = ("reader",)
    reader: ResponsesReader

    def __init__(self, limit: int | None, public: str) -> None:
        self.reader = ResponsesReader(limit)
        super().__init__(public)

    def error(self, err: GatewayError) -> bytes:
        code = responses_response.error_code(err.status)
        events = self.reader.fail_events(code, err.message)
        if events is None:
            return encode(responses_response.failure_events(err.status, err.message))
        return renamed(encode(events), self.renames)


async def _relay_json(call: Call, up: UpstreamResponse, *, native: bool, request: dict[str, Any], prompt: int) -> None:
    status, raw = up.status, up.body
    data = up.json()
    if status >= 400:
        if not (isinstance(data, dict) and isinstance(data.get("error"), dict)):
            text = raw[:500].decode(errors="replace").strip() or f"HTTP {status}"
            raw = GatewayError(status, f"The upstream rejected the request: {text}", code="upstream_error").body()
        await call.send_json(status, raw, None)
        return
    if not isinstance(data, dict):
        err = GatewayError(502, "The upstream answered with something that is not JSON.", code="upstream_error")
        await call.send_json(502, err.body(), None)
        return
    usage = usage_from(answer_usage(data))  # a Responses answer, or a Chat one (llama.cpp timings)
    if native:
        out = raw
        if usage is None:  # cut by us at the reservation, or no usage reported: estimated
            usage = Usage(prompt, up.tokens, estimated=True)
            data["usage"] = responses_usage(usage)
            out = orjson.dumps(data)
        elif (charged := call.bounded(usage)[0]) is not usage:  # implausible: shown as charged
            charged.shown_in(data["usage"], "responses")
            out = orjson.dumps(data)
        out = renamed(out, model_renames(data.get("model"), request["model"]))  # as streamed
    else:
        response = responses_response.from_chat_completion(data, request=request)
        if usage is not None and (charged := call.bounded(usage)[0]) is not usage:  # implausible: as charged
            charged.shown_in(response["usage"], "responses")
        out = orjson.dumps(response)
        if usage is None:
            texts = [
                p.get("text", "")
                for item in response["output"]
                for p in item.get("content") or []
                if isinstance(p, dict)
            ] + [item.get("arguments", "") for item in response["output"]]
            counted = up.tokens or estimate_tokens(texts)  # the stream's output events, as Chat counts them
            usage = await recount(up, Usage(prompt, counted, estimated=True), "".join(texts))
            response["usage"] = responses_response.usage_of(
                {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
            )
            out = orjson.dumps(response)
    await call.send_json(status, out, usage)


async def refuse_get(req: Request) -> None:
    """A plain `GET /v1/responses` (a WebSocket handshake the server did not upgrade)."""
    raise WEBSOCKET_REFUSAL


async def refuse_websocket(scope: Scope, receive: Receive, send: Send) -> None:
    """Turn down a WebSocket handshake with an HTTP 426 JSON body (403 where the server cannot)."""
    message = await receive()
    if message.get("type") != "websocket.connect":
        return
    if "websocket.http.response" in (scope.get("extensions") or {}):
        body = WEBSOCKET_REFUSAL.body()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "websocket.http.response.start", "status": 426, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})
