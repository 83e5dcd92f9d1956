"""The gateway's ASGI front door and its route table: every gateway path is in `ROUTES` below.

`/v1/...` (also a doubled `/v1/v1/...`, and `//v1/...` from a base URL ending in `/`) and the
bare gateway endpoints (`/chat/completions` without `/v1`) are answered here, without Django's
middleware stack; everything else goes to Django. The lifespan opens and closes the per-process
state (`state.process`).

A request's path, file by file: `asgi` (route) → `surfaces/<surface>` (parse) →
`admission` (`auth` the key, `catalog` the model and its routes, `limits` reserve) →
`call.Plan` → `call` (forward with failover) → `relay` (SSE) or `Call.send_json` → `usage`
(the record, written in batches).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from keys.choices import UsageStatus
from portal.public import public_url

from . import health, metrics
from .auth import authenticate
from .call import Call, current, opened
from .errors import SHUTDOWN
from .http import REPLICA, GatewayError, Receive, Request, Scope, Send, send_error
from .metrics import IN_FLIGHT
from .state import process
from .surfaces import chat, messages, models, responses

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[None]]


async def serve_mcp(req: Request) -> None:
    """`/mcp/<slug>`: the MCP surface is imported on its first request. The official `mcp` SDK
    (with pydantic, starlette and their kin) is ~40 MiB of every process's memory; a gateway whose
    team uses no MCP server never pays it."""
    from .surfaces import mcp

    await mcp.serve(req)


async def stop_mcp() -> None:
    """Stop the MCP session manager if this process ever started one (see `serve_mcp`)."""
    mcp = sys.modules.get(f"{__package__}.surfaces.mcp")
    if mcp is not None:
        await mcp.front.stop()


ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Where = Literal["v1", "v1+bare", "v1-prefix", "exact", "prefix"]

# (method, path, handler, where): "v1" answers `/v1{path}` (and `/v1/v1{path}`); "v1+bare" also
# `{path}` without the prefix; "v1-prefix" answers `/v1{path}<anything>`; "exact" one path as is;
# "prefix" answers `{path}<anything>` (not under /v1: the MCP endpoints, `/mcp/<slug>`).
ROUTES: list[tuple[str, str, Handler, Where]] = [
    ("POST", "/chat/completions", chat.chat_completions, "v1+bare"),
    ("POST", "/completions", chat.completions, "v1+bare"),
    ("POST", "/embeddings", chat.embeddings, "v1+bare"),
    # Bare GET /models stays with Django: the portal's UI may use that path.
    ("GET", "/models", models.list_models, "v1"),
    ("GET", "/models/", models.get_model, "v1-prefix"),
    ("POST", "/messages", messages.create_message, "v1+bare"),
    ("POST", "/messages/count_tokens", messages.count_tokens, "v1+bare"),
    ("HEAD", "/api/hello", models.hello, "exact"),
    ("GET", "/api/hello", models.hello, "exact"),
    ("POST", "/responses", responses.create_response, "v1+bare"),
    ("GET", "/responses", responses.refuse_get, "v1+bare"),
    ("GET", "/metrics", metrics.serve, "exact"),
    ("GET", "/healthz", health.healthz, "exact"),
    ("GET", "/readyz", health.readyz, "exact"),
    ("POST", "/mcp/", serve_mcp, "prefix"),
    ("GET", "/mcp/", serve_mcp, "prefix"),
    ("DELETE", "/mcp/", serve_mcp, "prefix"),
]


_UNSEEN = object()


class RouteTable:
    """Gateway paths, keyed by method and the path after the `/v1` prefix."""

    MAX_SEEN = 1024

    def __init__(self, routes: list[tuple[str, str, Handler, Where]]) -> None:
        # HEAD is GET without the body (RFC 9110), for every GET path but MCP's (a GET there opens
        # an event stream); `application` drops the body.
        heads = {(path, where) for method, path, _h, where in routes if method == "HEAD"}
        routes = routes + [
            ("HEAD", path, handler, where)
            for method, path, handler, where in routes
            if method == "GET" and where != "prefix" and (path, where) not in heads
        ]
        self.methods = sorted({method for method, *_rest in routes})
        self._seen: dict[tuple[str, str], object] = {}
        self.v1: dict[tuple[str, str], Handler] = {}
        self.v1_prefix: list[tuple[str, str, Handler]] = []
        self.bare: dict[tuple[str, str], Handler] = {}
        self.exact: dict[tuple[str, str], Handler] = {}
        self.prefix: list[tuple[str, str, Handler]] = []
        for method, path, handler, where in routes:
            if where == "v1-prefix":
                self.v1_prefix.append((method, path, handler))
            elif where == "prefix":
                self.prefix.append((method, path, handler))
            elif where == "exact":
                self.exact[(method, path)] = handler
            else:
                self.v1[(method, path)] = handler
                if where == "v1+bare":
                    self.bare[(method, path)] = handler

    def match(self, method: str, path: str) -> tuple[Handler | None, str] | None:
        """(handler or None for a gateway 404/405, subpath), or None when Django should answer.
        Kept per method and path (a few distinct ones carry the traffic; at most MAX_SEEN)."""
        found = self._seen.get((method, path), _UNSEEN)
        if found is _UNSEEN:
            found = self._match(method, path)
            if len(self._seen) >= self.MAX_SEEN:
                self._seen.clear()
            self._seen[(method, path)] = found
        return found  # type: ignore[return-value]

    def allowed(self, path: str) -> list[str]:
        """The methods a gateway path takes, OPTIONS included; [] when it is not a gateway path."""
        methods = [m for m in self.methods if (found := self._match(m, path)) is not None and found[0] is not None]
        return sorted([*methods, "OPTIONS"]) if methods else []

    def _match(self, method: str, path: str) -> tuple[Handler | None, str] | None:
        if path.startswith("//"):  # a base URL ending in "/" joined with "/v1/...": the path meant
            path = "/" + path.lstrip("/")
        if path[:3] == "/V1":  # a base URL typed ".../V1": the path meant (the rest is matched as is)
            path = "/v1" + path[3:]
        if path == "/v1" or path.startswith("/v1/"):
            sub = path[3:]
            while True:  # "/v1/" joined with "/chat/…" (a base URL ending in "/"), and "/v1/v1/…"
                if sub[:2] == "//":
                    sub = "/" + sub.lstrip("/")
                if sub == "/v1" or sub.startswith("/v1/"):
                    sub = sub[3:]
                    continue
                break
            if len(sub) > 1 and sub.endswith("/"):
                sub = sub.rstrip("/")
            handler = self.v1.get((method, sub))
            if handler is None:
                for m, prefix, h in self.v1_prefix:
                    if m == method and sub.startswith(prefix) and len(sub) > len(prefix):
                        handler = h
                        break
            return handler, sub
        handler = self.exact.get((method, path))
        if handler is not None:
            return handler, path
        under_prefix = False
        for m, prefix, h in self.prefix:
            # (`/mcp` and `/mcp/` too: the handler's JSON 404 says a server's slug is missing)
            if path.startswith(prefix) or path == prefix[:-1]:
                if m == method:
                    return h, path
                under_prefix = True
        if under_prefix:  # a gateway path, not this method: our 405, not Django's HTML 404
            return None, path
        stripped = path.rstrip("/") if len(path) > 1 else path
        handler = self.bare.get((method, stripped))
        if handler is not None:
            return handler, stripped
        return None


routes = RouteTable(ROUTES)


def public_base_url(scope: Scope) -> str:
    """PORTAL_PUBLIC_URL, else the address this server listens on (never the Host header)."""
    server = scope.get("server") or ("127.0.0.1", 8000)
    return f"{public_url(server=(server[0], server[1] or ''), scheme=scope.get('scheme', 'http'))}/v1"


def not_found(scope: Scope, sub: str) -> GatewayError:
    base = public_base_url(scope)
    known = sorted({p for (_m, p) in routes.v1} | {p + "{id}" for (_m, p, _h) in routes.v1_prefix})
    allowed = routes.allowed(scope["path"])
    if allowed:  # RFC 9110: a 405 says which methods the path takes
        return GatewayError(
            405,
            f"Method {scope['method']} is not allowed on {scope['path']}; use {', '.join(allowed)}.",
            code="method_not_allowed",
            headers=[(b"allow", ", ".join(allowed).encode())],
        )
    return GatewayError(
        404,
        f"Unknown gateway path {scope['path']}. The OpenAI-compatible base URL is {base} "
        f"(endpoints: {', '.join(known)}).",
        code="unknown_path",
    )


async def send_options(send: Send, allowed: list[str]) -> None:
    """OPTIONS on a gateway path: 204 and the methods it takes. No CORS headers: the gateway has no
    cross-origin policy (its clients are SDKs and tools, not other sites' pages)."""
    headers = [(b"allow", ", ".join(allowed).encode()), (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def without_body(send: Send) -> Send:
    """`send` for a HEAD request: the GET's status and headers (its Content-Length too), no body."""

    async def head(message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": b""}
        await send(message)

    return head


access_log = logging.getLogger("gateway.access")


def access_log_enabled() -> bool:
    """`portal up --access-log` (PORTAL_ACCESS_LOG=1 in the web process); off by default."""
    return os.environ.get("PORTAL_ACCESS_LOG", "").lower() in ("1", "true", "yes", "on")


async def handle_logged(handler: Handler, scope: Scope, receive: Receive, send: Send, sub: str) -> None:
    """`handle`, then one line: method, path, status, model, key prefix (never the key), duration,
    tokens. Costs a wrapper around `send`, so it is only used when the access log is on."""
    started = time.perf_counter()
    status = 0

    async def watch(message: Mapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    req, call = await handle(handler, scope, receive, watch, sub)
    tokens = "-"
    if call is not None and call.usage is not None:
        tokens = f"{call.usage.prompt_tokens}+{call.usage.completion_tokens}{'~' if call.usage.estimated else ''}"
    access_log.info(
        "%s %s %s model=%s key=%s %.1fms tokens=%s replica=%s",
        scope["method"],
        scope["path"],
        status or "-",
        req.model_name or "-",
        f"{req.key_prefix}…" if req.key_prefix else "-",
        (time.perf_counter() - started) * 1000,
        tokens,
        REPLICA,
    )


# A request body larger than this (up to `http.MAX_BODY`) is read only once its key is known good:
# anyone could otherwise make every replica buffer 64 MB per connection before its 401.
PRE_AUTH_BODY = 1 << 20


def _large_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length")
    if length is None:
        return "transfer-encoding" in headers  # chunked: its size is known only once read
    return len(length) > 6 and (not length.isdigit() or int(length) > PRE_AUTH_BODY)  # (7 digits: ≥ 1 MB)


async def handle(handler: Handler, scope: Scope, receive: Receive, send: Send, sub: str) -> tuple[Request, Call | None]:
    """Run a gateway handler; any GatewayError before the response started becomes a JSON error,
    and a call the error left open is failed (finished with its record)."""
    req = Request(scope, receive, send, sub)
    current.set(None)
    IN_FLIGHT.n += 1
    try:
        if _large_body(req.headers):  # read for a caller with a valid key only (a 401 comes first)
            await authenticate(req)
        await handler(req)
    except GatewayError as exc:
        if (call := opened()) is not None:
            call.fail(exc)
        if exc.code != "client_disconnected":  # (gone: nobody to answer; a late body gets its 408, BodyDeadline)
            await send_error(req.send, exc)
    except asyncio.CancelledError:
        # The server cancelled the request: its shutdown's grace ended (a client that leaves is a
        # 499 GatewayError by now, `Call.forward`; a stream's relay ends its own stream). A request
        # not answered yet gets our 503, not the server's plain-text 500, and is on the record.
        err = GatewayError(503, "The gateway is shutting down; retry the request.", code="shutdown")
        if (call := opened()) is not None:
            call.finish(None, status=UsageStatus.INTERRUPTED, http_status=503, error=SHUTDOWN)
        if not req.answered:
            with contextlib.suppress(Exception):  # the connection may be gone already
                await send_error(req.send, err)
        # Answered (or ended, a stream), the request is done: not an exception for the server to log.
        if (task := asyncio.current_task()) is not None:
            task.uncancel()
        logger.info("%s %s cut by the shutdown (request %s)", scope["method"], scope["path"], req.request_id)
    except Exception:
        logger.exception("gateway error on %s %s", scope["method"], scope["path"])
        err = GatewayError(500, "The gateway failed unexpectedly; it has been logged.", code="internal")
        if (call := opened()) is not None:
            call.fail(err)
        await send_error(req.send, err)
    finally:
        IN_FLIGHT.n -= 1
    return req, opened()


def build_application(django_app: ASGIApp) -> ASGIApp:
    """Wrap Django's ASGI app: gateway paths here, the rest to Django, lifespan for our state."""
    run = handle_logged if access_log_enabled() else handle
    # Health probes come every few seconds from each container's check, the proxy and the kubelet:
    # the access log is for requests people and clients make.
    probes = {health.healthz, health.readyz}

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "websocket" and routes.match("GET", scope["path"]) is not None:
            # Codex's built-in provider tries Responses over a WebSocket first; a 426 at once makes
            # it use HTTP instead of retrying (Django cannot take WebSockets either).
            await responses.refuse_websocket(scope, receive, send)
            return
        if kind == "http":
            method = scope["method"]
            found = routes.match(method, scope["path"])
            if method == "OPTIONS" and (found is None or found[0] is None):
                allowed = routes.allowed(scope["path"])
                if allowed:
                    await send_options(Request(scope, receive, send, "").send, allowed)  # (with its request id)
                    return
            if found is None:
                await django_app(scope, receive, send)
                return
            handler, sub = found
            if handler is None:
                await send_error(Request(scope, receive, send, sub).send, not_found(scope, sub))
                return
            if method == "HEAD":
                send = without_body(send)
            await (handle if handler in probes else run)(handler, scope, receive, send, sub)
            return
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    try:
                        await process.start()
                    except Exception as exc:
                        logger.exception("gateway start failed")
                        await send({"type": "lifespan.startup.failed", "message": str(exc)})
                        return
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    try:
                        await stop_mcp()
                        await process.stop()
                    finally:
                        await send({"type": "lifespan.shutdown.complete"})
                    return
        await django_app(scope, receive, send)

    return application
