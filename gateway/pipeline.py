"""The gateway's request pipeline, shared by every API surface.

    authenticate → resolve model → admission (limits) → forward upstream with failover
    → relay/transform the answer → account usage and settle

How to plug in a new surface (e.g. Anthropic Messages, OpenAI Responses):

1. Write an async handler `async def handler(req: gateway.http.Request) -> None` and register it
   in `gateway/asgi.py`'s route table: `routes.register("POST", "/messages", handler)` (reachable
   as /v1/messages, /v1/v1/messages and /messages).
2. In the handler, parse the body, then open a call; it authenticates, resolves the model (404
   with "did you mean", 403 not allowed), checks the IP allowlist and reserves against the limits
   (429 with Retry-After). Raise `GatewayError` for anything the client got wrong:

       call = await open_call(req, surface=ApiSurface.MESSAGES, model=body["model"],
                              stream=stream, prompt_tokens=estimate_tokens(texts),
                              max_tokens=body.get("max_tokens"))

3. Translate the request to Chat Completions and forward it (failover happens inside, only
   before anything reached the client):

       up = await call.forward("/chat/completions", chat_payload, req.headers, stream=stream)

   For a stream, `call.relay_sse(up, on_event=...)` reads upstream SSE events one by one and lets
   you transform each one (return the bytes to send, or None to drop it); it handles client
   disconnects, upstream death and usage. For JSON, use `up.body` and `call.send_json(...)`.
4. Every path ends in `call.finish(...)` (the relay helpers call it for you): it settles the
   reservation with the real usage and queues the UsageRecord. Unhandled errors are finished by
   `handle()` in `gateway/asgi.py`, so a call is never left holding a reservation.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from keys.choices import ApiSurface, UsageStatus
from keys.models import KEY_PREFIX
from keys.services import clean_presented_key
from keys.usage import UsageEvent, UsageWriter
from portal.secrets import keyed_hash

from .cache import Catalog, KeyInfo, ModelInfo, close_db, db_executor, namespace, normalize_model_name, snapshot
from .http import SSE_HEADERS, GatewayError, Request, send_bytes, sse_error_event
from .limits import Admission, DatabaseLimiter, RedisLimiter, Refusal, Scope, make_limiter
from .upstream import Prepare, UpstreamClient, UpstreamResponse

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ process state


class Gateway:
    """Per-process state: the upstream client, the limiter and the usage writer."""

    def __init__(self) -> None:
        self.upstream = UpstreamClient()
        self.limiter: RedisLimiter | DatabaseLimiter | None = None
        self.usage = UsageWriter(executor=db_executor())
        self.started = False
        self._tasks: set[asyncio.Task] = set()
        self._refresher: asyncio.Task | None = None

    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        snapshot.reset()
        await self.upstream.start()
        self.limiter = make_limiter()
        self.usage.start()
        self._refresher = asyncio.get_running_loop().create_task(snapshot.refresh_forever())

    async def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        if self._refresher is not None:
            self._refresher.cancel()
            self._refresher = None
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self.limiter is not None:
            await self.limiter.close()
        await self.usage.stop()
        await self.upstream.close()
        await close_db()

    def spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


gateway = Gateway()


# ----------------------------------------------------------------------------------- helpers

_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)


def new_request_id() -> str:
    """Unique across processes (random per-process prefix + counter), without a syscall."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):x}"


def estimate_tokens(value: Any) -> int:
    """A cheap prompt-size estimate (≈4 characters a token) for reservations and for usage when an
    upstream reports none. Strings, lists and OpenAI message/content-part shapes are understood."""
    if isinstance(value, str):
        return math.ceil(len(value) / 4) if value else 0
    if isinstance(value, list):
        return sum(estimate_tokens(v) for v in value)
    if isinstance(value, dict):
        total = 0
        for k in ("content", "text", "input", "prompt", "arguments"):
            if k in value:
                total += estimate_tokens(value[k])
        if "tool_calls" in value:
            total += estimate_tokens(value["tool_calls"])
        if "function" in value:
            total += estimate_tokens(value["function"])
        return total
    return 0


def presented_key(headers: dict[str, str]) -> str:
    auth = headers.get("authorization")
    if auth:
        return clean_presented_key(auth)
    return clean_presented_key(headers.get("x-api-key") or headers.get("api-key"))


async def authenticate(req: Request) -> KeyInfo:
    """The caller's key, or a 401 that never echoes what was presented."""
    value = presented_key(req.headers)
    if not value:
        raise GatewayError(
            401,
            "Missing API key. Send it as `Authorization: Bearer <key>` or `x-api-key: <key>`.",
            code="missing_api_key",
        )
    key = None
    if value.startswith(KEY_PREFIX) and len(value) <= 200:
        key = await snapshot.get_key(keyed_hash(value))
    if key is None:
        raise GatewayError(401, "Invalid API key. Check the key you copied from the portal.", code="invalid_api_key")
    if key.revoked:
        raise GatewayError(401, "This API key has been revoked.", code="key_revoked")
    if key.expires_at is not None and key.expires_at <= time.time():
        raise GatewayError(401, "This API key has expired.", code="key_expired")
    if not key.owner_active:
        raise GatewayError(401, "The account that owns this API key is disabled.", code="account_disabled")
    if key.networks:
        ip = req.client_ip
        if not ip or not _ip_allowed(ip, key.networks):
            raise GatewayError(
                403, f"This API key may not be used from {ip or 'an unknown address'}.", code="ip_not_allowed"
            )
    return key


def _ip_allowed(ip: str, networks: tuple) -> bool:
    import ipaddress

    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr.version == n.version and addr in n for n in networks)


def usable_models(key: KeyInfo, catalog: Catalog) -> list[ModelInfo]:
    """Models this key may use now: enabled, allowed for key and owner, with at least one route."""
    return [m for m in catalog.models.values() if m.groups and key.may_use(m)]


def resolve_model(key: KeyInfo, catalog: Catalog, name: Any) -> ModelInfo:
    """The public model `name` if this key may use it, else 404 (unknown, with "did you mean")
    or 403 (exists, not allowed); both list what the key may use."""
    if not isinstance(name, str) or not name.strip():
        raise GatewayError(400, "The request has no `model`.", code="model_required", param="model")
    model = catalog.models.get(name)
    if model is not None and model.enabled and key.may_use(model):
        return model
    allowed = sorted(m.name for m in usable_models(key, catalog))
    listing = ", ".join(allowed) if allowed else "none"
    if model is not None and model.enabled:
        raise GatewayError(
            403,
            f"This key may not use the model '{name}'. Models it may use: {listing}.",
            code="model_not_allowed",
            param="model",
        )
    hint = ""
    for candidate in catalog.by_norm.get(normalize_model_name(name), ()):
        if candidate in allowed:
            hint = f" Did you mean '{candidate}'?"
            break
    raise GatewayError(
        404,
        f"The model '{name}' does not exist or is not available.{hint} Models this key may use: {listing}.",
        code="model_not_found",
        param="model",
    )


def _refusal_error(refusal: Refusal) -> GatewayError:
    retry = max(1, math.ceil(refusal.retry_after))
    what = refusal.limit.replace("_", " ")
    whose = "this key" if refusal.scope == "key" else "your account"
    return GatewayError(
        429,
        f"Rate limit reached: {what} for {whose} is {refusal.value}. Retry in {retry} s.",
        code="rate_limit_exceeded" if "minute" in refusal.limit or "parallel" in refusal.limit else "quota_exceeded",
        headers=[(b"retry-after", str(retry).encode())],
    )


# ---------------------------------------------------------------------------------- the call


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    estimated: bool = False

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def usage_from(data: Any) -> Usage | None:
    """An OpenAI `usage` object as Usage, or None when absent or malformed."""
    if not isinstance(data, dict):
        return None
    try:
        prompt = int(data.get("prompt_tokens") or data.get("input_tokens") or 0)
        completion = int(data.get("completion_tokens") or data.get("output_tokens") or 0)
    except (TypeError, ValueError):
        return None
    if prompt == 0 and completion == 0 and not data.get("total_tokens"):
        return None
    return Usage(prompt, completion)


class Call:
    """One request's journey through the pipeline. Created by `open_call`."""

    def __init__(
        self,
        req: Request,
        surface: str,
        key: KeyInfo,
        model: ModelInfo,
        admission: Admission,
        *,
        stream: bool,
        prompt_estimate: int,
        request_id: str,
        started: float,
    ) -> None:
        self.req = req
        self.surface = surface
        self.key = key
        self.model = model
        self.admission = admission
        self.stream = stream
        self.prompt_estimate = prompt_estimate
        self.request_id = request_id
        self.started = started
        self.channel_id: int | None = None
        self.ttft_ms: float | None = None
        self.finished = False

    @property
    def rate_headers(self) -> list[tuple[bytes, bytes]]:
        return self.admission.headers

    async def forward(
        self,
        path: str,
        payload: dict[str, Any],
        client_headers: dict[str, str],
        *,
        stream: bool | None = None,
        anthropic_native: bool = False,
        prepare: Prepare | None = None,
        routes: list | None = None,
    ) -> UpstreamResponse:
        """Send `payload` to the model's routes in order until one answers (see `upstream`).

        `prepare(route)` picks path, payload and headers per route (pass-through vs translation).
        `routes` narrows the candidates (e.g. `[r for r in call.model.ordered_routes() if
        r.speaks_messages]` to pass an Anthropic request through natively, with
        `anthropic_native=True` so the channel key goes out as `x-api-key`)."""
        routes = self.model.ordered_routes() if routes is None else routes
        if not routes:
            raise GatewayError(503, f"No channel serves the model '{self.model.name}' this way.", code="no_channel")
        try:
            up = await gateway.upstream.open(
                routes,
                path,
                payload,
                client_headers,
                stream=self.stream if stream is None else stream,
                anthropic_native=anthropic_native,
                prepare=prepare,
            )
        except GatewayError as exc:
            if exc.attempts:
                self.channel_id = exc.attempts[-1].channel_id
            raise
        self.channel_id = up.route.channel_id
        return up

    def finish(
        self,
        usage: Usage | None,
        *,
        status: str = UsageStatus.OK,
        http_status: int = 200,
        error: str = "",
    ) -> None:
        """Settle the reservation with what was really used and queue the usage record. Idempotent."""
        if self.finished:
            return
        self.finished = True
        usage = usage or Usage(0, 0)
        if gateway.limiter is not None:
            gateway.limiter.settle(self.admission, usage.total)
        gateway.usage.record(
            UsageEvent(
                created=dt.datetime.now(dt.UTC),
                request_id=self.request_id,
                key_id=self.key.id,
                user_id=self.key.owner_id,
                model=self.model.name,
                channel_id=self.channel_id,
                surface=self.surface,
                stream=self.stream,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                estimated=usage.estimated,
                status=status,
                http_status=http_status,
                error=error,
                latency_ms=(time.perf_counter() - self.started) * 1000,
                ttft_ms=self.ttft_ms,
            )
        )

    def fail(self, exc: GatewayError) -> None:
        """Finish a call that ended in an error before any upstream tokens."""
        status = (
            UsageStatus.UPSTREAM_ERROR
            if exc.status >= 500 or (exc.code or "").startswith("upstream")
            else (UsageStatus.CLIENT_ERROR)
        )
        self.finish(None, status=status, http_status=exc.status, error=exc.message)

    # --- relaying ---------------------------------------------------------------------------

    async def send_json(self, status: int, body: bytes, usage: Usage | None, content_type: bytes | None = None) -> None:
        """Send a complete JSON answer, then finish the call."""
        self.ttft_ms = (time.perf_counter() - self.started) * 1000
        try:
            await send_bytes(self.req.send, status, body, self.rate_headers, content_type)
        finally:
            ok = status < 400
            self.finish(
                usage,
                status=UsageStatus.OK if ok else UsageStatus.CLIENT_ERROR,
                http_status=status,
                error="" if ok else body[:300].decode(errors="replace"),
            )

    async def relay_sse(
        self,
        up: UpstreamResponse,
        *,
        on_event: Callable[[bytes], bytes | None] | None = None,
        client_wants_usage: bool = False,
        prefix: bytes = b"",
        epilogue: Callable[[Usage | None], bytes] | None = None,
        on_error: Callable[[GatewayError], bytes] | None = None,
        usage_of_event: Callable[[bytes, Usage | None], Usage | None] | None = None,
    ) -> None:
        """Relay an upstream SSE stream event by event, without buffering beyond one event.

        Usage comes from the upstream's usage chunk (which we always ask for); the chunk is dropped
        for clients that did not ask for it. Without one, completion tokens are counted as the
        content-bearing events and the record is marked estimated. A client disconnect closes the
        upstream; an upstream failure becomes an SSE error event. `on_event` (for translating
        surfaces) gets each raw event (`data: …`) and returns the bytes to send or None;
        `on_error` renders an upstream failure in the client's API (default: an OpenAI `data:`
        error event); `usage_of_event(event, usage_so_far)` reads usage from a non-Chat upstream
        stream (Anthropic splits it between `message_start` and `message_delta`).
        """
        send = self.req.send
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + self.rate_headers})
        current = asyncio.current_task()
        disconnected = False

        async def watch() -> None:
            nonlocal disconnected
            while True:
                message = await self.req.receive()
                if message["type"] == "http.disconnect":
                    disconnected = True
                    if current is not None:
                        current.cancel()
                    return

        watcher = asyncio.get_running_loop().create_task(watch())
        usage: Usage | None = None
        content_events = 0
        status, http_status, error = UsageStatus.OK, 200, ""
        buffer = b""
        chunk = up.first_chunk
        content = up.response.content if up.response is not None else None
        if prefix:
            await send({"type": "http.response.body", "body": prefix, "more_body": True})
        try:
            while chunk:
                if b"\r" in chunk:
                    chunk = chunk.replace(b"\r\n", b"\n")
                buffer += chunk
                out: list[bytes] = []
                while True:
                    end = buffer.find(b"\n\n")
                    if end < 0:
                        break
                    event = buffer[: end + 2]
                    buffer = buffer[end + 2 :]
                    if usage_of_event is not None:
                        usage = usage_of_event(event, usage)
                    elif b'"usage":{' in event or b'"usage": {' in event:
                        found = _event_usage(event)
                        if found is not None:
                            usage = found
                            if not client_wants_usage and (b'"choices":[]' in event or b'"choices": []' in event):
                                continue
                    elif _has_content(event):
                        content_events += 1
                    if on_event is not None:
                        event = on_event(event)
                        if event is None:
                            continue
                    out.append(event)
                if out:
                    if self.ttft_ms is None:
                        self.ttft_ms = (time.perf_counter() - self.started) * 1000
                    await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
                chunk = await content.readany() if content is not None else b""
            if buffer.strip():
                await send({"type": "http.response.body", "body": buffer, "more_body": True})
            up.release()
        except asyncio.CancelledError:
            up.close()
            if not disconnected:
                raise
            if current is not None:
                current.uncancel()
            status, http_status, error = UsageStatus.CLIENT_DISCONNECTED, 499, "client disconnected"
        except Exception as exc:  # the upstream died or timed out mid-stream
            up.close()
            logger.info("upstream %s failed mid-stream: %r", up.route.channel_name, exc)
            status, http_status = UsageStatus.UPSTREAM_ERROR, 502
            error = f"upstream failed mid-stream ({exc.__class__.__name__})"
            err = GatewayError(
                502, "The upstream failed while streaming; the answer is incomplete.", code="upstream_stream_error"
            )
            body = on_error(err) if on_error is not None else sse_error_event(err)
            await send({"type": "http.response.body", "body": body, "more_body": True})
        finally:
            watcher.cancel()
            if usage is None:
                usage = Usage(self.prompt_estimate, content_events, estimated=True)
            if not disconnected:
                tail = epilogue(usage) if epilogue is not None else b""
                await send({"type": "http.response.body", "body": tail, "more_body": False})
            self.finish(usage, status=status, http_status=http_status, error=error)


def _event_usage(event: bytes) -> Usage | None:
    start = event.find(b"{")
    if start < 0:
        return None
    try:
        data = orjson.loads(event[start:].strip())
    except orjson.JSONDecodeError:
        return None
    return usage_from(data.get("usage")) if isinstance(data, dict) else None


def _has_content(event: bytes) -> bool:
    """Does this SSE event carry generated text or tool arguments? (one event ≈ one token)"""
    if b'"arguments"' in event:
        return True
    if b'"content"' in event or b'"text"' in event:
        return not (
            b'"content":""' in event or b'"content": ""' in event or b'"text":""' in event or b'"text": ""' in event
        )
    return False


async def open_call(
    req: Request,
    *,
    surface: str,
    model: Any,
    stream: bool,
    prompt_tokens: int,
    max_tokens: int | None,
) -> Call:
    """Authenticate, resolve the model and reserve against the limits. Raises GatewayError."""
    started = time.perf_counter()
    if not gateway.started:
        await gateway.start()
    request_id = new_request_id()
    if max_tokens is None:
        max_tokens = int(settings.GATEWAY_DEFAULT_MAX_TOKENS)
    reserve = max(int(prompt_tokens), 0) + max(int(max_tokens), 0)
    limiter = gateway.limiter
    ns = namespace()
    for attempt in (0, 1):
        key = await authenticate(req)
        catalog = await snapshot.get_catalog()
        info = resolve_model(key, catalog, model)
        if not info.groups:
            raise GatewayError(503, f"No channel serves the model '{info.name}' right now.", code="no_channel")
        scopes = [
            Scope(f"{ns}:k:{key.id}", "key", key.limits),
            Scope(f"{ns}:u:{key.owner_id}", "user", key.owner_limits),
        ]
        result = await limiter.admit(request_id, scopes, reserve)
        if result.generations is not None and snapshot.observe_generation(*result.generations) and attempt == 0:
            # Keys or routes changed since we cached them: undo and decide again on fresh data.
            if isinstance(result, Admission):
                limiter.undo(result)
            request_id = new_request_id()
            continue
        break
    if isinstance(result, Refusal):
        err = _refusal_error(result)
        err.headers += _limit_headers(scopes)
        _record_refusal(request_id, key, info, surface, stream, err, started)
        raise err
    call = Call(
        req,
        surface,
        key,
        info,
        result,
        stream=stream,
        prompt_estimate=int(prompt_tokens),
        request_id=request_id,
        started=started,
    )
    req.call = call
    return call


def _limit_headers(scopes: list[Scope]) -> list[tuple[bytes, bytes]]:
    from .limits import rate_headers

    return rate_headers(scopes, None)


def _record_refusal(request_id, key, model, surface, stream, err: GatewayError, started: float) -> None:
    gateway.usage.record(
        UsageEvent(
            created=dt.datetime.now(dt.UTC),
            request_id=request_id,
            key_id=key.id,
            user_id=key.owner_id,
            model=model.name,
            channel_id=None,
            surface=surface,
            stream=stream,
            prompt_tokens=0,
            completion_tokens=0,
            estimated=False,
            status=UsageStatus.RATE_LIMITED,
            http_status=429,
            error=err.message[:300],
            latency_ms=(time.perf_counter() - started) * 1000,
        )
    )


__all__ = [
    "ApiSurface",
    "Call",
    "GatewayError",
    "Usage",
    "authenticate",
    "estimate_tokens",
    "gateway",
    "open_call",
    "resolve_model",
    "usable_models",
    "usage_from",
]
