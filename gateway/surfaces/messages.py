"""Anthropic Messages surface (Claude Code): `/v1/messages` and `/v1/messages/count_tokens`
(its model discovery and `/api/hello` probe are in `surfaces.models`).

Channels of kind `anthropic`, or marked `speaks_messages`, get the request as is, with the client's
`anthropic-version` / `anthropic-beta`, always as a stream: a non-streaming answer is assembled
from it (`native.MessagesReader`), so a long answer is bounded by its liveness (first token, gaps
between tokens) rather than a headers deadline, and cut exactly at the reservation. All other
channels get it translated to Chat Completions and the answer translated back
(`gateway.translate.anthropic_*`). Every error, including admission's
(401, 403, 404, 429 with Retry-After, 5xx), leaves in Anthropic's `{"type": "error", ...}` shape.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import aiohttp
import orjson

from gateway.auth import authenticate
from gateway.cache import RouteInfo, snapshot
from gateway.call import TOKENIZE_TIMEOUT, Call, Outgoing, Plan, UpstreamResponse, opened, recount, tokenize
from gateway.catalog import resolve_model, select_routes
from gateway.errors import ContextOverflow
from gateway.http import GatewayError, Request, send_bytes, send_json
from gateway.native import MessagesReader, anthropic_usage
from gateway.relay import model_renames, renamed
from gateway.state import process
from gateway.translate import TranslationError, anthropic_request, anthropic_response
from gateway.translate.common import answer_usage, encode_sse, prompt_text
from gateway.translate.common import estimate_tokens as estimate_input_tokens
from gateway.usage import Usage, estimate_tokens, usage_from
from keys.choices import ApiSurface

from .translated import ReadsNativeEvents, cloud_openai, open_translated_call, relay_stream

logger = logging.getLogger(__name__)


OVERLOADED = 529


def speaks_messages(route: RouteInfo) -> bool:
    return route.kind == "anthropic" or route.speaks_messages


async def send_anthropic_error(req: Request, exc: GatewayError) -> None:
    if exc.code == "upstream_overloaded":  # Anthropic's own status for it, which its SDK retries
        exc.status = OVERLOADED  # (the record says what the client got)
    call = opened()
    if call is not None:
        call.fail(exc)
    status = exc.status
    # A prompt past the window in Anthropic's words, which Claude Code compacts on (or lowers its max_tokens).
    message = exc.anthropic_message() if isinstance(exc, ContextOverflow) else exc.message
    body = orjson.dumps(anthropic_response.error_body(status, message))
    await send_bytes(req.send, status, body, exc.headers)


def _bad_request(exc: TranslationError) -> GatewayError:
    return GatewayError(400, exc.message, code="invalid_request", param=exc.param)


# ------------------------------------------------------------------------------- /v1/messages


async def create_message(req: Request) -> None:
    try:
        await _create_message(req)
    except GatewayError as exc:
        await send_anthropic_error(req, exc)
    except TranslationError as exc:
        await send_anthropic_error(req, _bad_request(exc))


async def _create_message(req: Request) -> None:
    body = await req.json()
    opened = await open_translated_call(
        req,
        body,
        surface=ApiSurface.MESSAGES,
        to_chat=anthropic_request.to_chat_request,
        max_tokens_field="max_tokens",
        prompt_field="messages",
    )
    call, chat, prompt = opened.call, opened.chat, opened.prompt
    anthropic_request.refuse_empty_messages(body)  # as Anthropic does, whatever the channel

    def outgoing(route: RouteInfo) -> Outgoing:
        if speaks_messages(route):  # streamed upstream even for a non-streaming client (`MessagesReader`)
            payload = dict(body)
            if payload.get("max_tokens") is None and call.max_tokens is not None:
                payload["max_tokens"] = call.max_tokens  # (the API requires it: the output reserved, as translated)
            return Outgoing(
                "/messages", payload, req.headers, anthropic_native=route.kind == "anthropic", assemble=_assembly
            )
        chat = opened.chat_request(route.kind)
        if cloud_openai(route):
            anthropic_request.refuse_openai_tool_names(body)
        return Outgoing("/chat/completions", chat, opened.chat_headers)

    up = await call.forward(Plan(call.routes, outgoing))
    native = speaks_messages(up.route)
    public_model = call.model.name
    thinking = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") in ("enabled", "adaptive")
    if up.streaming:

        def translator() -> anthropic_response.StreamTranslator:
            assert chat is not None  # a translating channel was picked, so the body translated
            return anthropic_response.StreamTranslator(
                model=public_model, thinking=thinking, input_tokens=estimate_input_tokens(chat)
            )

        dialect = MessagesDialect(call.max_tokens, public_model) if native else None
        await relay_stream(call, up, native=dialect, translator=translator)
        return
    await _relay_json(call, up, native=native, model=public_model, thinking=thinking, prompt=prompt)


async def _relay_json(
    call: Call, up: UpstreamResponse, *, native: bool, model: str, thinking: bool, prompt: int
) -> None:
    status, raw = up.status, up.body
    data = up.json()
    if status >= 400:
        if native and isinstance(data, dict) and data.get("type") == "error":
            out = raw
        else:
            out = orjson.dumps(
                anthropic_response.error_from_openai(status, data or {"error": raw[:300].decode(errors="replace")})
            )
        await call.send_json(status, out, None)
        return
    if not isinstance(data, dict):
        err = GatewayError(502, "The upstream answered with something that is not JSON.", code="upstream_error")
        await call.send_json(502, orjson.dumps(anthropic_response.error_body(502, err.message)), None)
        return
    usage = usage_from(answer_usage(data))
    if native:
        out = raw
        out = renamed(out, model_renames(data.get("model"), model))  # the public name, as streamed
        if usage is None:  # the upstream reported none: the prompt estimate and the deltas counted
            usage = Usage(prompt, up.tokens, estimated=True)
        else:
            usage = anthropic_usage(data["usage"])
            if up.cut:  # ended by us at the reservation: the output is the deltas counted
                usage = dataclasses.replace(usage, estimated=True)
            if (charged := call.bounded(usage)[0]) is not usage:  # implausible: shown as charged
                charged.shown_in(data["usage"], "anthropic")
                out = renamed(orjson.dumps(data), model_renames(data.get("model"), model))
    else:
        message = anthropic_response.from_chat_completion(data, model=model, thinking=thinking)
        if usage is None:  # the client sees the same estimate that is recorded
            text = "".join(_block_text(b) for b in message["content"])
            counted = up.tokens or estimate_tokens(text)  # the stream's output events, as Chat counts them
            usage = await recount(up, Usage(prompt, counted, estimated=True), text)
            message["usage"].update(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens)
        elif (charged := call.bounded(usage)[0]) is not usage:  # implausible: shown as charged
            charged.shown_in(message["usage"], "anthropic")
        out = orjson.dumps(message)
    await call.send_json(status, out, usage)


def _block_text(block: dict[str, Any]) -> str:
    """What a content block says, as counted for an estimate: its text, or a tool call's input."""
    if "input" in block:
        return orjson.dumps(block["input"]).decode()
    return str(block.get("text") or block.get("thinking") or "")


def _assembly(limit: int | None) -> MessagesReader:
    return MessagesReader(limit, assemble=True)


class MessagesDialect(ReadsNativeEvents):
    """A Messages stream from a channel that speaks it, relayed to a Messages client
    (`relay.Dialect`): events go out as they came; the usage, the output tokens and the cut are
    read by a `MessagesReader`. A stream cut at its reservation ends as Anthropic ends one at
    max_tokens (`message_delta` with stop reason `max_tokens`, `message_stop`); one that ends
    before `message_stop` is incomplete, and our error event goes out instead of the upstream's."""

    __slots__ = ("reader",)
    reader: MessagesReader

    def __init__(self, limit: int | None, public: str) -> None:
        self.reader = MessagesReader(limit)
        super().__init__(public)

    def error(self, err: GatewayError) -> bytes:
        return encode_sse(anthropic_response.error_body(err.status, err.message))


# ------------------------------------------------------------------ /v1/messages/count_tokens


async def count_tokens(req: Request) -> None:
    """`{"input_tokens": N}`: the channel's tokenizer where it has one (vLLM / llama.cpp
    `/tokenize`, Anthropic's own endpoint), else `translate.common.estimate_tokens`'s estimate.
    Counting generates nothing, so it is scoped by key and model but not charged to the limits."""
    try:
        body = await req.json()
        key = await authenticate(req)
        catalog = await snapshot.get_catalog()
        model = resolve_model(key, catalog, body.get("model"))
        req.model_name = model.name
        anthropic_request.refuse_empty_messages(body)  # as Anthropic does, before any tokenizer is asked
        chat = anthropic_request.to_chat_request({**body, "stream": False})
        try:  # the same channels a request would go to (a local-only key's prompt stays local)
            routes = select_routes(model, key, prompt=0, output=0).routes
        except GatewayError:
            routes = []
        count = await _upstream_count(routes[0], body, chat, req.headers) if routes else None
        if count is None:
            count = estimate_input_tokens(chat)
        await send_json(req.send, 200, {"input_tokens": count})
    except GatewayError as exc:
        await send_anthropic_error(req, exc)
    except TranslationError as exc:
        await send_anthropic_error(req, _bad_request(exc))


async def _upstream_count(
    route: RouteInfo, body: dict[str, Any], chat: dict[str, Any], headers: dict[str, str]
) -> int | None:
    session = process.upstream(route.kind)
    try:
        if route.kind == "anthropic":
            payload = {k: v for k, v in body.items() if k in ("messages", "system", "tools", "tool_choice", "thinking")}
            payload["model"] = route.upstream_id
            send = {k: v for k, v in headers.items() if k.startswith("anthropic-")}
            send.setdefault("anthropic-version", "2023-06-01")
            send["x-api-key"] = route.api_key
            async with session.post(
                route.base_url + "/messages/count_tokens", json=payload, headers=send, timeout=TOKENIZE_TIMEOUT
            ) as resp:
                if resp.status == 200:
                    return int((await resp.json(content_type=None))["input_tokens"])
            return None
        text, _, _ = prompt_text(chat)
        tokens = await tokenize(route, text)
        return None if tokens is None else estimate_input_tokens(chat, counted=tokens)
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
        logger.info("count_tokens: channel %s could not count (%r); estimating", route.channel_name, exc)
        return None
