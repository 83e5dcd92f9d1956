"""The upstream side: one pooled aiohttp client per process, header hygiene, failover.

aiohttp rather than httpx: measured on this machine against the same fake upstream (see
`bench/client_compare.py`), aiohttp's client costs well under half of httpx's CPU per request, and
the client is most of a proxy's own work.

Failover happens only before any byte reached the client: for a non-streaming request the whole
upstream body is read inside the attempt; for a stream, the first chunk is. Connect errors,
timeouts, 429, 5xx (and 401/403: the channel's own key was refused) move on to the next route,
and every attempt's outcome is reported to `channels.health.passive`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from django.conf import settings

from channels.health import passive

from .cache import RouteInfo
from .http import GatewayError

logger = logging.getLogger(__name__)

# Never forwarded: credentials (ours or the developer's), framing and hop-by-hop headers, and
# provider-account headers that would clash with the channel's own key.
DROP_HEADERS = frozenset(
    {
        "authorization",
        "x-api-key",
        "api-key",
        "cookie",
        "host",
        "content-length",
        "content-type",
        "accept-encoding",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "expect",
        "openai-organization",
        "openai-project",
        "x-forwarded-for",
        "x-real-ip",
        "forwarded",
    }
)
FAILOVER_STATUSES = frozenset({401, 403, 408, 429})

# (path, payload, client headers, anthropic_native) to send to one route
Prepare = Callable[[RouteInfo], tuple[str, dict[str, Any], dict[str, str], bool]]
MAX_ERROR_BODY = 64 * 1024


def forward_headers(client_headers: dict[str, str], route: RouteInfo, *, anthropic_native: bool = False) -> dict:
    """The client's headers minus the dropped ones, plus the channel's own credentials."""
    out = {k: v for k, v in client_headers.items() if k not in DROP_HEADERS}
    out["content-type"] = "application/json"
    if route.api_key:
        if anthropic_native:
            out["x-api-key"] = route.api_key
            out.setdefault("anthropic-version", "2023-06-01")
        else:
            out["authorization"] = "Bearer " + route.api_key
    return out


@dataclass(slots=True)
class Attempt:
    channel_id: int
    channel_name: str
    error: str  # connect, timeout, http_429, http_5xx, protocol
    status: int | None = None


@dataclass(slots=True)
class UpstreamResponse:
    """A committed upstream answer. `body` for non-streaming; `first_chunk` + `response` for SSE."""

    route: RouteInfo
    status: int
    content_type: bytes
    body: bytes = b""
    first_chunk: bytes = b""
    response: aiohttp.ClientResponse | None = None
    attempts: list[Attempt] = field(default_factory=list)
    ttfb_ms: float | None = None

    def close(self) -> None:
        """Drop the upstream connection (cancels generation on servers that watch for it)."""
        if self.response is not None:
            self.response.close()
            self.response = None

    def release(self) -> None:
        """Return a fully read connection to the pool."""
        if self.response is not None:
            self.response.release()
            self.response = None


class UpstreamClient:
    """One pooled HTTP client per process (opened and closed by the ASGI lifespan)."""

    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self.session is None or self.session.closed:
            self.timeout = aiohttp.ClientTimeout(
                total=None,
                sock_connect=float(settings.GATEWAY_CONNECT_TIMEOUT),
                sock_read=float(settings.GATEWAY_READ_TIMEOUT),
            )
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=30)
            self.session = aiohttp.ClientSession(
                connector=connector,
                timeout=self.timeout,
                json_serialize=lambda o: orjson.dumps(o).decode(),
                skip_auto_headers=("User-Agent",),
                auto_decompress=True,
            )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def open(
        self,
        routes: list[RouteInfo],
        path: str,
        payload: dict[str, Any],
        client_headers: dict[str, str],
        *,
        stream: bool,
        anthropic_native: bool = False,
        prepare: Prepare | None = None,
    ) -> UpstreamResponse:
        """POST `payload` (with `model` rewritten per route) to the first route that answers.

        `prepare(route)`, when given, decides per route what to send (a translating surface sends
        its own API as is to channels that speak it natively, Chat Completions to the others)."""
        if self.session is None:
            await self.start()
        attempts: list[Attempt] = []
        last_error: GatewayError | None = None
        for route in routes:
            if prepare is not None:
                path, payload, client_headers, anthropic_native = prepare(route)
            payload["model"] = route.upstream_id
            data = orjson.dumps(payload)
            headers = forward_headers(client_headers, route, anthropic_native=anthropic_native)
            started = time.perf_counter()
            resp: aiohttp.ClientResponse | None = None
            try:
                resp = await self.session.request("POST", route.base_url + path, data=data, headers=headers)
                status = resp.status
                if status in FAILOVER_STATUSES or status >= 500:
                    body = await resp.content.read(MAX_ERROR_BODY)
                    resp.close()
                    kind = "http_429" if status == 429 else ("http_5xx" if status >= 500 else f"http_{status}")
                    attempts.append(Attempt(route.channel_id, route.channel_name, kind, status))
                    passive.report(route.channel_id, False, status=status, error=kind)
                    last_error = upstream_error(status, body, route)
                    continue
                ctype = resp.headers.get("content-type", "application/json").encode("latin-1")
                if stream and status == 200:
                    first = await resp.content.readany()
                    if not first:
                        raise aiohttp.ServerDisconnectedError("upstream closed the stream before the first byte")
                    ttfb = (time.perf_counter() - started) * 1000
                    passive.report(route.channel_id, True, status=status, ttft_ms=ttfb)
                    return UpstreamResponse(
                        route, status, ctype, first_chunk=first, response=resp, attempts=attempts, ttfb_ms=ttfb
                    )
                body = await resp.read()
                resp.release()
                ttfb = (time.perf_counter() - started) * 1000
                passive.report(route.channel_id, True, status=status, ttft_ms=ttfb)
                return UpstreamResponse(route, status, ctype, body=body, attempts=attempts, ttfb_ms=ttfb)
            except TimeoutError:
                kind, message, code = "timeout", "timed out", 504
            except aiohttp.ClientConnectorError:
                kind, message, code = "connect", "refused the connection", 502
            except (aiohttp.ClientError, OSError) as exc:
                kind, message, code = "protocol", f"failed ({exc.__class__.__name__})", 502
            if resp is not None:
                resp.close()
            attempts.append(Attempt(route.channel_id, route.channel_name, kind))
            passive.report(route.channel_id, False, error=kind)
            last_error = GatewayError(code, f"The upstream for this model {message}.", code=f"upstream_{kind}")
            logger.info("channel %s %s; trying the next route", route.channel_name, message)
        if last_error is None:
            last_error = GatewayError(503, "No upstream channel is available for this model.", code="no_channel")
        last_error.attempts = attempts
        raise last_error


def upstream_error(status: int, body: bytes, route: RouteInfo) -> GatewayError:
    """An upstream's error as ours, keeping its message when it has the OpenAI shape."""
    message = None
    try:
        data = orjson.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            message = err.get("message")
        elif isinstance(err, str):
            message = err
    except (orjson.JSONDecodeError, TypeError):
        pass
    if status in (401, 403):
        return GatewayError(
            502,
            "The upstream rejected this portal's credentials; an admin must fix the channel.",
            code="upstream_auth_failed",
        )
    if status == 429:
        return GatewayError(
            429,
            f"The upstream is rate limiting: {message or 'too many requests'}",
            code="upstream_rate_limited",
            headers=[(b"retry-after", b"1")],
        )
    return GatewayError(
        502, f"The upstream failed with HTTP {status}: {message or 'no details'}", code="upstream_error"
    )
