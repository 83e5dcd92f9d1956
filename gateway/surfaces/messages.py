"""Anthropic Messages surface (Claude Code): `/v1/messages`, `/v1/messages/count_tokens`,
`HEAD /api/hello`, and `/v1/models` in Anthropic's list shape for requests with `anthropic-version`.

Channels of kind `anthropic`, or marked `speaks_messages`, get the request as is, with the client's
`anthropic-version` / `anthropic-beta`; all others get it translated to Chat Completions and the
answer translated back (`gateway.translate.anthropic_*`). Every error, including the pipeline's
(401, 403, 404, 429 with Retry-After, 5xx), leaves in Anthropic's `{"type": "error", ...}` shape.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import aiohttp
import orjson

from gateway.cache import RouteInfo, snapshot
from gateway.http import GatewayError, Request, send_bytes, send_json
from gateway.openai_api import list_models as list_openai_models
from gateway.pipeline import (
    Call,
    Usage,
    authenticate,
    estimate_tokens,
    gateway,
    resolve_model,
    usable_models,
    usage_from,
)
from gateway.translate import TranslationError, anthropic_request, anthropic_response
from gateway.translate.common import encode_sse, prompt_text
from gateway.translate.common import estimate_tokens as estimate_input_tokens
from keys.choices import ApiSurface

from .relay import (
    open_translated_call,
    sse_payload,
    translating_hooks,
)

logger = logging.getLogger(__name__)

TOKENIZE_TIMEOUT = aiohttp.ClientTimeout(total=5)


def speaks_messages(route: RouteInfo) -> bool:
    return route.kind == "anthropic" or route.speaks_messages


async def _send_anthropic_error(req: Request, exc: GatewayError) -> None:
    if req.call is not None:
        req.call.fail(exc)
    body = orjson.dumps(anthropic_response.error_body(exc.status, exc.message))
    await send_bytes(req.send, exc.status, body, exc.headers)


def _bad_request(exc: TranslationError) -> GatewayError:
    return GatewayError(400, exc.message, code="invalid_request", param=exc.param)


# ------------------------------------------------------------------------------- /v1/messages


async def create_message(req: Request) -> None:
    try:
        await _create_message(req)
    except GatewayError as exc:
        await _send_anthropic_error(req, exc)
    except TranslationError as exc:
        await _send_anthropic_error(req, _bad_request(exc))


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
    call, stream, chat, problem, prompt = opened.call, opened.stream, opened.chat, opened.problem, opened.prompt
    chat_headers = opened.chat_headers

    def prepare(route: RouteInfo) -> tuple[str, dict[str, Any], dict[str, str], bool]:
        if speaks_messages(route):
            return "/messages", dict(body), req.headers, route.kind == "anthropic"
        if problem is not None:
            raise problem
        return "/chat/completions", dict(chat), chat_headers, False

    try:
        up = await call.forward("/chat/completions", {}, req.headers, prepare=prepare)
    except GatewayError as exc:
        call.fail(exc)
        raise
    native = speaks_messages(up.route)
    public_model = call.model.name
    thinking = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") in ("enabled", "adaptive")
    if stream and up.status == 200:
        if native:
            await call.relay_sse(
                up,
                client_wants_usage=True,
                usage_of_event=_native_usage,
                on_error=lambda err: encode_sse(anthropic_response.error_body(err.status, err.message)),
            )
        else:
            translator = anthropic_response.StreamTranslator(
                model=public_model, thinking=thinking, input_tokens=estimate_input_tokens(chat)
            )
            await call.relay_sse(up, **translating_hooks(translator))
        return
    await _relay_json(call, up.status, up.body, native=native, model=public_model, thinking=thinking, prompt=prompt)


async def _relay_json(
    call: Call, status: int, raw: bytes, *, native: bool, model: str, thinking: bool, prompt: int
) -> None:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
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
    usage = usage_from(data.get("usage"))
    if native:
        out = raw
        if usage is not None:
            usage = _anthropic_usage(data["usage"])
    else:
        message = anthropic_response.from_chat_completion(data, model=model, thinking=thinking)
        if usage is None:  # the client sees the same estimate that is recorded
            text = "".join(b.get("text", "") + orjson.dumps(b.get("input") or "").decode() for b in message["content"])
            usage = Usage(prompt, estimate_tokens(text), estimated=True)
            message["usage"].update(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens)
        out = orjson.dumps(message)
    await call.send_json(status, out, usage)


def _anthropic_usage(usage: dict[str, Any]) -> Usage:
    """Anthropic splits input into uncached, cache-read and cache-write tokens: all were input."""
    prompt = sum(
        int(usage.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    return Usage(prompt, int(usage.get("output_tokens") or 0))


def _native_usage(event: bytes, current: Usage | None) -> Usage | None:
    """Usage of an Anthropic stream: input in `message_start`, cumulative output in `message_delta`."""
    if b'"usage"' not in event:
        return current
    data = sse_payload(event)
    if not isinstance(data, dict):
        return current
    if data.get("type") == "message_start":
        usage = (data.get("message") or {}).get("usage") or {}
        return _anthropic_usage(usage)
    if data.get("type") == "message_delta":
        usage = data.get("usage") or {}
        prompt = current.prompt_tokens if current is not None else 0
        if usage.get("input_tokens") is not None:
            prompt = _anthropic_usage(usage).prompt_tokens
        return Usage(prompt, int(usage.get("output_tokens") or 0))
    return current


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
        chat = anthropic_request.to_chat_request({**body, "stream": False})
        routes = model.ordered_routes()
        count = await _upstream_count(routes[0], body, chat, req.headers) if routes else None
        if count is None:
            count = estimate_input_tokens(chat)
        await send_json(req.send, 200, {"input_tokens": count})
    except GatewayError as exc:
        await _send_anthropic_error(req, exc)
    except TranslationError as exc:
        await _send_anthropic_error(req, _bad_request(exc))


async def _upstream_count(route: RouteInfo, body: dict, chat: dict, headers: dict[str, str]) -> int | None:
    session = gateway.upstream.session
    if session is None:
        await gateway.upstream.start()
        session = gateway.upstream.session
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
        if route.kind not in ("vllm", "llamacpp"):
            return None
        text, _, _ = prompt_text(chat)
        payload = {"content": text} if route.kind == "llamacpp" else {"model": route.upstream_id, "prompt": text}
        send = {"authorization": "Bearer " + route.api_key} if route.api_key else {}
        root = route.base_url.removesuffix("/v1")
        async with session.post(root + "/tokenize", json=payload, headers=send, timeout=TOKENIZE_TIMEOUT) as resp:
            if resp.status != 200:
                return None
            data = await resp.json(content_type=None)
        tokens = data.get("count") if isinstance(data.get("count"), int) else len(data.get("tokens") or [])
        return estimate_input_tokens(chat, text_tokens=tokens)
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
        logger.info("count_tokens: channel %s could not count (%r); estimating", route.channel_name, exc)
        return None


# --------------------------------------------------------------------------- discovery, probe


async def hello(req: Request) -> None:
    """Claude Code's startup connectivity probe."""
    await send_bytes(req.send, 200, b"" if req.method == "HEAD" else b'{"ok":true}')


def _created_at(epoch: int | None) -> str:
    stamp = dt.datetime.fromtimestamp(epoch or 0, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


async def list_models(req: Request) -> None:
    """OpenAI's list, or Anthropic's (`display_name`, `created_at`, paging) for Claude Code."""
    if "anthropic-version" not in req.headers:
        await list_openai_models(req)
        return
    try:
        key = await authenticate(req)
    except GatewayError as exc:
        await _send_anthropic_error(req, exc)
        return
    catalog = await snapshot.get_catalog()
    models = sorted(usable_models(key, catalog), key=lambda m: m.name)
    data = [_model_object(m) for m in models]
    query = dict(_query(req))
    ids = [d["id"] for d in data]
    if query.get("after_id") in ids:
        data = data[ids.index(query["after_id"]) + 1 :]
    elif query.get("before_id") in ids:
        data = data[: ids.index(query["before_id"])]
    try:
        limit = max(1, min(int(query.get("limit", 1000)), 1000))
    except ValueError:
        limit = 1000
    page, more = data[:limit], len(data) > limit
    await send_json(
        req.send,
        200,
        {
            "data": page,
            "has_more": more,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
        },
    )


def model_getter(openai_handler):
    """`GET /v1/models/{id}`: Anthropic's model object when the request carries
    `anthropic-version`, else `openai_handler`'s answer."""

    async def get_model(req: Request) -> None:
        if "anthropic-version" not in req.headers:
            await openai_handler(req)
            return
        try:
            key = await authenticate(req)
            model = resolve_model(key, await snapshot.get_catalog(), req.subpath[len("/models/") :])
        except GatewayError as exc:
            await _send_anthropic_error(req, exc)
            return
        await send_json(req.send, 200, _model_object(model))

    return get_model


def _model_object(m) -> dict[str, Any]:
    return {"type": "model", "id": m.name, "display_name": m.name, "created_at": _created_at(m.created)}


def _query(req: Request) -> list[tuple[str, str]]:
    from urllib.parse import parse_qsl

    return parse_qsl(req.scope.get("query_string", b"").decode("latin-1"))
