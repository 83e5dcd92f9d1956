"""The bottom of the gateway: errors and the shared vocabulary of every stage. Imports no other
module of `gateway/` (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

import enum
import itertools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)


def new_request_id() -> str:
    """Unique across processes (random per-process prefix + counter), without a syscall."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):x}"


class Failure(enum.StrEnum):
    """Why one upstream attempt failed: the one vocabulary of attempts, the routing explanation
    (`failover after …`) and the passive health outcomes."""

    CONNECT = "connect"  # refused or unreachable (GATEWAY_CONNECT_TIMEOUT)
    HEADERS_TIMEOUT = "timeout"  # no response headers within GATEWAY_HEADERS_TIMEOUT (an answer not streamed)
    FIRST_TOKEN_TIMEOUT = "first_token_timeout"  # noqa: S105 - a stream's first token (or headers) not within the prefill deadline
    IDLE_TIMEOUT = "idle_timeout"  # silent between tokens for GATEWAY_IDLE_TIMEOUT
    DEADLINE = "deadline"  # the call's GATEWAY_TOTAL_TIMEOUT passed
    RATE_LIMITED = "http_429"
    OVERLOADED = "overloaded"  # 529 / `overloaded_error`
    SERVER_ERROR = "http_5xx"
    REFUSED = "http_4xx"  # 401/403 (the channel's own key) or 408
    NOT_SERVED = "http_404"  # the server does not serve the route's model id (a typo, another name)
    REDIRECT = "redirect"
    INVALID_JSON = "invalid_json"
    TOO_LARGE = "too_large"
    PROTOCOL = "protocol"  # the connection broke or the answer made no sense
    STREAM_ERROR = "stream_error"  # the upstream sent an error event mid-stream
    TRUNCATED = "truncated"  # the stream ended before its own last event (message_stop, response.completed)
    CONTEXT_LENGTH = "context_length"  # the server counted the prompt past the route's window (a larger one may fit)
    UNSUPPORTED = "unsupported"  # the server cannot take such a request (501; llama.cpp not started for it)


# Failures that are the route's or the request's, not the channel's (its other models answer, its
# other requests too): never reported against its health.
NOT_THE_CHANNELS = frozenset({Failure.NOT_SERVED, Failure.UNSUPPORTED, Failure.CONTEXT_LENGTH})


# A request's record when the gateway's shutdown cut it (its grace ended first).
SHUTDOWN = "interrupted by the gateway's shutdown"

# What stands in an upstream's answer for a credential of the team's it echoed (`call.without_credentials`, MCP).
REDACTED = "[redacted by the gateway]"

# Which settings a timeout failure is named after (the error tells the operator what to raise).
TIMEOUT_SETTINGS = {
    Failure.HEADERS_TIMEOUT: "GATEWAY_HEADERS_TIMEOUT",
    Failure.FIRST_TOKEN_TIMEOUT: "GATEWAY_FIRST_TOKEN_TIMEOUT",
    Failure.IDLE_TIMEOUT: "GATEWAY_IDLE_TIMEOUT",
    Failure.DEADLINE: "GATEWAY_TOTAL_TIMEOUT",
}


@dataclass(slots=True)
class Attempt:
    """One upstream attempt that failed (and was failed over, or ended the call)."""

    channel_id: int
    channel_name: str
    error: Failure
    status: int | None = None


class UpstreamStreamError(Exception):
    """An upstream stream that cannot be relayed: an error event, invalid JSON, a stall."""

    def __init__(self, failure: str) -> None:
        super().__init__(failure)
        self.failure = Failure(failure)


# OpenAI error types by status, so every error we make looks like one OpenAI's SDKs understand.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    499: "client_disconnected",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class GatewayError(Exception):
    """An error to answer in the OpenAI shape. Raised anywhere on the request path before the response
    starts; after a stream has started it is sent as an SSE `data:` event instead."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        type: str | None = None,
        param: str | None = None,
        headers: Iterable[tuple[bytes, bytes]] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type or ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.param = param
        self.headers = list(headers)
        self.attempts: list[Attempt] = []  # upstream attempts that failed before this error (failover)
        self.explanation: list[str] = []  # the routing decision, when routing refused the request

    def payload(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}

    def body(self) -> bytes:
        return orjson.dumps(self.payload())


class ContextOverflow(GatewayError):
    """The prompt does not fit the model's window, as OpenAI says it (`context_length_exceeded`):
    what coding clients look for to compact the conversation and try again. Anthropic's clients
    look for "prompt is too long" (`anthropic_message`)."""

    def __init__(
        self,
        message: str,
        *,
        prompt_tokens: int | None = None,
        window: int | None = None,
        max_tokens: int | None = None,
        param: str = "messages",
    ) -> None:
        super().__init__(400, message, code="context_length_exceeded", param=param)
        self.prompt_tokens = prompt_tokens
        self.window = window
        self.max_tokens = max_tokens

    def anthropic_message(self) -> str:
        """Anthropic's own words for the two cases (Claude Code reads the figures of the second to
        lower its max_tokens and try again)."""
        prompt, window, output = self.prompt_tokens, self.window, self.max_tokens
        if prompt is not None and window is not None:
            if prompt >= window:
                return f"prompt is too long: {prompt} tokens > {window} maximum"
            if output is not None:
                return (
                    f"input length and `max_tokens` exceed context limit: {prompt} + {output} > {window}, "
                    "decrease input length or `max_tokens` and try again"
                )
        return f"prompt is too long: {self.message}"


# How model servers say a prompt does not fit (llama.cpp, vLLM's releases, SGLang, OpenAI, Anthropic):
# a type or a code where they have one, else their words; then the figures their words carry.
_OVERFLOW_WORDS = re.compile(
    r"context length|context size|context window|maximum model length|prompt is too long"
    r"|input length and `max_tokens` exceed",
    re.IGNORECASE,
)
_WINDOW_FIGURES = re.compile(
    r"maximum context length is (\d+)|context length \((\d+) tokens\)|maximum model length of (\d+)"
    r"|context size \((\d+) tokens\)|tokens > (\d+) maximum",
    re.IGNORECASE,
)
_PROMPT_FIGURES = re.compile(
    r"prompt is too long: (\d+) tokens|input \((\d+) tokens\)|prompt \(length (\d+)\)|request \((\d+) tokens\)"
    r"|\((\d+) in the messages|messages resulted in (\d+) tokens|request has (\d+) input tokens"
    r"|requested (\d+) tokens in the input",  # vLLM's embeddings
    re.IGNORECASE,
)


def _error_object(body: bytes) -> dict[str, Any] | None:
    """The error object of an upstream's JSON error: `{"error": {…}}`, or at the top as vLLM and
    SGLang put it before vLLM 0.10 (`{"object": "error", "message": …}`)."""
    try:
        return _error_in(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None


def _error_in(data: object) -> dict[str, Any] | None:
    """`_error_object` of a body already parsed."""
    if not isinstance(data, dict):
        return None
    err = data if data.get("object") == "error" else data.get("error")
    return err if isinstance(err, dict) else None


def _message(err: dict[str, Any] | None) -> str:
    """An upstream error object's message (its first 300 characters), "" when it has none."""
    said = err.get("message") if err is not None else None
    return said[:300] if isinstance(said, str) else ""


def upstream_error(status: int, body: bytes, *, retry_after: str = "") -> GatewayError:
    """An upstream's failure (a 5xx, 3xx, 401/403/404/408/429) as ours, in the server's own words
    when it gave them in any shape `_said` reads."""
    message, kind = _said(body)
    loading = status == 503 and kind == "unavailable_error"
    if status == 529 or kind == "overloaded_error" or (status == 503 and retry_after) or loading:
        # Anthropic's "overloaded" (a 503 that says when to retry is the same), and llama.cpp's 503
        # while it loads its weights (`unavailable_error`, "Loading model": after a restart, for a
        # minute or more): busy or not ready yet, not broken. A client backs off and retries, where
        # a 502 has an SDK retry at once. The Messages surface answers 529 again, the others 503.
        return GatewayError(
            503,
            f"The upstream is not ready yet ({message}); retry later."
            if loading and message
            else "The upstream is overloaded; retry later.",
            code="upstream_overloaded",
            headers=[(b"retry-after", _retry_after(retry_after) if retry_after else b"5")],
        )
    if status in (401, 403):
        return GatewayError(
            502,
            "The upstream rejected this portal's credentials; an admin must fix the channel.",
            code="upstream_auth_failed",
        )
    if status == 404:  # the upstream's words: a model it does not serve, or a response id it does not know
        return GatewayError(404, f"The upstream answered 404: {message or 'not found'}", code="upstream_not_found")
    if status == 429:
        return GatewayError(
            429,
            f"The upstream is rate limiting: {message or 'too many requests'}",
            code="upstream_rate_limited",
            headers=[(b"retry-after", _retry_after(retry_after))],
        )
    return GatewayError(
        502, f"The upstream failed with HTTP {status}: {message or 'no details'}", code="upstream_error"
    )


def _said(body: bytes) -> tuple[str, str]:
    """An upstream error's message (its first 300 characters) and type, "" for what it did not
    say: the object `_error_object` finds, or Ollama's `{"error": "…"}`."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "", ""
    err = _error_in(data)
    if err is not None:
        kind = err.get("type")
        return _message(err), kind if isinstance(kind, str) else ""
    said = data.get("error") if isinstance(data, dict) else None
    return (said[:300], "") if isinstance(said, str) else ("", "")


def _retry_after(value: str) -> bytes:
    """The upstream's Retry-After in whole seconds (1 when it sent none or an HTTP date)."""
    try:
        return str(max(1, min(int(float(value.strip())), 3600))).encode()
    except ValueError:
        return b"1"


def router_not_found(body: bytes) -> bool:
    """llama.cpp's router mode (`--models-preset`) refusing a model it does not have: a 400 where vLLM
    answers 404 (ggml-org/llama.cpp#17968). Its exact words, so no other 400 is taken for it."""
    return _message(_error_object(body)) == "model not found"


# llama.cpp's words (a 500) for an input its server was not started for: tools without `--jinja`,
# an image or audio without `--mmproj`. Its exact phrases, read from llama.cpp channels only.
_LLAMACPP_CANNOT = ("requires --jinja", "image input is not supported", "audio input is not supported")


def unsupported(status: int, body: bytes, *, llamacpp: bool) -> GatewayError | None:
    """An upstream saying it cannot take such a request, not that it failed, as our 400 (None for
    any other answer): any server's 501 Not Implemented (llama.cpp's `not_supported_error`:
    embeddings without `--embeddings`, reranking without `--reranking`), and llama.cpp's 500 for
    tools without `--jinja` or an image without `--mmproj`. The request is sound and the server
    well: as a 5xx an SDK retried it (Claude Code for minutes) and the channel's health counted it."""
    if status != 501 and not (llamacpp and status == 500):
        return None
    said = _message(_error_object(body))
    if status == 500 and not any(words in said for words in _LLAMACPP_CANNOT):
        return None
    return GatewayError(
        400,
        f"This model's server cannot take this request: {said or 'HTTP 501 Not Implemented'}",
        code="unsupported_by_upstream",
    )


# llama.cpp's words (a 500) for an embedding or reranking input longer than its physical batch
# (`--ubatch-size`, 512 by default): such a model reads each input in one batch. The input is at
# fault, not the server: as a 5xx an SDK retried it and the channel's health counted it, so one
# indexer with long chunks could put an embedding server down.
_LLAMACPP_BATCH_WORDS = "too large to process. increase the physical batch size"
_BATCH_FIGURES = re.compile(r"input \((\d+) tokens\).*current batch size: (\d+)")


def input_too_large(status: int, body: bytes, *, llamacpp: bool) -> ContextOverflow | None:
    """llama.cpp's 500 for an input longer than its physical batch, as our 400 on the input
    (`context_length_exceeded`, param `input`); None for any other answer."""
    if not (llamacpp and status == 500):
        return None
    said = _message(_error_object(body))
    if _LLAMACPP_BATCH_WORDS not in said:
        return None
    figures = _BATCH_FIGURES.search(said)
    if figures is None:  # llama.cpp's releases before it gave the figures
        return ContextOverflow(
            f"The input is longer than the model's server reads at once ({said}). Shorten or split the "
            "input, or start the server with a larger --ubatch-size (and --batch-size).",
            param="input",
        )
    tokens, batch = int(figures[1]), int(figures[2])
    return ContextOverflow(
        f"The input is {tokens:,} tokens (the model server's count); the server reads at most {batch:,} "
        "tokens per input (llama.cpp's physical batch, --ubatch-size). Shorten or split the input, or "
        "start the server with a larger --ubatch-size (and --batch-size).",
        prompt_tokens=tokens,
        window=batch,
        param="input",
    )


def _figure(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.search(text)
    return int(next(g for g in found.groups() if g is not None)) if found else None


def request_fault(status: int, body: bytes, *, llamacpp: bool) -> tuple[GatewayError, Failure] | None:
    """A server error that is the request's, not the server's, as our 400 and the attempt's failure
    (None for a server that failed): a server that cannot take such a request (`unsupported`), an
    input longer than llama.cpp reads at once (`input_too_large`). Another route may take it, and
    nothing counts against the channel (`NOT_THE_CHANNELS`)."""
    if (cannot := unsupported(status, body, llamacpp=llamacpp)) is not None:
        return cannot, Failure.UNSUPPORTED
    if (too_long := input_too_large(status, body, llamacpp=llamacpp)) is not None:
        return too_long, Failure.CONTEXT_LENGTH
    return None


def context_overflow(
    status: int, body: bytes, *, max_tokens: object = None, embedding: bool = False
) -> ContextOverflow | None:
    """An upstream's 400 (or 413) saying the request does not fit the model's window, as our error;
    None for any other answer. The server's count is the one that matters (the gateway's is an
    estimate): it is in the message when the server gave it. `embedding`: the request was an
    embeddings input (no conversation to shorten, no output to lower)."""
    err = _error_object(body) if status in (400, 413) else None
    if err is None:
        return None
    said = _message(err)
    if not (
        err.get("type") == "exceed_context_size_error"  # llama.cpp
        or err.get("code") == "context_length_exceeded"  # OpenAI, and servers that copy it
        or _OVERFLOW_WORDS.search(said)
    ):
        return None
    prompt, window = err.get("n_prompt_tokens"), err.get("n_ctx")  # llama.cpp's figures
    if not isinstance(prompt, int) or isinstance(prompt, bool):
        prompt = _figure(_PROMPT_FIGURES, said)
    if not isinstance(window, int) or isinstance(window, bool):
        window = _figure(_WINDOW_FIGURES, said)
    if embedding:
        if window is not None and prompt is not None:
            told = (
                f"This model's maximum context length is {window:,} tokens; the input is {prompt:,} tokens "
                "(the model server's count)"
            )
        else:
            told = f"The input exceeds the model's maximum context length ({said})"
        told += ". Shorten or split the input."
        return ContextOverflow(told, prompt_tokens=prompt, window=window, param="input")
    if window is None:
        message = f"The request exceeds the model's maximum context length: {said or 'no details'}"
    elif prompt is None:
        message = (
            f"This model's maximum context length is {window} tokens and the request does not fit "
            f"({said}). Shorten the conversation or lower max_tokens."
        )
    else:
        fits = "; lower max_tokens or shorten the conversation." if prompt < window else ". Shorten the conversation."
        message = (
            f"This model's maximum context length is {window} tokens; the prompt is {prompt} tokens "
            f"(the model server's count){fits}"
        )
    output = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None
    return ContextOverflow(message, prompt_tokens=prompt, window=window, max_tokens=output)
