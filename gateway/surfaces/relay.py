"""Glue between the pipeline's SSE relay and the translators' incremental stream classes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from gateway.cache import snapshot
from gateway.http import GatewayError
from gateway.pipeline import Usage
from gateway.translate.common import encode_sse

logger = logging.getLogger(__name__)


class Translator(Protocol):
    done: bool

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]: ...
    def finish(self, usage: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...
    def fail(self, status: int, message: str) -> list[dict[str, Any]]: ...


def sse_payload(event: bytes) -> Any:
    """The JSON of one raw SSE event's `data:` lines; None for comments, `[DONE]` and junk."""
    data = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
    if not data:
        return None
    raw = b"\n".join(data)
    if raw == b"[DONE]":
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def encode(events: list[dict[str, Any]]) -> bytes:
    return b"".join(encode_sse(e) for e in events)


def chat_usage(usage: Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total,
    }


def translating_hooks(translator: Translator) -> dict[str, Callable]:
    """`relay_sse` keyword arguments that run Chat chunks through `translator` as they arrive.

    The closing events go out in the epilogue, after the upstream's usage chunk, with the usage the
    pipeline settles on (the upstream's, or its estimate when the upstream sent none).
    """

    def on_event(event: bytes) -> bytes | None:
        chunk = sse_payload(event)
        if not isinstance(chunk, dict):
            return None
        out = encode(translator.feed(chunk))
        return out or None

    def epilogue(usage: Usage | None) -> bytes:
        return encode(translator.finish(chat_usage(usage)))

    def on_error(err: GatewayError) -> bytes:
        return encode(translator.fail(err.status, err.message))

    return {"on_event": on_event, "epilogue": epilogue, "on_error": on_error, "client_wants_usage": True}


def without_anthropic_headers(headers: dict[str, str]) -> dict[str, str]:
    """Client headers for a Chat upstream: Anthropic's own go only to Anthropic-native channels."""
    return {k: v for k, v in headers.items() if not k.startswith("anthropic-")}


async def output_cap(model: Any) -> int | None:
    """The model's configured max output tokens (the smallest over its routes), if any."""
    if not isinstance(model, str):
        return None
    info = (await snapshot.get_catalog()).models.get(model)
    return info.max_output_tokens if info is not None else None


def clamp(max_tokens: int | None, cap: int | None) -> int | None:
    """Claude Code asks for 32000 output tokens whatever the model; a vLLM channel refuses any
    request whose prompt + max_tokens exceeds its context, so ask for no more than the route allows."""
    if cap is None:
        return max_tokens
    return cap if max_tokens is None else min(max_tokens, cap)


def max_tokens_of(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GatewayError(400, f"`{name}` must be a positive integer.", code="invalid_value", param=name)
    return value
