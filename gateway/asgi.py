"""The gateway's ASGI front door.

`/v1/...` (also a doubled `/v1/v1/...`) and the bare gateway endpoints (`/chat/completions`
without `/v1`) are answered here, without Django's middleware stack; everything else goes to
Django. The lifespan opens and closes the per-process state (pooled upstream client, limiter,
usage writer; see `pipeline.Gateway`).

Other surfaces register in the route table below:

    from gateway.asgi import routes
    routes.register("POST", "/messages", messages_handler)           # /v1/messages, /messages
    routes.register("POST", "/messages/count_tokens", count_handler)
    routes.register("POST", "/responses", responses_handler)
    routes.register_exact("HEAD", "/api/hello", hello_handler)       # a path outside /v1
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from django.conf import settings

from .http import GatewayError, Receive, Request, Scope, Send, send_error

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[None]]


class RouteTable:
    """Gateway paths, keyed by method and the path after the `/v1` prefix."""

    def __init__(self) -> None:
        self.v1: dict[tuple[str, str], Handler] = {}
        self.v1_prefix: list[tuple[str, str, Handler]] = []
        self.bare: dict[tuple[str, str], Handler] = {}
        self.exact: dict[tuple[str, str], Handler] = {}

    def register(self, method: str, subpath: str, handler: Handler, *, bare: bool = True) -> None:
        """Serve `method /v1{subpath}`; with `bare` also `{subpath}` without the prefix."""
        self.v1[(method, subpath)] = handler
        if bare:
            self.bare[(method, subpath)] = handler

    def register_prefix(self, method: str, prefix: str, handler: Handler) -> None:
        """Serve `method /v1{prefix}<anything>` (e.g. `/models/` + a model id)."""
        self.v1_prefix.append((method, prefix, handler))

    def register_exact(self, method: str, path: str, handler: Handler) -> None:
        """Serve one exact path outside `/v1` (e.g. `HEAD /api/hello`)."""
        self.exact[(method, path)] = handler

    def match(self, method: str, path: str) -> tuple[Handler | None, str] | None:
        """(handler or None for a gateway 404/405, subpath), or None when Django should answer."""
        if path == "/v1" or path.startswith("/v1/"):
            sub = path[3:]
            while sub == "/v1" or sub.startswith("/v1/"):
                sub = sub[3:]
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
        stripped = path.rstrip("/") if len(path) > 1 else path
        handler = self.bare.get((method, stripped))
        if handler is not None:
            return handler, stripped
        return None


routes = RouteTable()


def _register_openai() -> None:
    from . import openai_api

    if ("POST", "/chat/completions") in routes.v1:
        return
    routes.register("POST", "/chat/completions", openai_api.chat_completions)
    routes.register("POST", "/completions", openai_api.completions)
    routes.register("POST", "/embeddings", openai_api.embeddings)
    # GET /models stays with Django without the /v1 prefix: the portal's UI may use that path.
    routes.register("GET", "/models", openai_api.list_models, bare=False)
    routes.register_prefix("GET", "/models/", openai_api.get_model)


def _register_surfaces() -> None:
    """Anthropic Messages and OpenAI Responses (`gateway.surfaces`), after OpenAI's own routes:
    they take over `GET /v1/models` to answer Claude Code in Anthropic's shape."""
    from .surfaces import register

    if ("POST", "/messages") not in routes.v1:
        register(routes)


def public_base_url(scope: Scope) -> str:
    if settings.PORTAL_PUBLIC_URL:
        return settings.PORTAL_PUBLIC_URL + "/v1"
    host = ""
    for k, v in scope.get("headers", ()):
        if k == b"host":
            host = v.decode("latin-1")
            break
    if not host and scope.get("server"):
        server_host, port = scope["server"][0], scope["server"][1]
        host = f"{server_host}:{port}" if port else server_host
    return f"{scope.get('scheme', 'http')}://{host or 'localhost'}/v1"


def not_found(scope: Scope, sub: str) -> GatewayError:
    base = public_base_url(scope)
    known = sorted({p for (_m, p) in routes.v1} | {p + "{id}" for (_m, p, _h) in routes.v1_prefix})
    if any(p == sub for (_m, p) in routes.v1):
        return GatewayError(
            405, f"Method {scope['method']} is not allowed on {scope['path']}.", code="method_not_allowed"
        )
    return GatewayError(
        404,
        f"Unknown gateway path {scope['path']}. The OpenAI-compatible base URL is {base} "
        f"(endpoints: {', '.join(known)}).",
        code="unknown_path",
    )


async def handle(handler: Handler, scope: Scope, receive: Receive, send: Send, sub: str) -> None:
    """Run a gateway handler; any GatewayError before the response started becomes a JSON error."""
    req = Request(scope, receive, send, sub)
    try:
        await handler(req)
    except GatewayError as exc:
        if req.call is not None:
            req.call.fail(exc)
        await send_error(send, exc)
    except asyncio.CancelledError:
        if req.call is not None:
            req.call.fail(GatewayError(499, "client disconnected", code="client_disconnected"))
        raise
    except Exception:
        logger.exception("gateway error on %s %s", scope["method"], scope["path"])
        err = GatewayError(500, "The gateway failed unexpectedly; it has been logged.", code="internal")
        if req.call is not None:
            req.call.fail(err)
        await send_error(send, err)


def build_application(django_app):
    """Wrap Django's ASGI app: gateway paths here, the rest to Django, lifespan for our state."""
    from .pipeline import gateway

    _register_openai()
    _register_surfaces()

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "websocket" and routes.match("GET", scope["path"]) is not None:
            # Codex's built-in provider tries Responses over a WebSocket first; a 426 at once makes
            # it use HTTP instead of retrying (Django cannot take WebSockets either).
            from .surfaces.responses import refuse_websocket

            await refuse_websocket(scope, receive, send)
            return
        if kind == "http":
            found = routes.match(scope["method"], scope["path"])
            if found is None:
                await django_app(scope, receive, send)
                return
            handler, sub = found
            if handler is None:
                await send_error(send, not_found(scope, sub))
                return
            await handle(handler, scope, receive, send, sub)
            return
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    try:
                        await gateway.start()
                    except Exception as exc:
                        logger.exception("gateway start failed")
                        await send({"type": "lifespan.startup.failed", "message": str(exc)})
                        return
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    try:
                        await gateway.stop()
                    finally:
                        await send({"type": "lifespan.shutdown.complete"})
                    return
        await django_app(scope, receive, send)

    return application
