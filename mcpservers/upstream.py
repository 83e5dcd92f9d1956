"""Talking to an upstream MCP server with the team's credentials, through the official SDK's client.

Used by the gateway (per developer request) and by the health check (`services.check_server`).
`Upstream` is a plain snapshot of a server's connection settings, built on the database thread,
so the async side never touches the ORM. Every failure comes out as `UpstreamFailure`, whose
message names the server and what went wrong in words that never contain a credential (the
SDK's exceptions can carry request headers or URLs with tokens, so they are not passed on).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import mcp_types as types
from django.utils.translation import gettext_noop
from mcp import ClientSession
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.session import LoggingFnT
from mcp.client.sse import sse_client
from mcp.client.streamable_http import DEFAULT_MAX_SSE_EVENT_SIZE, streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from portal.i18n import Message

from .choices import AuthKind, Transport
from .models import McpServer

logger = logging.getLogger(__name__)


# The largest answer (one SSE event) taken from an upstream: the SDK's own limit (its SSE client's
# too), named so the error can say it. TOO_LARGE begins how the SDK reports an event over it.
MAX_ANSWER_BYTES = DEFAULT_MAX_SSE_EVENT_SIZE
TOO_LARGE = "Server-sent event exceeded"
TOO_LARGE_JSON = "JSON answer exceeded"


class UpstreamFailure(Exception):
    """The upstream server could not be reached or did not answer as MCP (message is safe to show):
    `text` is a Message the health check stores and a reader sees in their language; `str()` is its
    English, what the gateway tells an MCP client and the call log records."""

    def __init__(self, text: Message) -> None:
        self.text = text
        super().__init__(text.english)


class ClientGone(Exception):
    """The developer's client disconnected during the call: it was abandoned upstream."""


class MemoryTokens:
    """Where the OAuth client-credentials provider keeps its access token: in this process only."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


_token_stores: dict[tuple[int, str], MemoryTokens] = {}


@dataclass(frozen=True, slots=True)
class Upstream:
    """What it takes to call one server; `headers` carries its credentials (never shown)."""

    id: int
    slug: str
    url: str
    transport: str
    timeout: float
    headers: dict[str, str] = field(repr=False)
    oauth: tuple[str, str, str, str] | None = field(default=None, repr=False)  # issuer, id, secret, scope

    @classmethod
    def of(cls, server: McpServer) -> Upstream:
        headers = server.extra_headers()
        if server.auth == AuthKind.BEARER and server.bearer_token:
            headers["Authorization"] = f"Bearer {server.bearer_token}"
        oauth = None
        if server.auth == AuthKind.OAUTH_CLIENT_CREDENTIALS:
            oauth = (server.oauth_issuer, server.oauth_client_id, server.oauth_client_secret, server.oauth_scope)
        return cls(server.pk, server.slug, server.url, server.transport, float(server.timeout_seconds), headers, oauth)

    def secrets(self) -> list[str]:
        """The credential values an answer must never carry back to a developer (the bearer token,
        header values, the OAuth client secret and the access token it got); short values such as
        "1" are left out, they would redact ordinary text."""
        values = [v.removeprefix("Bearer ").strip() for v in self.headers.values()]
        if self.oauth is not None:
            values.append(self.oauth[2])
            store = _token_stores.get((self.id, self.oauth[1]))
            if store is not None and store.tokens is not None:
                values.append(store.tokens.access_token)
        return [v for v in values if len(v) >= 8]

    def auth(self) -> httpx2.Auth | None:
        if self.oauth is None:
            return None
        issuer, client_id, secret, scope = self.oauth
        # One token store per server and client id: the token is reused until it expires.
        store = _token_stores.setdefault((self.id, client_id), MemoryTokens())
        return ClientCredentialsOAuthProvider(
            server_url=self.url,
            storage=store,
            client_id=client_id,
            client_secret=secret,
            scope=scope or None,
            issuer=issuer,
        )


class AnswerTooLarge(httpx2.StreamError):
    """A JSON answer over MAX_ANSWER_BYTES (a StreamError: the SDK turns it into a JSON-RPC error)."""

    def __init__(self) -> None:
        super().__init__(f"{TOO_LARGE_JSON} {MAX_ANSWER_BYTES} bytes")


class _CappedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > MAX_ANSWER_BYTES:
                raise AnswerTooLarge()
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class CappedJsonTransport(httpx2.AsyncHTTPTransport):
    """The SDK caps an event-stream answer per event, but reads a JSON answer whole (`aread`): a
    server answering `json_response` could fill the gateway's memory. Here such a body ends at
    MAX_ANSWER_BYTES, and the call fails as too large, as an event would."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        if response.headers.get("content-type", "").lower().startswith("application/json"):
            response.stream = _CappedBody(response.stream)
        return response


@asynccontextmanager
async def session(upstream: Upstream, on_log: LoggingFnT | None = None) -> AsyncIterator[ClientSession]:
    """An initialized client session to `upstream`, within its timeout; the server's log messages
    (`notifications/message`) go to `on_log`."""
    timeout = httpx2.Timeout(upstream.timeout)
    async with httpx2.AsyncClient(
        headers=upstream.headers, timeout=timeout, auth=upstream.auth(), transport=CappedJsonTransport()
    ) as http:
        if upstream.transport == Transport.SSE:

            def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
                return httpx2.AsyncClient(headers=upstream.headers, timeout=timeout, auth=upstream.auth())

            streams = sse_client(upstream.url, timeout=upstream.timeout, httpx_client_factory=factory)
        else:
            streams = streamable_http_client(upstream.url, http_client=http, max_sse_event_size=MAX_ANSWER_BYTES)
        async with streams as (read, write), ClientSession(read, write, logging_callback=on_log) as client:
            await client.initialize()
            yield client


async def _run(
    upstream: Upstream, what: str, call: Any, gone: asyncio.Event | None = None, on_log: LoggingFnT | None = None
) -> Any:
    """Run `call(session)` against `upstream`; any failure becomes an UpstreamFailure, and the
    client leaving (`gone`) a ClientGone."""
    try:
        with anyio.fail_after(upstream.timeout):
            async with session(upstream, on_log) as client:
                return await _unless_gone(call(client), gone)
    except Exception as exc:
        if isinstance(_innermost(exc), ClientGone):
            raise ClientGone() from None
        raise _failure(upstream, what, exc) from None


async def _unless_gone(work: Awaitable[Any], gone: asyncio.Event | None) -> Any:
    """`work`'s result, or ClientGone once `gone` is set. Only the request is cancelled (the SDK
    then tells the server, `notifications/cancelled`), not the session: it closes as usual, with
    its DELETE, so the server stops the tool instead of running it for nobody."""
    if gone is None:
        return await work
    with anyio.CancelScope() as request:
        async with anyio.create_task_group() as watching:

            async def cancel_when_gone() -> None:
                await gone.wait()
                request.cancel()

            watching.start_soon(cancel_when_gone)
            result = await work
            watching.cancel_scope.cancel()
        return result
    raise ClientGone()


def _innermost(exc: BaseException) -> BaseException:
    """What the call raised: the SDK's task groups wrap it (a JSON-RPC error too) in exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _failure(upstream: Upstream, what: str, exc: BaseException) -> UpstreamFailure:
    exc = _innermost(exc)
    if _too_large(exc):
        return UpstreamFailure(
            Message(
                gettext_noop(
                    "MCP server '%(server)s' answered %(what)s with more than %(size)s MiB, "
                    "more than the gateway passes on."
                ),
                server=upstream.slug,
                what=what,
                size=f"{MAX_ANSWER_BYTES / 1024 / 1024:g}",
            )
        )
    if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
        # The SDK's client answers a dropped connection (the server stopped mid-call) with this code.
        return UpstreamFailure(
            Message(
                gettext_noop("MCP server '%(server)s' is unreachable or failed: %(reason)s."),
                server=upstream.slug,
                reason=Message(gettext_noop("the connection closed before it answered")),
            )
        )
    if isinstance(exc, MCPError):
        # A JSON-RPC error the server sent: its message is the server's own words, not ours to
        # trust with secrets, so only the code is passed on.
        return UpstreamFailure(
            Message(
                gettext_noop("MCP server '%(server)s' refused %(what)s (JSON-RPC error %(code)s)."),
                server=upstream.slug,
                what=what,
                code=exc.code,
            )
        )
    if isinstance(exc, TimeoutError):
        return UpstreamFailure(
            Message(
                gettext_noop("MCP server '%(server)s' did not answer %(what)s within %(seconds)s s."),
                server=upstream.slug,
                what=what,
                seconds=f"{upstream.timeout:g}",
            )
        )
    reason = _describe(exc)
    logger.warning("MCP server %s: %s failed: %s", upstream.slug, what, reason.english)
    return UpstreamFailure(
        Message(
            gettext_noop("MCP server '%(server)s' is unreachable or failed: %(reason)s."),
            server=upstream.slug,
            reason=reason,
        )
    )


def _too_large(exc: BaseException) -> bool:
    """Whether the SDK's client refused an answer over MAX_ANSWER_BYTES: the Streamable HTTP client
    says so as a JSON-RPC error of its own (for an event, or our AnswerTooLarge on a JSON answer),
    the SSE client raises the SSE parser's error."""
    if isinstance(exc, MCPError):
        if exc.code == types.PARSE_ERROR:  # what the SDK makes of AnswerTooLarge on a JSON answer
            return TOO_LARGE_JSON in exc.error.message
        return exc.code == types.CONNECTION_CLOSED and TOO_LARGE in exc.error.message
    return isinstance(exc, httpx2.SSEError) and TOO_LARGE in str(exc)


def _describe(exc: BaseException) -> Message:
    """A credential-free description of a failure: the exception's kind and, for HTTP, its status."""
    if isinstance(exc, httpx2.HTTPStatusError):
        return Message.verbatim(f"HTTP {exc.response.status_code}")
    if isinstance(exc, httpx2.ConnectError | ConnectionError):
        return Message(gettext_noop("connection refused or unreachable"))
    if isinstance(exc, httpx2.TimeoutException):
        return Message(gettext_noop("timed out"))
    return Message.verbatim(type(exc).__name__)


async def list_tools(upstream: Upstream) -> list[types.Tool]:
    """Every tool the server lists (all pages)."""

    async def call(client: ClientSession) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    result: list[types.Tool] = await _run(upstream, "tools/list", call)
    return result


async def call_tool(
    upstream: Upstream,
    name: str,
    arguments: dict[str, Any] | None,
    gone: asyncio.Event | None = None,
    *,
    on_progress: ProgressFnT | None = None,
    on_log: LoggingFnT | None = None,
) -> types.CallToolResult | types.InputRequiredResult:
    """The server's answer to one tool call (a tool error is an answer, `is_error`); ClientGone
    when `gone` is set first (the call is cancelled upstream). With `on_progress` the server is
    asked for progress notifications, which go there as they come, as its log messages go to
    `on_log`."""

    async def call(client: ClientSession) -> types.CallToolResult | types.InputRequiredResult:
        return await client.call_tool(name, arguments or {}, progress_callback=on_progress)

    what = f"tools/call {name!r}"
    result: types.CallToolResult | types.InputRequiredResult = await _run(upstream, what, call, gone, on_log)
    return result
