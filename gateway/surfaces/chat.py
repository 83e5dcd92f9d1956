"""The OpenAI surface: `/v1/chat/completions`, `/v1/completions` and `/v1/embeddings`.

Every channel but Anthropic's speaks it, so the request goes to each route as sent (with `model`
rewritten); Chat and Completions always as a stream asked for usage, assembled again for a client
that did not ask for one (`call.send_upstream`); the answer comes back as is, minus what the
gateway asked for on its own behalf. Anthropic channels get the request translated to Messages
and the answer translated back (`chat_anthropic`).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.admission import open_call
from gateway.call import Call, Plan, UpstreamResponse, recount
from gateway.http import GatewayError, Request
from gateway.relay import ChatDialect, relay
from gateway.translate.common import answer_usage
from gateway.usage import Usage, estimate_tokens, usage_from
from keys.choices import ApiSurface

from . import chat_anthropic


async def chat_completions(req: Request) -> None:
    await _proxy(req, ApiSurface.CHAT, "/chat/completions")


async def completions(req: Request) -> None:
    await _proxy(req, ApiSurface.COMPLETIONS, "/completions")


async def embeddings(req: Request) -> None:
    await _proxy(req, ApiSurface.EMBEDDINGS, "/embeddings")


async def _proxy(req: Request, surface: str, path: str) -> None:
    body = await req.json()
    stream = bool(body.get("stream")) and surface != ApiSurface.EMBEDDINGS
    if surface == ApiSurface.CHAT:
        if not isinstance(body.get("messages"), list):
            raise GatewayError(400, "`messages` must be a list.", code="invalid_value", param="messages")
        prompt = estimate_tokens(body["messages"])
    elif surface == ApiSurface.COMPLETIONS:
        prompt = estimate_tokens(body.get("prompt"))
    else:
        prompt = estimate_tokens(body.get("input"))
    max_tokens = 0 if surface == ApiSurface.EMBEDDINGS else _max_tokens(body)
    call = await open_call(
        req,
        surface=surface,
        model=body.get("model"),
        stream=stream,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        body=body,
    )
    options = body.get("stream_options")
    wants_usage = stream and isinstance(options, dict) and bool(options.get("include_usage"))
    n = body.get("n")
    call.choices = choices = n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 128 else 1
    # Chat and Completions go upstream as streams (`call.send_upstream`), asked for usage; an
    # Anthropic channel gets the body translated to Messages (`chat_anthropic`).
    default_max = max_tokens if max_tokens is not None else call.max_tokens
    up = await call.forward(
        Plan(call.routes, chat_anthropic.outgoing_for(call, surface, path, body, req.headers, default_max))
    )
    legacy = surface == ApiSurface.COMPLETIONS
    if chat_anthropic.translates(up.route):
        if up.streaming:
            await relay(call, up, chat_anthropic.AnthropicChatDialect(call, legacy=legacy, include_usage=wants_usage))
        else:
            await chat_anthropic.relay_json(call, up, legacy=legacy)
        return
    if up.streaming:
        await relay(call, up, ChatDialect(call.max_tokens, choices=choices, wants_usage=wants_usage))
        return
    await _relay_json(call, up, prompt)


def _max_tokens(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise GatewayError(400, f"`{name}` must be a non-negative integer.", code="invalid_value", param=name)
            return value
    return None


async def _relay_json(call: Call, up: UpstreamResponse, prompt: int) -> None:
    status, raw, content_type = up.status, up.body, up.content_type
    usage: Usage | None = None
    if status < 400:
        data = up.json()
        usage = usage_from(answer_usage(data))
        if usage is None:
            # No usage from the upstream: its own tokenizer counts where it has one, else ≈4 chars a token.
            usage = await recount(up, Usage(prompt, _estimated_completion(data), estimated=True), _answer_text(data))
    else:
        # An upstream client error (e.g. llama.cpp's exceed_context_size_error) passes through,
        # always in the OpenAI error shape.
        try:
            data = orjson.loads(raw)
            shaped = isinstance(data, dict) and isinstance(data.get("error"), dict)
        except orjson.JSONDecodeError:
            shaped = False
        if not shaped:
            text = raw[:500].decode(errors="replace").strip() or f"HTTP {status}"
            raw = GatewayError(status, f"The upstream rejected the request: {text}", code="upstream_error").body()
            content_type = b"application/json"
    await call.send_json(status, raw, usage, content_type)


def _answer_text(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    parts = []
    for choice in data.get("choices") or ():
        if isinstance(choice, dict):
            message = choice.get("message") or {}
            parts.append(str(message.get("content") or "") if isinstance(message, dict) else "")
            parts.append(str(choice.get("text") or ""))
    return "".join(parts)


def _estimated_completion(data: Any) -> int:
    """Completion tokens of a JSON answer without usage: ≈4 characters a token."""
    if not isinstance(data, dict):
        return 0
    total = 0
    for choice in data.get("choices") or ():
        if isinstance(choice, dict):
            total += estimate_tokens(choice.get("message") or {}) + estimate_tokens(choice.get("text") or "")
    return total
