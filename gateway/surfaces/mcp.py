"""MCP for developers: one endpoint per team server, `/mcp/<slug>`, behind the gateway key.

The protocol is the official SDK's: a low-level `Server` whose two handlers (`tools/list`,
`tools/call`) forward to the upstream server through `mcpservers.upstream`, served by the SDK's
Streamable HTTP session manager in stateless mode (every POST stands alone, so any replica can
answer any request and nothing is kept between them). This module does what the SDK does not:

1. the developer's key (`auth.authenticate`, as on /v1) and the server with the tools this key may
   call (`mcpservers.access`), before the SDK sees the request; an unknown server and a server the
   key may call nothing on are the same 404, so a key cannot probe for servers;
2. `tools/list` is the upstream's list filtered to the allowed tools (while the upstream is down:
   the tools its last check stored, marked with `_meta` STORED_CATALOG); a `tools/call` of another
   tool is refused here and never reaches the upstream;
3. each call takes a slot of the key's MCP rate limit (`limits.RedisLimiter`, the same atomic
   script as /v1, in its own `mcp:` window), and is recorded (`mcpservers.McpCall`); while it runs,
   the upstream's progress notifications and log messages about it are relayed (`Relay`) on the
   call's event stream (a `tools/call` from a client that takes one; every other request is
   answered with one JSON body);
4. the team's credentials go upstream only; every error the developer sees is ours, JSON-RPC
   shaped, and never carries them;
5. a browser's request (it carries `Origin`) only from the portal's own pages or those in
   GATEWAY_MCP_ALLOWED_ORIGINS (the spec's defence against DNS rebinding), and the refusals of a
   body the SDK would not take (its type, size, JSON, envelope) as JSON-RPC errors saying what is
   wrong: the SDK's are plain text or a page of pydantic's report.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import mcp_types as types
import orjson
import pydantic_core
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.translation import gettext_noop
from mcp.client.session import LoggingFnT
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from pydantic import BaseModel, ValidationError

from keys.models import Key
from mcpservers.access import PATH_PREFIX, allowed_tools
from mcpservers.choices import CallStatus
from mcpservers.models import McpServer
from mcpservers.services import record_call
from mcpservers.upstream import ClientGone, Upstream, UpstreamFailure, call_tool, list_tools
from portal.i18n import Message, as_message
from portal.public import DEFAULT_PORTS

from ..auth import authenticate
from ..cache import KeyInfo, namespace, run_db
from ..errors import REDACTED
from ..http import GatewayError, Receive, Request, send_bytes
from ..limits import Refusal, Scope, Stale
from ..state import process

logger = logging.getLogger(__name__)

SCOPE_KEY = "portal.mcp"  # where the handler leaves `Caller` in the ASGI scope for the SDK's handlers

# JSON-RPC error codes (the implementation-defined server range -32000..-32099).
NOT_AUTHENTICATED = -32001
UNKNOWN_SERVER = -32002
TOOL_NOT_ALLOWED = -32003
RATE_LIMITED = -32004
UPSTREAM_UNAVAILABLE = -32005
GATEWAY_UNAVAILABLE = -32006
FORBIDDEN_ORIGIN = -32007
MAX_MESSAGE_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE  # the SDK's limit, said by us
# Notifications held for a client that reads slower than the upstream sends; later ones are dropped.
RELAY_BACKLOG = 256
# The `_meta` key of a tools/list answered from the tools the last check stored (the upstream is
# down): {"reason": why the live list failed, "checked": when the stored list was taken}.
STORED_CATALOG = "gateway-portal/stored-catalog"


@dataclass(frozen=True, slots=True)
class Stored:
    """The allowed tools as the server's last check listed them (McpTool rows), and when."""

    tools: tuple[tuple[str, str, dict[str, Any]], ...]  # name, description, input schema
    checked: str  # ISO time of the last check, "" if none

    def listing(self, reason: str) -> types.ListToolsResult:
        tools = [types.Tool(name=n, description=d or None, input_schema=schema) for n, d, schema in self.tools]
        return types.ListToolsResult(tools=tools, _meta={STORED_CATALOG: {"reason": reason, "checked": self.checked}})


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling which server, resolved before the SDK parses the request."""

    key: KeyInfo
    upstream: Upstream
    allowed: frozenset[str]
    team_id: int | None
    stored: Stored
    gone: asyncio.Event  # set when the developer's client disconnects (`watched`)


def _load(key_id: int, slug: str) -> tuple[Upstream, Stored] | None:
    """The server at `slug` and the tools the key may call there, or None (unknown, disabled, or
    nothing allowed: one answer for all three). Runs on the gateway's database thread."""
    server = McpServer.objects.enabled().filter(slug=slug).first()
    key = Key.objects.select_related("owner").filter(pk=key_id).first()
    if server is None or key is None:
        return None
    rows = allowed_tools(key, server).order_by("name").values_list("name", "description", "input_schema")
    checked = server.last_checked.isoformat() if server.last_checked else ""
    return (Upstream.of(server), Stored(tuple(rows), checked)) if rows else None


_redactor: Any = None


def _record(caller: Caller, tool: str, status: str, started: float, error: Message | str, arguments: Any) -> None:
    """One McpCall row; the arguments only for keys whose request logging is on, redacted. The
    error is stored in English with its msgid, so the calls page reads it in the reader's language."""
    global _redactor
    kept = None
    if arguments is not None and caller.key.payload_days:
        if _redactor is None:
            from keys.payloads.redact import Redactor

            _redactor = Redactor()
        kept = _redactor.json(arguments)
    record_call(
        server_id=caller.upstream.id,
        server_slug=caller.upstream.slug,
        tool=tool[:200],
        key_id=caller.key.id,
        user_id=caller.key.owner_id,
        team_id=caller.team_id,
        status=status,
        duration_ms=(time.perf_counter() - started) * 1000,
        **as_message(error).columns("error", 300),
        arguments=kept,
    )


_pending: set[asyncio.Task[None]] = set()


def record(
    caller: Caller, tool: str, status: str, started: float, error: Message | str = "", arguments: Any = None
) -> None:
    """Write the call's record off the request path (the database thread; a failure is logged)."""

    async def write() -> None:
        try:
            await run_db(_record, caller, tool, status, started, error, arguments)
        except Exception as exc:
            logger.warning("MCP call record for %s/%s not written: %r", caller.upstream.slug, tool, exc)

    task = asyncio.get_running_loop().create_task(write())
    _pending.add(task)
    task.add_done_callback(_pending.discard)


_M = TypeVar("_M", bound=BaseModel)


def scrubbed(answer: _M, secrets: list[str]) -> _M:
    """`answer` without any of the team's credentials in it: an upstream that echoes its request's
    headers (a debug tool, an error message) must not hand them to the developer."""
    raw = answer.model_dump_json(by_alias=True, exclude_unset=True)
    found = [s for s in (orjson.dumps(v).decode()[1:-1] for v in secrets) if s in raw]
    if not found:
        return answer
    for secret in found:
        raw = raw.replace(secret, REDACTED)
    return type(answer).model_validate_json(raw)


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    caller: Caller = ctx.request.scope[SCOPE_KEY]  # type: ignore[union-attr]
    return caller


async def _list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
    caller = _caller(ctx)
    try:
        tools = await list_tools(caller.upstream)
    except UpstreamFailure as exc:
        # The client can still start, and show the tools it will have back once the server is;
        # a call meanwhile gets the upstream's error.
        logger.warning("MCP server %s is down; tools/list answered from the stored catalog", caller.upstream.slug)
        return scrubbed(caller.stored.listing(str(exc)), caller.upstream.secrets())
    listed = types.ListToolsResult(tools=[t for t in tools if t.name in caller.allowed])
    return scrubbed(listed, caller.upstream.secrets())


def calls_per_minute(key: KeyInfo) -> int | None:
    """The key's MCP limit: GATEWAY_MCP_CALLS_PER_MINUTE, lowered by the key's own requests/min."""
    limits = [n for n in (settings.GATEWAY_MCP_CALLS_PER_MINUTE or None, key.limits.get("requests_per_minute")) if n]
    return min(limits) if limits else None


NOT_ALLOWED = Message(gettext_noop("not allowed"))
CLIENT_LEFT = Message(gettext_noop("the client disconnected before the tool answered"))
RATE_LIMIT_REACHED = gettext_noop(
    "Rate limit reached: this key may make %(limit)s MCP tool calls per minute; retry in %(retry)s s."
)


class Refused(Exception):
    """The key's MCP window is full: `error` for the client, `text` for the call's record."""

    def __init__(self, text: Message, error: MCPError) -> None:
        super().__init__(text.english)
        self.text, self.error = text, error


async def _admit(caller: Caller, request_id: str) -> None:
    """Take one slot of the key's MCP window, or raise the JSON-RPC refusal."""
    limit = calls_per_minute(caller.key)
    if limit is None or process.limiter is None:
        return
    scope = Scope(f"{namespace()}:mcp:k:{caller.key.id}", "key", {"requests_per_minute": limit})
    try:
        result = await process.limiter.admit(request_id, [scope], 0)
    except GatewayError as exc:
        raise MCPError(GATEWAY_UNAVAILABLE, exc.message) from None
    if isinstance(result, Refusal):
        retry = max(1, round(result.retry_after))
        refused = Message(RATE_LIMIT_REACHED, limit=limit, retry=retry)
        raise Refused(refused, MCPError(RATE_LIMITED, refused.english, {"retry_after": retry, "limit": limit}))
    assert not isinstance(result, Stale)  # no generations were asked for


async def _call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    caller = _caller(ctx)
    started = time.perf_counter()
    name = params.name
    if name not in caller.allowed:
        record(caller, name, CallStatus.FORBIDDEN, started, NOT_ALLOWED)
        raise MCPError(
            TOOL_NOT_ALLOWED,
            f"The tool {name!r} is not allowed for this key on the MCP server {caller.upstream.slug!r}. "
            "Ask an admin to allow it in the portal.",
        )
    try:
        await _admit(caller, f"mcp-{ctx.request_id}-{time.monotonic_ns()}")
    except Refused as refused:
        record(caller, name, CallStatus.RATE_LIMITED, started, refused.text)
        raise refused.error from None
    except MCPError as unavailable:  # the limiter could not be asked (Redis): refused, not admitted
        record(caller, name, CallStatus.RATE_LIMITED, started, unavailable.message)
        raise
    relay = Relay(ctx, caller.upstream.secrets())
    relaying = asyncio.get_running_loop().create_task(relay.run())
    try:
        result = await call_tool(
            caller.upstream, name, params.arguments, caller.gone, on_progress=relay.on_progress, on_log=relay.on_log
        )
    except ClientGone:
        record(caller, name, CallStatus.CANCELLED, started, CLIENT_LEFT, params.arguments)
        raise MCPError(UPSTREAM_UNAVAILABLE, CLIENT_LEFT.english) from None  # (nobody reads it)
    except UpstreamFailure as exc:
        record(caller, name, CallStatus.UPSTREAM_ERROR, started, exc.text, params.arguments)
        raise MCPError(UPSTREAM_UNAVAILABLE, str(exc)) from None
    finally:
        await relay.finish(relaying)
    failed = bool(getattr(result, "is_error", False))
    record(caller, name, CallStatus.TOOL_ERROR if failed else CallStatus.OK, started, "", params.arguments)
    return scrubbed(result, caller.upstream.secrets())


class Relay:
    """The upstream's notifications about one call (progress, log messages), passed on to the
    developer's client on the call's stream, in the order they came and before the result,
    scrubbed like the answer. The SDK runs each callback in a task of its own and a callback only
    queues (no await first), so the result cannot overtake the notifications before it; a client
    reading slower than the upstream sends loses those past RELAY_BACKLOG, never the result."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], secrets: list[str]) -> None:
        self.ctx, self.secrets = ctx, secrets
        self.queue: asyncio.Queue[types.ServerNotification | None] = asyncio.Queue(RELAY_BACKLOG)
        self.token = progress_token_from_params(ctx.params)
        self.levels = allowed_log_levels(ctx.protocol_version, ctx.meta)

    @property
    def on_progress(self) -> ProgressFnT | None:
        """Progress is asked of the upstream only when the client asked for it."""
        return self._progress if self.token is not None else None

    @property
    def on_log(self) -> LoggingFnT:
        return self._log

    async def _progress(self, progress: float, total: float | None, message: str | None) -> None:
        assert self.token is not None
        params = types.ProgressNotificationParams(
            progress_token=self.token, progress=progress, total=total, message=message
        )
        self._put(types.ProgressNotification(params=params))

    async def _log(self, params: types.LoggingMessageNotificationParams) -> None:
        if params.level in self.levels:  # a client on the 2026 protocol asks for its levels per request
            self._put(types.LoggingMessageNotification(params=params))

    def _put(self, notification: types.ServerNotification) -> None:
        try:
            self.queue.put_nowait(notification)
        except asyncio.QueueFull:
            logger.debug("MCP notification %s dropped: the client reads slower than the server sends", notification)

    async def run(self) -> None:
        while (notification := await self.queue.get()) is not None:
            await self.ctx.session.send_notification(
                scrubbed(notification, self.secrets), related_request_id=self.ctx.request_id
            )

    async def finish(self, running: asyncio.Task[None]) -> None:
        """Wait until what was queued is sent (a client that left: only until it cannot be)."""
        while True:
            try:
                self.queue.put_nowait(None)
                break
            except asyncio.QueueFull:
                self.queue.get_nowait()  # the oldest one goes, not the end of the stream
        try:
            await running
        except asyncio.CancelledError:
            running.cancel()
            raise
        except Exception as exc:  # the client's stream is gone; the call's outcome is still recorded
            logger.debug("MCP notifications for %s not relayed: %r", self.ctx.request_id, exc)


class Front:
    """The SDK's server and its two session managers for every /mcp/<slug> (one answers with one
    JSON body, one with an event stream: `serve` picks), started with the first request (their
    task group lives in a task of its own) and stopped with the process."""

    def __init__(self) -> None:
        self.managers: Managers | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()

    async def start(self) -> Managers:
        async with self._lock:
            if self.managers is None:
                server: Server[Any] = Server("portal-gateway", on_list_tools=_list_tools, on_call_tool=_call_tool)
                managers = Managers(
                    json=StreamableHTTPSessionManager(server, json_response=True, stateless=True),
                    stream=StreamableHTTPSessionManager(server, json_response=False, stateless=True),
                )
                ready = asyncio.Event()
                self._stop = asyncio.Event()

                async def run() -> None:
                    async with managers.json.run(), managers.stream.run():
                        ready.set()
                        await self._stop.wait()

                self._runner = asyncio.get_running_loop().create_task(run())
                await ready.wait()
                self.managers = managers
            return self.managers

    async def stop(self) -> None:
        if self._runner is not None:
            self._stop.set()
            await asyncio.gather(self._runner, return_exceptions=True)
        self.managers = self._runner = None
        if _pending:
            await asyncio.gather(*_pending, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Managers:
    json: StreamableHTTPSessionManager
    stream: StreamableHTTPSessionManager  # for a tools/call, whose notifications ride its answer


front = Front()


class Rejected(Exception):
    """A request refused before the SDK saw it: its HTTP status and JSON-RPC error."""

    def __init__(self, status: int, code: int, message: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or []


async def jsonrpc_error(req: Request, rejected: Rejected) -> None:
    """Our refusal before the SDK saw the request. A 401 carries no WWW-Authenticate challenge: MCP
    clients would take it as an invitation to an OAuth login the gateway does not offer (the key is
    the credential)."""
    error = {"code": rejected.code, "message": rejected.message}
    body = orjson.dumps({"jsonrpc": "2.0", "id": None, "error": error})
    await send_bytes(req.send, rejected.status, body, rejected.headers)


def origin_of(url: str) -> str:
    """`url` as a browser writes its Origin: scheme://host[:port], lower case, no default port
    ("" for what is not one, such as the "null" of a sandboxed page)."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        return ""
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    if not scheme or not host:
        return ""
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port and str(port) != DEFAULT_PORTS.get(scheme) else "")


def origin_allowed(origin: str, host: str) -> bool:
    """Whether a page at `origin` may call: PORTAL_PUBLIC_URL's, one in GATEWAY_MCP_ALLOWED_ORIGINS,
    or the address the request was sent to when its host is one the portal answers to by name
    (ALLOWED_HOSTS). A DNS-rebinding page is at its own host name, which is none of these; the
    browser sends that name as Host too, so "*" in ALLOWED_HOSTS (answer to any name) names no
    host here."""
    seen = origin_of(origin)
    if not seen:
        return False
    if seen in {origin_of(url) for url in (settings.PORTAL_PUBLIC_URL, *settings.GATEWAY_MCP_ALLOWED_ORIGINS)}:
        return True
    scheme = seen.split(":", 1)[0]
    domain, _port = split_domain_port(host)
    named = [pattern for pattern in settings.ALLOWED_HOSTS if pattern != "*"]
    return origin_of(f"{scheme}://{host}") == seen and validate_host(domain, named)


def check_origin(req: Request) -> None:
    """A 403 for a page the portal does not trust: the spec's MUST against DNS rebinding."""
    origin = req.headers.get("origin")
    if origin is not None and not origin_allowed(origin, req.headers.get("host", "")):
        raise Rejected(
            403,
            FORBIDDEN_ORIGIN,
            f"Requests from the web page at {origin[:200]!r} are refused: a browser may call this MCP endpoint "
            "only from the portal's own pages. To allow that page, the portal's operator adds its origin to "
            "the GATEWAY_MCP_ALLOWED_ORIGINS setting.",
        )


def is_json(content_type: str) -> bool:
    """The SDK's rule: application/json, parameters (charset) allowed."""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def envelope_problem(message: Any) -> str:
    """What keeps `message` from being one JSON-RPC 2.0 message, in a sentence (pydantic's report
    on the SDK's four models at once runs to a page)."""
    if isinstance(message, list):
        return "The request body is a JSON array: send one JSON-RPC message per request (batches are not supported)."
    if not isinstance(message, dict):
        return "The request body must be a JSON-RPC 2.0 message, a JSON object."
    if message.get("jsonrpc") != "2.0":
        return 'The request body is not a JSON-RPC 2.0 message: "jsonrpc" must be "2.0".'
    if "method" not in message and "id" in message:
        return 'The request body has no "method" (nor, as a response, "result" or "error").'
    if not isinstance(message.get("method"), str):
        return 'The request body\'s "method" must be a string naming the method, such as "tools/list".'
    if message.get("params") is not None and not isinstance(message["params"], dict):
        return 'The request\'s "params" must be a JSON object.'
    return "The request body is not a JSON-RPC 2.0 request, notification or response."


async def read_message(req: Request) -> tuple[bytes, Any]:
    """The POST's body, and the message in it, once it is JSON the SDK takes as a JSON-RPC message;
    the SDK's own refusals of it are plain text (type, size) or pydantic's report (envelope)."""
    content_type = req.headers.get("content-type", "")
    if not is_json(content_type):
        raise Rejected(
            400,
            types.INVALID_REQUEST,
            f"The request's Content-Type is {content_type[:100]!r}: send the JSON-RPC message as application/json.",
        )
    try:
        body = await req.body(MAX_MESSAGE_BYTES)
    except GatewayError as exc:
        if exc.status != 413:
            raise
        mib = MAX_MESSAGE_BYTES // (1 << 20)
        raise Rejected(413, types.INVALID_REQUEST, f"The request body is larger than {mib} MiB.") from None
    try:
        message = pydantic_core.from_json(body)
    except ValueError as exc:
        raise Rejected(400, types.PARSE_ERROR, f"The request body is not valid JSON ({exc}).") from None
    try:
        types.jsonrpc_message_adapter.validate_python(message, by_name=False)
    except ValidationError:
        raise Rejected(400, types.INVALID_REQUEST, envelope_problem(message)) from None
    return body, message


def streams(req: Request, message: Any) -> bool:
    """Whether the answer is an event stream: a tools/call, whose upstream may send progress and
    log messages while the tool runs, from a client that takes one (the spec's MUST is both JSON
    and event streams; a client that asks for JSON alone still gets JSON)."""
    accepted = {t.split(";", 1)[0].strip().lower() for t in req.headers.get("accept", "").split(",")}
    return (
        isinstance(message, dict)
        and message.get("method") == "tools/call"
        and bool(accepted & {"text/event-stream", "text/*", "*/*"})
    )


async def serve(req: Request) -> None:
    """/mcp/<slug> (POST; DELETE as the SDK answers it in stateless mode; GET is a 405)."""
    try:
        caller, body, streamed = await admit(req)
    except Rejected as rejected:
        await jsonrpc_error(req, rejected)
        return
    managers = await front.start()
    manager = managers.stream if streamed else managers.json
    receive, watcher = watched(req, body, caller.gone)
    try:
        await manager.handle_request({**req.scope, SCOPE_KEY: caller}, receive, req.send)
    finally:
        watcher.cancel()


async def admit(req: Request) -> tuple[Caller, bytes, bool]:
    """Who calls which server, the body for the SDK and whether it is answered with an event
    stream; or the refusal."""
    check_origin(req)
    if req.method == "GET":
        # The spec's answer for "no server-initiated stream here": stateless, the gateway has
        # nothing to send on one, and the SDK would hold every client's stream open, idle, forever
        # (the TypeScript SDK, Claude Code's and Cline's, opens one after initialize and takes a
        # 405 as no).
        raise Rejected(
            405,
            types.INVALID_REQUEST,
            "This MCP endpoint has no server-to-client stream: send requests with POST.",
            [(b"allow", b"POST, DELETE")],
        )
    slug = req.subpath[len(PATH_PREFIX) :].strip("/")
    try:
        key = await authenticate(req)
        found = await run_db(_load, key.id, slug) if slug else None
    except GatewayError as exc:
        code = NOT_AUTHENTICATED if exc.status in (401, 403) else GATEWAY_UNAVAILABLE
        raise Rejected(exc.status, code, exc.message) from None
    if not slug:
        raise Rejected(
            404,
            UNKNOWN_SERVER,
            "Add the MCP server's name to the path: /mcp/<server>. The servers you may use, with their URLs, are "
            "listed on the portal's Connect page.",
        )
    if found is None:
        raise Rejected(
            404,
            UNKNOWN_SERVER,
            f"No MCP server {slug!r} that this key may use. The servers you may use are listed on the portal's "
            "Connect page.",
        )
    upstream, stored = found
    if req.method == "POST":
        body, message = await read_message(req)
    else:
        body, message = await req.body(MAX_MESSAGE_BYTES), None
    allowed = frozenset(name for name, _, _ in stored.tools)
    return Caller(key, upstream, allowed, key.team_id, stored, asyncio.Event()), body, streams(req, message)


def watched(req: Request, body: bytes, gone: asyncio.Event) -> tuple[Receive, asyncio.Task[None]]:
    """The request's `receive` for the SDK (the body, read already), and a task that sets `gone`
    when the client disconnects. The SDK reads the body and then, answering with JSON, never
    listens to the connection again: a client that gave up would leave the tool running upstream
    until the server's timeout. So the connection is watched here. The SDK itself never hears of
    the disconnect (its later reads wait for ever): answering with an event stream, it would end
    the request, and cancel the call's handler before the call is cancelled upstream and recorded;
    the handler hears through `gone`, and its answer ends the request."""
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:
            await asyncio.Event().wait()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def watch() -> None:
        while (await req.receive())["type"] != "http.disconnect":
            pass
        gone.set()

    return receive, asyncio.get_running_loop().create_task(watch())
