"""Small helpers shared by the translation modules."""

from __future__ import annotations

import json
import uuid
from typing import Any

import orjson


class TranslationError(ValueError):
    """A request that cannot be expressed in Chat Completions: the surface answers 400 with it."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def new_id(prefix: str) -> str:
    """An opaque id in the style of the API being imitated (`msg_…`, `toolu_…`, `resp_…`)."""
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def encode_sse(event: dict[str, Any]) -> bytes:
    """One SSE frame with an `event:` line: both Anthropic's and OpenAI's SDKs dispatch on it."""
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def parse_arguments(arguments: str | None) -> dict[str, Any]:
    """Tool-call arguments as an object; models sometimes emit junk, which must not become a 500."""
    if not arguments or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"raw_arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def text_of(content: Any) -> str:
    """Plain text from a string or a list of text-ish blocks/parts (other kinds are skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    return str(content)


def chat_usage(usage: dict[str, Any] | None) -> tuple[int, int, int, int]:
    """(prompt, completion, cached prompt, reasoning) tokens from a Chat Completions usage object."""
    usage = usage or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = int(((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0)
    reasoning = int(((usage.get("completion_tokens_details") or {}).get("reasoning_tokens")) or 0)
    return prompt, completion, min(cached, prompt), reasoning


def status_of(error: Any) -> int:
    """The HTTP status an OpenAI-shaped error object stands for (500 when it does not say)."""
    if isinstance(error, dict):
        for key in ("status", "code"):
            value = error.get(key)
            if isinstance(value, int) and 400 <= value < 600:
                return value
        if (
            error.get("type") in ("rate_limit_error", "rate_limit_exceeded")
            or error.get("code") == "rate_limit_exceeded"
        ):
            return 429
    return 500
