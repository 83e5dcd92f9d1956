"""Raw-ASGI helpers for the gateway: the request object, JSON/error responses, OpenAI error shape.

The gateway does not use Django's request/response machinery on its hot path; these few helpers
are all it needs, and they are cheap.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import orjson

from portal.bodies import MAX_DEPTH, too_deep
from portal.body_deadline import REQUEST_ID_KEY

from .errors import ERROR_TYPES, GatewayError, new_request_id

__all__ = ["ERROR_TYPES", "GatewayError", "Request", "send_bytes", "send_error", "send_json", "sse_error_event"]


Scope = dict[str, Any]
REPLICA = f"{socket.gethostname()}:{os.getpid()}"  # which of N replicas served it (compose, two hosts)
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
MAX_BODY = 64 * 1024 * 1024
# Tool and response-format JSON schemas nest deeper than the REST API's bodies; still far below
# what the translators (recursive) could walk.
GATEWAY_MAX_DEPTH = 2 * MAX_DEPTH


class Request:
    """What a gateway handler needs from an ASGI HTTP scope. Headers are lower-cased str."""

    __slots__ = (
        "_body",
        "_sent_to",
        "answered",
        "headers",
        "key_prefix",
        "method",
        "model_name",
        "path",
        "playground",
        "receive",
        "request_id",
        "reveal_replica",
        "scope",
        "subpath",
    )

    def __init__(self, scope: Scope, receive: Receive, send: Send, subpath: str) -> None:
        self.scope = scope
        self.receive = receive
        self.request_id = new_request_id()
        scope[REQUEST_ID_KEY] = self.request_id.encode()  # for an answer made outside the gateway (BodyDeadline's 408)
        # Where `send` delivers: the server's, or what a cold start's stream fits in (`ondemand`). A
        # method, not a closure kept on the request: that would be a reference cycle, and every
        # request's objects would wait for the cyclic collector instead of going when it ends.
        self._sent_to: Send = send
        self.answered = False  # the response has started: an error can no longer be its status
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.subpath = subpath  # the path after the /v1 prefix(es), e.g. "/chat/completions"
        self.headers: dict[str, str] = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self._body: bytes | None = None
        # What admission learnt, for the access log (also of refused requests): never the key itself.
        self.key_prefix: str | None = None
        self.model_name: str | None = None
        self.playground = False  # sent by the playground page with its session-bound credential
        self.reveal_replica = False

    async def send(self, message: Mapping[str, Any]) -> None:
        """Every gateway answer carries its request id (`x-request-id`, as OpenAI's does; on the
        Messages surface `request-id` too, which Anthropic's SDKs read)."""
        if message["type"] == "http.response.start":
            self.answered = True
            rid = self.request_id.encode()
            extra = [(b"x-request-id", rid)]
            if self.subpath.startswith("/messages"):
                extra.append((b"request-id", rid))
            if self.playground and self.reveal_replica:  # an admin's playground: which replica answered
                extra.append((b"x-portal-replica", REPLICA.encode()))
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await self._sent_to(message)

    def send_through(self, send: Send) -> Send:
        """From now on deliver what `send` is given through `send` (which delivers to what this
        returns: where it went so far), after the request id is added."""
        sent_to, self._sent_to = self._sent_to, send
        return sent_to

    @property
    def client_ip(self) -> str | None:
        client = self.scope.get("client")
        return client[0] if client else None

    @property
    def received(self) -> bytes:
        """The body as read so far (all of it once a surface parsed it)."""
        return self._body or b""

    async def body(self, limit: int = MAX_BODY) -> bytes:
        """The whole body; a 413 once it is larger than `limit` (said by Content-Length, or read)."""
        if self._body is None:
            length = self.headers.get("content-length", "")
            if length.isdigit() and int(length) > limit:
                raise GatewayError(413, "Request body is too large.", code="body_too_large")
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await self.receive()
                if message["type"] == "http.disconnect":  # (the answer goes nowhere; the log says 499)
                    raise GatewayError(499, "client disconnected before sending the body", code="client_disconnected")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise GatewayError(413, "Request body is too large.", code="body_too_large")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            self._body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return self._body

    async def json(self) -> dict[str, Any]:
        raw = await self.body()
        try:
            data = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            encoding = self.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):  # a compressed body: say so, not "not JSON"
                raise GatewayError(
                    415,
                    f"Content-Encoding {encoding[:40]!r} is not supported: send the request body uncompressed.",
                    code="unsupported_content_encoding",
                ) from None
            raise GatewayError(400, "The request body is not valid JSON.", code="invalid_json") from None
        # Every level is a `[` or a `{`: a body with no more of them than the limit is not walked.
        if raw.count(b"[") + raw.count(b"{") > GATEWAY_MAX_DEPTH and too_deep(data, GATEWAY_MAX_DEPTH):
            raise GatewayError(
                400, f"The request body nests deeper than {GATEWAY_MAX_DEPTH} levels.", code="invalid_json"
            )
        if not isinstance(data, dict):
            raise GatewayError(400, "The request body must be a JSON object.", code="invalid_json")
        return data


async def send_bytes(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = (), content_type: bytes | None = None
) -> None:
    hdrs = [(b"content-type", content_type or b"application/json"), (b"content-length", str(len(body)).encode())]
    hdrs.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, data: Any, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_bytes(send, status, orjson.dumps(data), headers)


async def send_error(send: Send, error: GatewayError) -> None:
    await send_bytes(send, error.status, error.body(), error.headers)


def sse_error_event(error: GatewayError) -> bytes:
    """An error after the stream started: one `data:` event in the OpenAI shape, then `[DONE]`."""
    return b"data: " + error.body() + b"\n\ndata: [DONE]\n\n"
