"""The bottom of the gateway: errors and the shared vocabulary of every stage. Imports no other
module of `gateway/` (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

import enum
import itertools
import os
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
    HEADERS_TIMEOUT = "timeout"  # no response headers within GATEWAY_HEADERS_TIMEOUT
    FIRST_TOKEN_TIMEOUT = "first_token_timeout"  # noqa: S105 - headers, then no token within the prefill deadline
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
