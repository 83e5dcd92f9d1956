"""Request stage 4: the call upstream, with failover, and the record of it.

A surface opens a `Call` (`admission.open_call`), builds a `Plan` (the routes to try, from
`catalog.route`, and what each one is sent) and calls `call.forward(plan)`. Failover happens only
before any byte reached the client: for a non-streaming request the whole upstream body is read
inside the attempt; for a stream, the first chunk is. Connect errors, timeouts, 429, 5xx (and
401/403: the channel's own key was refused) move on to the next route, and every attempt's
outcome is reported to `channels.health.passive`; one that got no answer in time opens the
channel's breaker (`gateway.breaker`: tried last for a while), an answer closes it.

Every call ends in `call.finish(...)` (`send_json` and `relay.relay` call it; `asgi.handle`
fails a call an error left open): it settles the reservation with the real usage and queues the
usage record, so a call never keeps holding a reservation.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Protocol

import aiohttp
import orjson

from channels.health import passive
from keys.choices import Pricing, UsageStatus
from keys.payloads.services import Captured
from keys.usage import explanation as lines
from portal.hot import hot

from . import balance
from .breaker import breakers
from .cache import KeyInfo, ModelInfo, RouteInfo
from .catalog import Selection
from .chunks import DONE, ChatAssembly, event_data, replayed
from .errors import (
    NOT_THE_CHANNELS,
    REDACTED,
    SHUTDOWN,
    TIMEOUT_SETTINGS,
    Attempt,
    Failure,
    GatewayError,
    UpstreamStreamError,
    context_overflow,
    request_fault,
    router_not_found,
    upstream_error,
)
from .http import Request, send_bytes
from .limits import Admission
from .ondemand import ended as ondemand_ended
from .payloads import RAW_STREAM_FACTOR, max_bytes
from .state import process
from .translate.common import IMAGE_TOKENS, MESSAGE_OVERHEAD_TOKENS, request_text
from .usage import Usage, UsageEvent, so_far

logger = logging.getLogger(__name__)

# Never forwarded: credentials (ours or the developer's), framing and hop-by-hop headers (the
# body's encoding too: the upstream gets our own JSON of it, never the client's bytes), and
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
        "content-encoding",
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
# Parts of a header's name that say it carries a credential (`x-goog-api-key`, Azure's
# `ocp-apim-subscription-key`, `x-auth-token`…): a client's, maybe its gateway key, never goes on
# to a team's upstream; nor do the portal's own `x-portal-*` headers.
CREDENTIAL_NAME_PARTS = (
    "api-key",
    "apikey",
    "api_key",
    "subscription-key",
    "access-key",
    "secret",
    "token",
    "password",
    "auth",
    "cookie",
    "session",
)
_forwarded: dict[str, bool] = {}  # header name -> sent upstream (names repeat: decided once each)


def forwarded(name: str) -> bool:
    """Does a client's header of this (lower-case) name go on to the upstream?"""
    keep = _forwarded.get(name)
    if keep is None:
        keep = (
            name not in DROP_HEADERS
            and not name.startswith("x-portal-")
            and not any(part in name for part in CREDENTIAL_NAME_PARTS)
        )
        if len(_forwarded) < 4096:
            _forwarded[name] = keep
    return keep


# 404: a model server answers it for a model id it does not serve (a route's typo, a server
# started with another name); another channel of the model may serve it.
FAILOVER_STATUSES = frozenset({401, 403, 404, 408, 429})
MAX_ERROR_BODY = 64 * 1024


@dataclass(slots=True)
class Outgoing:
    """What one route is sent; `payload["model"]` is set to the route's upstream id on the way.
    `anthropic_native` sends the channel key as `x-api-key` (with an `anthropic-version`)."""

    path: str
    payload: dict[str, Any]
    headers: dict[str, str]  # the client's; `forward_headers` filters them
    anthropic_native: bool = False
    # How a non-streaming answer is assembled from a stream (given the output reserved per
    # choice): the request is then asked for as a stream, as Chat and Completions always are
    # (STREAMED_PATHS, read as Chat chunks), so a long answer is bounded by its liveness.
    # None elsewhere: the JSON answer is read as it comes (embeddings).
    assemble: Callable[[int | None], Assembly] | None = None


class Assembly(Protocol):
    """Reads the events of a stream into the non-streaming answer (`chunks.ChatAssembly`,
    `native.MessagesReader`, `native.ResponsesReader`)."""

    @property
    def done(self) -> bool:
        """Cut at the reservation: stop reading, close the upstream."""

    @property
    def ended(self) -> bool:
        """The stream's own last event was seen."""

    @property
    def tokens(self) -> int:
        """Output events seen."""

    @property
    def usage(self) -> Usage | None:
        """What the upstream reported so far, None when it reported nothing."""

    @property
    def room(self) -> int | None:
        """Output events it can still read before the cut (None: no cut); 0 to be given the
        stream piece by piece as it comes (`_assemble` gives it the pieces in batches that
        cannot hold more output events than that)."""

    def take(self, buffer: bytes) -> bytes | None:
        """Reads the complete events at the start of `buffer` (the stream's bytes as they came):
        what is left of it, or None once the answer is complete (the stream's last event, or the
        cut). Raises UpstreamStreamError for an error event or junk."""

    def ongoing(self, piece: bytes) -> bool:
        """Is `piece` (the last bytes read, not yet given to `take`) nothing but events that more
        of the answer must follow (a stream's common output chunks)? Then the pieces kept can wait
        for more before `take` reads them; False when in doubt."""

    def answer(self) -> dict[str, Any]:
        """The whole answer; raises UpstreamStreamError when the stream ended before it was complete."""


@dataclass(slots=True)
class Plan:
    """How a call goes upstream: the routes to try in order and what each of them is sent."""

    routes: list[RouteInfo]
    outgoing: Callable[[RouteInfo], Outgoing]

    @classmethod
    def same(cls, routes: list[RouteInfo], outgoing: Outgoing) -> Plan:
        """Every route gets the same request (a surface whose API every channel speaks)."""
        return cls(routes, lambda _route: outgoing)


def forward_headers(
    client_headers: dict[str, str], route: RouteInfo, *, anthropic_native: bool = False
) -> dict[str, str]:
    """The client's headers minus the dropped ones (`forwarded`), plus the channel's own credentials."""
    out = {k: v for k, v in client_headers.items() if forwarded(k)}
    out["content-type"] = "application/json"
    if route.api_key:
        if anthropic_native:
            out["x-api-key"] = route.api_key
            out.setdefault("anthropic-version", "2023-06-01")
        else:
            out["authorization"] = "Bearer " + route.api_key
    return out


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
    first_at: float | None = None  # perf_counter when the first token arrived (streamed upstreams)
    payload: dict[str, Any] | None = None  # what this route was sent (`recount` tokenizes its prompt)
    upstream_request_id: str = ""  # the upstream's own `x-request-id`, kept on the usage record
    cut: bool = False  # an assembled answer ended by us at the reservation (its usage is an estimate)
    tokens: int = 0  # output events of an assembled answer
    answer: dict[str, Any] | None = None  # an assembled answer as built (`body` is its JSON)

    def json(self) -> Any:
        """The answer's JSON (None when the body is not JSON), parsed once."""
        if self.answer is not None:
            return self.answer
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None

    @property
    def streaming(self) -> bool:
        """Relayed as a stream (the client asked for one and the upstream answered one, or a whole
        Chat answer made into one: `first_chunk` alone)."""
        return self.response is not None or bool(self.first_chunk)

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


class TooLarge(Exception):
    """The upstream's answer passed GATEWAY_MAX_RESPONSE_BYTES."""


async def read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """The whole body, or TooLarge as soon as it passes `cap` (nothing beyond is kept)."""
    if resp.content_length is not None and resp.content_length > cap:
        raise TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > cap:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _is_json(ctype: bytes) -> bool:
    return ctype.find(b"json") >= 0


def _not_an_answer(body: bytes, ctype: bytes, *, stream: bool) -> Failure | None:
    """Why a successful upstream answer that is not an event stream cannot be the client's answer,
    or None: the body is not JSON (a captive portal's or a proxy's HTML page), it is an error
    object (a 200 that failed), or it is a whole answer where the client's stream was asked for
    and cannot be made from it (`NOT_STREAMED`; a Chat answer can: `replayed`). A client that
    asked for no stream takes the JSON answer of a server that ignores the gateway's `stream`."""
    if not _is_json(ctype):
        return Failure.INVALID_JSON
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return Failure.INVALID_JSON
    if isinstance(data, dict) and data.get("error") and not data.get("choices") and data.get("type") != "message":
        return Failure.STREAM_ERROR
    return Failure.PROTOCOL if stream else None


# A whole JSON answer to a stream request that the gateway cannot relay as a stream (a Messages or
# Responses server that ignores `stream`): the failed attempt says so, not "invalid JSON".
NOT_STREAMED = "The upstream answered with a whole JSON answer where a stream was asked for (it ignores `stream`)."


def _chat_answer(body: bytes, ctype: bytes) -> dict[str, Any] | None:
    """A Chat or legacy Completions answer (`choices`, no error) in a JSON body, else None."""
    if not _is_json(ctype):
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(data, dict) and isinstance(data.get("choices"), list) and not data.get("error"):
        return data
    return None


def without_credentials(body: bytes, route: RouteInfo) -> bytes:
    """An upstream's error body without the channel's key in it: an upstream (or a proxy before it)
    that echoes the request's headers in its error must not hand the team's key to a developer,
    nor to the usage record's error text."""
    key = route.api_key
    if not key or len(key) < 8:
        return body
    for secret in {key.encode(), orjson.dumps(key)[1:-1]}:
        if secret in body:
            body = body.replace(secret, REDACTED.encode())
    return body


# Servers with a /tokenize endpoint, and how they take the text (llama.cpp `content`, vLLM `prompt`).
TOKENIZING_KINDS = ("llamacpp", "vllm")
TOKENIZE_TIMEOUT = aiohttp.ClientTimeout(total=5)


async def tokenize(route: RouteInfo, text: str, *, within: aiohttp.ClientTimeout = TOKENIZE_TIMEOUT) -> int | None:
    """Tokens of `text` by the route's own tokenizer (`/tokenize`), or None where it has none or fails."""
    if route.kind not in TOKENIZING_KINDS:
        return None
    payload = {"content": text} if route.kind == "llamacpp" else {"model": route.upstream_id, "prompt": text}
    send = {"authorization": "Bearer " + route.api_key} if route.api_key else {}
    root = route.base_url.removesuffix("/v1")
    try:
        async with process.upstream(route.kind).post(
            root + "/tokenize", json=payload, headers=send, timeout=within
        ) as resp:
            if resp.status != 200:
                return None
            data = await resp.json(content_type=None)
        count = data.get("count")
        return count if isinstance(count, int) else len(data.get("tokens") or [])
    except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError, TypeError) as exc:
        logger.info("channel %s could not tokenize (%r)", route.channel_name, exc)
        return None


async def recount(up: UpstreamResponse, usage: Usage, answer: str | None = None) -> Usage:
    """An estimated usage (the upstream reported none) counted again with the upstream's own
    tokenizer where it has one: the prompt it was sent, and a non-streaming `answer` (a stream's
    completion is its number of content events already). Bounded: 1 s, else the estimate stands."""
    chat = up.payload
    if not usage.estimated or up.route.kind not in TOKENIZING_KINDS or not isinstance(chat, dict):
        return usage
    quick = aiohttp.ClientTimeout(total=1)
    text, messages, images = request_text(chat)  # Chat, Messages, Responses, Completions, Embeddings
    counted = await tokenize(up.route, text, within=quick) if text else None
    prompt = usage.prompt_tokens  # the estimate stands when there is nothing the tokenizer can count
    if counted is not None:
        prompt = counted + messages * MESSAGE_OVERHEAD_TOKENS + images * IMAGE_TOKENS
    completion = usage.completion_tokens
    if answer is not None and (answered := await tokenize(up.route, answer, within=quick)) is not None:
        completion = answered
    return Usage(prompt, completion, estimated=True)


# Paths whose answer is always asked for as a stream: a non-streaming answer is assembled from it,
# so a long generation is bounded by its liveness (first token, gaps between tokens), not a wall.
STREAMED_PATHS = frozenset({"/chat/completions", "/completions"})


def prefill_seconds(prompt_tokens: int) -> float:
    """What a slow server may take to read `prompt_tokens`: one second per
    GATEWAY_PREFILL_TOKENS_PER_SECOND of them (a 30k-token prompt needs minutes on a CPU)."""
    rate = float(hot.GATEWAY_PREFILL_TOKENS_PER_SECOND)
    return max(prompt_tokens, 0) / rate if rate > 0 else 0.0


def first_token_timeout(prompt_tokens: int) -> float:
    """Seconds from the headers to the first token: GATEWAY_FIRST_TOKEN_TIMEOUT plus the prompt's prefill."""
    return float(hot.GATEWAY_FIRST_TOKEN_TIMEOUT) + prefill_seconds(prompt_tokens)


def headers_deadline(
    streams: bool, headers_timeout: float, first_timeout: float, prefill: float = 0.0
) -> tuple[Failure, float]:
    """How long an attempt waits for the upstream's response headers, and the setting named when
    they do not come. llama.cpp sends a stream's headers with its first token: a request waiting
    for a free slot, or a long prompt's prefill, gets none before it (vLLM and SGLang send them at
    once). So a stream's headers get the first token's deadline, which scales with the prompt,
    when that is the longer one. An answer that cannot be streamed (embeddings) sends its headers
    with the whole answer, which is all prefill: GATEWAY_HEADERS_TIMEOUT plus the input's `prefill`
    (Continue's index sends 64 chunks of 500 tokens at a time: minutes for a CPU server)."""
    if streams:
        if first_timeout > headers_timeout:
            return Failure.FIRST_TOKEN_TIMEOUT, first_timeout
        return Failure.HEADERS_TIMEOUT, headers_timeout
    return Failure.HEADERS_TIMEOUT, headers_timeout + prefill


def ask_for_stream(payload: dict[str, Any]) -> None:
    """A Chat/Completions request as a stream with its usage (the client's own choice is kept by
    the surface: usage is stripped again for a client that did not ask for it)."""
    payload["stream"] = True
    options = payload.get("stream_options")
    payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}


_PREFILLED = (Failure.HEADERS_TIMEOUT, Failure.FIRST_TOKEN_TIMEOUT)


def timeout_error(failure: Failure, seconds: float) -> GatewayError:
    setting = TIMEOUT_SETTINGS[failure]
    what = {
        Failure.HEADERS_TIMEOUT: "sent no response headers",
        Failure.FIRST_TOKEN_TIMEOUT: "sent no first token",
        Failure.IDLE_TIMEOUT: "went silent mid-answer",
        Failure.DEADLINE: "did not finish",
    }[failure]
    if failure in _PREFILLED and seconds > float(getattr(hot, setting)):  # `headers_deadline` added the prompt
        setting += " plus the prompt at GATEWAY_PREFILL_TOKENS_PER_SECOND"
    return GatewayError(
        504,
        f"The upstream for this model {what} within {setting} ({seconds:g} s).",
        code="upstream_timeout",
    )


async def send_upstream(
    plan: Plan,
    *,
    stream: bool,
    deadline: float | None = None,
    prompt_tokens: int = 0,
    limit: int | None = None,
    choices: int = 1,
    assembling: list[tuple[RouteInfo, Assembly]] | None = None,
) -> UpstreamResponse:
    """POST each route its `plan.outgoing(route)` in order until one answers.

    Each attempt has GATEWAY_HEADERS_TIMEOUT for the response headers (a stalled server fails
    over), a stream the first token's deadline when that is longer (`headers_deadline`). Chat and
    Completions, and whatever `Outgoing.assemble` says how to assemble (native Messages and
    Responses), are always asked for as a stream: the first token must come within
    `first_token_timeout(prompt)` and each next one within GATEWAY_IDLE_TIMEOUT; a non-streaming
    answer is assembled from the stream inside the attempt (cut at `limit` output tokens per
    choice; a stream that ends before its last event is an error), so any failure before the
    client got a byte fails over; each assembly is appended to `assembling` with its route as it
    starts (what a client that leaves meanwhile is charged, `Call.forward`). Other answers get
    the call's total deadline for their body, at most GATEWAY_MAX_RESPONSE_BYTES of it, and must be
    JSON when they say so. Redirects are never followed: a 3xx is an upstream error like a 5xx."""
    headers_timeout = float(hot.GATEWAY_HEADERS_TIMEOUT)
    idle_timeout = float(hot.GATEWAY_IDLE_TIMEOUT)
    prefill = prefill_seconds(prompt_tokens)
    first_timeout = float(hot.GATEWAY_FIRST_TOKEN_TIMEOUT) + prefill  # `first_token_timeout`, prefill read once
    cap = int(hot.GATEWAY_MAX_RESPONSE_BYTES)
    attempts: list[Attempt] = []
    failed: list[tuple[int, GatewayError]] = []  # each failed attempt's error, by how much it tells (`telling`)
    loop = asyncio.get_running_loop()
    overflowed = 0  # the largest window a server said the request does not fit (routes no larger are skipped)
    for route in plan.routes:
        if overflowed and route.context_window is not None and route.context_window <= overflowed:
            continue
        out = plan.outgoing(route)
        payload = within_route_output(out.payload, route)
        payload["model"] = route.upstream_id
        assemble = out.assemble
        chat_stream = assemble is None and out.path in STREAMED_PATHS and not out.anthropic_native
        if chat_stream:
            ask_for_stream(payload)
            assemble = _chat_assembly(out.path, choices)
        streamed = assemble is not None
        if streamed and not stream:
            payload["stream"] = True
        data = orjson.dumps(payload)
        headers = forward_headers(out.headers, route, anthropic_native=out.anthropic_native)
        started, sent = time.perf_counter(), loop.time()
        resp: aiohttp.ClientResponse | None = None
        phase, phase_seconds = headers_deadline(stream or streamed, headers_timeout, first_timeout, prefill)
        trial = bool(breakers.open) and breakers.claim(route.channel_id)
        try:
            until = loop.time() + phase_seconds
            async with asyncio.timeout_at(until if deadline is None else min(until, deadline)):
                resp = await process.upstream(route.kind).request(
                    "POST", route.base_url + out.path, data=data, headers=headers, allow_redirects=False
                )
            status = resp.status
            if status in FAILOVER_STATUSES or (status >= 300 and status < 400) or status >= 500:
                body = without_credentials(await resp.content.read(MAX_ERROR_BODY), route)
                retry_after = resp.headers.get("retry-after", "")
                resp.close()
                err = upstream_error(status, body, retry_after=retry_after)
                kind = failure_of(status, err)
                if (fault := request_fault(status, body, llamacpp=route.kind == "llamacpp")) is not None:
                    err, kind = fault  # the request's: another route may take it
                failed.append((telling(kind), err))
                attempts.append(Attempt(route.channel_id, route.channel_name, kind, status))
                if kind not in NOT_THE_CHANNELS:
                    passive.report(route.channel_id, False, status=status, error=kind)
                continue
            ctype = resp.headers.get("content-type", "application/json").encode("latin-1")
            upstream_id = resp.headers.get("x-request-id", "")[:100]
            if status == 200 and (stream or streamed) and ctype.find(b"event-stream") >= 0:
                phase, phase_seconds = Failure.FIRST_TOKEN_TIMEOUT, first_timeout
                events_reader(resp.content)
                # What arrived with the headers often holds the first event (a short answer all of
                # it): then there is nothing to wait for, nor a deadline's timer to arm.
                first = drain(resp.content)
                if not first or not _has_first_event(first, checked=stream):
                    until = loop.time() + first_timeout
                    async with asyncio.timeout_at(until if deadline is None else min(until, deadline)):
                        first = await _first_event(resp, checked=stream, buffer=first)
                first_at = time.perf_counter()
                ttfb = (first_at - started) * 1000
                if stream:
                    answered(route, status, ttfb)
                    return UpstreamResponse(
                        route,
                        status,
                        ctype,
                        first_chunk=first,
                        response=resp,
                        attempts=attempts,
                        ttfb_ms=ttfb,
                        first_at=first_at,
                        payload=payload,
                        upstream_request_id=upstream_id,
                    )
                phase, phase_seconds = Failure.IDLE_TIMEOUT, idle_timeout
                assert assemble is not None
                assembly = assemble(limit)
                if assembling is not None:
                    assembling.append((route, assembly))
                answer = await _assemble(
                    resp, first, assembly, idle=idle_timeout, cap=cap, deadline=deadline, sent=sent
                )
                _let_go(resp, cut=assembly.done)
                answered(route, status, ttfb)
                return UpstreamResponse(
                    route,
                    status,
                    b"application/json",
                    body=orjson.dumps(answer),
                    attempts=attempts,
                    ttfb_ms=ttfb,
                    first_at=first_at,
                    payload=payload,
                    upstream_request_id=upstream_id,
                    cut=assembly.done,
                    tokens=assembly.tokens,
                    answer=answer,
                )
            phase, phase_seconds = Failure.DEADLINE, float(hot.GATEWAY_TOTAL_TIMEOUT)
            async with asyncio.timeout_at(deadline) if deadline is not None else _no_deadline():
                body = await read_capped(resp, cap)
            resp.release()
            if status >= 400:  # a client error passes through to the client (`_relay_json`)
                body = without_credentials(body, route)
                if status == 400 and route.kind == "llamacpp" and router_not_found(body):
                    # A llama.cpp router without the route's model: as vLLM's 404 (`Failure.NOT_SERVED`),
                    # the model's next channel may serve it, and the channel's other models answer.
                    attempts.append(Attempt(route.channel_id, route.channel_name, Failure.NOT_SERVED, status))
                    err = GatewayError(404, "The upstream answered 400: model not found", code="upstream_not_found")
                    failed.append((telling(Failure.NOT_SERVED), err))
                    continue
                overflow = context_overflow(
                    status, body, max_tokens=_requested_output(payload), embedding=out.path == "/embeddings"
                )
                if overflow is not None:
                    # The server counted the prompt past its window (the gateway's count is an
                    # estimate): a route with a larger window may take it; else the client gets the
                    # error coding clients compact the conversation on. The channel answered.
                    answered(route, status, (time.perf_counter() - started) * 1000)
                    overflowed = max(overflowed, overflow.window or route.context_window or 0)
                    attempts.append(Attempt(route.channel_id, route.channel_name, Failure.CONTEXT_LENGTH))
                    failed.append((telling(Failure.CONTEXT_LENGTH), overflow))
                    continue
            elif status == 200 and stream and chat_stream and (whole := _chat_answer(body, ctype)) is not None:
                # A server that ignores `stream` (the gateway asks every Chat upstream for one): its
                # whole answer goes to the streaming client as the stream it would have sent.
                logger.info("channel %s answered JSON to a stream; relayed as a stream", route.channel_name)
                first_at = time.perf_counter()
                ttfb = (first_at - started) * 1000
                answered(route, status, ttfb)
                return UpstreamResponse(
                    route,
                    status,
                    b"text/event-stream",
                    first_chunk=replayed(whole),
                    attempts=attempts,
                    ttfb_ms=ttfb,
                    first_at=first_at,
                    payload=payload,
                    upstream_request_id=upstream_id,
                )
            elif status < 300 and (failure := _not_an_answer(body, ctype, stream=stream)) is not None:
                raise UpstreamStreamError(failure)
            ttfb = (time.perf_counter() - started) * 1000
            answered(route, status, ttfb)
            return UpstreamResponse(
                route,
                status,
                ctype,
                body=body,
                attempts=attempts,
                ttfb_ms=ttfb,
                payload=payload,
                upstream_request_id=upstream_id,
            )
        except TooLarge:
            kind, err = (
                Failure.TOO_LARGE,
                GatewayError(
                    502, f"The upstream for this model answered more than {cap} bytes.", code="upstream_too_large"
                ),
            )
        except TimeoutError:
            if deadline is not None and loop.time() >= deadline:
                phase, phase_seconds = Failure.DEADLINE, float(hot.GATEWAY_TOTAL_TIMEOUT)
            kind, err = phase, timeout_error(phase, phase_seconds)
        except UpstreamStreamError as exc:
            kind = exc.failure
            if kind == Failure.INVALID_JSON:
                err = GatewayError(502, "The upstream answered with invalid JSON.", code="upstream_invalid_response")
            elif kind == Failure.TRUNCATED:
                err = GatewayError(
                    502, "The upstream's answer ended before it was complete (truncated).", code="upstream_truncated"
                )
            elif kind == Failure.PROTOCOL:
                err = GatewayError(502, NOT_STREAMED, code="upstream_not_streamed")
            else:
                err = GatewayError(502, "The upstream failed while answering.", code="upstream_error")
        except aiohttp.ClientConnectorError:
            kind, err = (
                Failure.CONNECT,
                GatewayError(502, "The upstream for this model refused the connection.", code="upstream_connect"),
            )
        except (aiohttp.ClientError, OSError) as exc:
            # The client is told what happened in words; the library's exception is for the log.
            logger.info("channel %s: %s", route.channel_name, exc.__class__.__name__)
            kind, err = (
                Failure.PROTOCOL,
                GatewayError(
                    502,
                    "The upstream for this model broke the connection or its HTTP answer.",
                    code="upstream_protocol",
                ),
            )
        except BaseException:
            # Whatever else ends the attempt: the client left (`Call.forward`), the server shuts
            # down, a fault of ours. A response not closed here kept its connection open, and the
            # server generated the whole answer nobody reads (measured on a one-slot llama.cpp: all
            # 3,900 tokens asked for, every colleague waiting behind them); closed, it stops at its
            # next token.
            if resp is not None:
                resp.close()
            raise
        finally:
            if trial:  # done (an answer closed the breaker already; a failure reopens it below)
                breakers.release(route.channel_id)
        if resp is not None:
            resp.close()
        attempts.append(Attempt(route.channel_id, route.channel_name, kind))
        passive.report(route.channel_id, False, error=Failure.PROTOCOL if kind == Failure.TOO_LARGE else kind)
        breakers.failed(route, kind)
        failed.append((telling(kind), err))
        logger.info("channel %s failed (%s); trying the next route", route.channel_name, kind)
        if deadline is not None and loop.time() >= deadline:
            break
    if failed:  # the client is answered with the latest of the most telling failures
        told = max(reversed(failed), key=itemgetter(0))[1]
    else:
        told = GatewayError(503, "No upstream channel is available for this model.", code="no_channel")
    told.attempts = attempts
    raise told


def answered(route: RouteInfo, status: int, ttfb_ms: float) -> None:
    """The route's channel answered: evidence for its health, and its breaker (if open) closes."""
    passive.report(route.channel_id, True, status=status, ttft_ms=ttfb_ms)
    if breakers.open:
        breakers.answered(route.channel_id)


# The names a request's output limit goes by: Chat's two, Completions' and Messages' `max_tokens`,
# Responses' `max_output_tokens`.
OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
MIN_THINKING_BUDGET = 1024  # Anthropic's least `thinking.budget_tokens`


def within_route_output(payload: dict[str, Any], route: RouteInfo) -> dict[str, Any]:
    """`payload` asking for no more output than `route` gives (`catalog.route_output`): a model
    server with a small window refuses a prompt + max_tokens past it (Claude Code asks for 32,000
    whatever the model), and an admin's max output is what the route may generate. A copy when it
    is lowered (the routes may share one payload); a Messages thinking budget stays below its
    max_tokens, as the API requires (none is left when no room for the least budget remains)."""
    cap = route.max_output_tokens
    if not cap:
        return payload
    over = {
        name: cap
        for name in OUTPUT_FIELDS
        if type(value := payload.get(name)) is int and value > cap  # (a bool is no limit)
    }
    if not over:
        return payload
    payload = {**payload, **over}
    thinking = payload.get("thinking")
    if isinstance(thinking, dict) and type(budget := thinking.get("budget_tokens")) is int and budget >= cap:
        if cap - 1 >= MIN_THINKING_BUDGET:
            payload["thinking"] = {**thinking, "budget_tokens": cap - 1}
        else:
            del payload["thinking"]
    return payload


def _requested_output(payload: dict[str, Any]) -> object:
    """The output the upstream was asked for, whichever name the surface gave it."""
    for name in OUTPUT_FIELDS:
        if payload.get(name) is not None:
            return payload[name]
    return None


def telling(kind: Failure) -> int:
    """How much a failure tells the client, of the call's failures once every route failed (the
    latest of the most telling is the answer): an upstream that answered (its status, its
    message) tells more than one that could not be reached, and one that is busy (429, 529,
    with its Retry-After) more than any other: the client waits and retries, where a 502 makes
    an SDK retry at once."""
    if kind == Failure.CONNECT:
        return 0
    return 2 if kind in (Failure.RATE_LIMITED, Failure.OVERLOADED) else 1


def failure_of(status: int, err: GatewayError) -> Failure:
    if err.code == "upstream_overloaded":
        return Failure.OVERLOADED
    if status == 429:
        return Failure.RATE_LIMITED
    if status == 404:
        return Failure.NOT_SERVED
    if status >= 500:
        return Failure.SERVER_ERROR
    if status < 400:
        return Failure.REDIRECT
    return Failure.REFUSED


async def _first_event(resp: aiohttp.ClientResponse, *, checked: bool = True, buffer: bytes = b"") -> bytes:
    """Read until the stream's first complete event with data (SSE comments do not count: a
    server that only keeps the connection alive has not started answering), after `buffer` (what
    was read already). Its JSON is checked (`checked`; an assembly checks every event itself): an
    upstream that streams junk fails over before the client sees a byte."""
    while not _has_first_event(buffer, checked=checked):
        chunk = await read_any(resp.content)
        if not chunk:
            raise aiohttp.ServerDisconnectedError("upstream closed the stream before its first event")
        buffer += chunk
    return buffer


def _has_first_event(buffer: bytes, *, checked: bool) -> bool:
    """Does `buffer` (the stream's first bytes) hold its first complete event with data
    (`_first_event`)? UpstreamStreamError for junk (or too much without one)."""
    if len(buffer) > MAX_ERROR_BODY * 4:
        raise UpstreamStreamError(Failure.INVALID_JSON)
    # Only as far as the first event with data (the rest of the buffer is read by the caller).
    text = buffer.replace(b"\r\n", b"\n") if buffer.find(b"\r") >= 0 else buffer
    if not checked and text.startswith(b"data:") and text.find(b"\n\n") >= 0:
        return True  # a complete first event that starts with a data line has data
    start = 0
    while (end := text.find(b"\n\n", start)) >= 0:
        data = event_data(text[start : end + 2])
        start = end + 2
        if data is None:
            continue
        if checked and data != DONE:
            try:
                parsed = orjson.loads(data)
            except orjson.JSONDecodeError:
                raise UpstreamStreamError(Failure.INVALID_JSON) from None
            if isinstance(parsed, dict) and "error" in parsed and not parsed.get("choices"):
                raise UpstreamStreamError(Failure.STREAM_ERROR)
        return True
    return False


def _chat_assembly(path: str, choices: int) -> Callable[[int | None], Assembly]:
    legacy = path == "/completions"
    return lambda limit: ChatAssembly(limit, choices=choices, legacy=legacy)


async def _assemble(
    resp: aiohttp.ClientResponse,
    first: bytes,
    assembly: Assembly,
    *,
    idle: float,
    cap: int,
    deadline: float | None,
    sent: float | None = None,
) -> dict[str, Any]:
    """The non-streaming answer, from the rest of the stream: each read within `idle` seconds,
    until the answer is complete (the stream's last event, or its usage chunk after every
    choice's finish), the stream's end, or the cut at the reservation (the connection is closed
    there, without waiting for the upstream to end its stream).

    The pieces are kept as they come and read by the assembly in one batch (reading a stream of
    small events one by one costs more than the rest of the request): before waiting for more,
    unless the last piece was nothing but common output chunks (`Assembly.ongoing`: then the
    answer cannot be complete yet), at the stream's end, or as soon as the pieces kept could
    hold more output events than the assembly has room for (`Assembly.room`; every event ends
    with a blank line, so there are at most half as many events as line feeds). The cut is then
    where reading event by event puts it, and the upstream is closed at most a batch later.
    Whatever the pieces' boundaries (a `[DONE]` split over two reads), the last event is read
    before the gateway waits on an upstream that keeps its connection open. Each wait is bounded
    by `idle` (and `deadline`): `StreamWaits`.

    Given `sent` (loop time the request went out), the rest is read in batches once the pieces
    come fast enough: `_gap`."""
    loop = asyncio.get_running_loop()
    waits_for = StreamWaits()
    content = resp.content
    buffer, size, chunk = b"", 0, first
    pending: list[bytes] = []
    feeds = 0  # line feeds in `buffer` and `pending`
    room = assembly.room
    reading = loop.time()
    lines = 0  # line feeds read after the first piece (two an event)
    try:
        while chunk:
            size += len(chunk)
            if size > cap:
                raise TooLarge
            pending.append(chunk)
            last, chunk = chunk, drain(content)  # what already arrived needs no deadline (nor its cost)
            waits = not chunk and not content.at_eof()
            # Line feeds, for the cut (`feeds`, read only with a `room`) and the batches' rate (`lines`):
            # counted once a piece, only when one of them needs it (~10 instructions a byte), never
            # at the body's end (all that was kept is read below).
            if (chunk or waits) and (room is not None or (sent is not None and last is not first)):
                counted = last.count(b"\n")
                feeds += counted
                if last is not first:
                    lines += counted
            if (room is not None and feeds // 2 > room) or (waits and not assembly.ongoing(last)):
                rest = assembly.take(b"".join([buffer, *pending]))
                if rest is None:
                    return assembly.answer()
                buffer, feeds, room = rest, rest.count(b"\n"), assembly.room
                pending.clear()
            if waits:
                now = loop.time()
                if sent is not None and (gap := _gap(now - sent, lines / 2, now - reading, idle)):
                    await _unread_for(content, gap)  # (part of the wait: `until` counts from before it)
                until = now + idle
                chunk = await waits_for.read(content, until if deadline is None or until < deadline else deadline)
    except asyncio.CancelledError:
        # The client left (`Call.forward`): what was read counts, as a relayed stream's events do.
        with contextlib.suppress(Exception):
            assembly.take(b"".join([buffer, *pending]))
        raise
    finally:
        waits_for.close()
    if pending:
        assembly.take(b"".join([buffer, *pending]))
    return assembly.answer()


# A non-streaming answer's stream, read in batches (`_assemble`). A model server writes an event a
# token, and each piece read costs the gateway a wakeup (uvloop, aiohttp's protocol and parser, a
# task step: ~40 k instructions, and a `recv` in the kernel) that a client waiting for the whole
# answer gains nothing from. Once the events come BATCH_EVENTS or more a gap, the upstream's
# connection is left unread for the gap (BATCH_SHARE of the time since the request was sent, at
# most BATCH_MAX seconds, from BATCH_MIN) and what came meanwhile is read with one wakeup: the
# answer ends at most 10 % (and 0.1 s) later, the gap is part of the idle timeout's wait, and a
# cut at the reservation closes the connection at most a gap later (the output is cut where it is,
# and charged so, whatever came past it).
BATCH_SHARE = 0.1
BATCH_MIN = 0.01
BATCH_MAX = 0.1
BATCH_EVENTS = 3.0


def _gap(elapsed: float, events: float, reading: float, idle: float) -> float:
    """Seconds to leave the stream unread before the next read, or 0: `elapsed` since the request
    was sent, `events` read in the `reading` seconds since the answer's first piece; at most a
    quarter of the `idle` timeout, which the gap is part of."""
    gap = elapsed * BATCH_SHARE
    if gap < BATCH_MIN:
        return 0.0
    if gap > BATCH_MAX:
        gap = BATCH_MAX
    if gap > idle / 4:
        gap = idle / 4
    return gap if events * gap >= BATCH_EVENTS * reading else 0.0  # (the rate so far, times the gap)


async def _unread_for(content: aiohttp.StreamReader, seconds: float) -> None:
    """Leaves the upstream's connection unread for `seconds` (the kernel keeps what arrives, the
    next read takes it all), then reads on, cancelled or not. The transport alone is paused:
    aiohttp's `pause_reading` pauses its parser too, whose flag then outlives the gap and stops it
    after the first HTTP chunk that comes next, the rest of a burst left unparsed until more
    arrives (`drain` does not re-feed it). Nothing is paused while aiohttp holds the transport."""
    protocol = content._protocol
    transport = protocol.transport
    if transport is None or protocol._reading_paused or getattr(protocol, "_buffer_paused", False):
        return
    transport.pause_reading()
    try:
        await asyncio.sleep(seconds)
    finally:
        if not transport.is_closing():
            transport.resume_reading()


# Seconds an upstream has to end its stream's body after the answer's last event (`[DONE]` and the
# body's end are two writes on most servers) before its connection is closed rather than reused.
END_GRACE = 1.0


def _let_go(resp: aiohttp.ClientResponse, *, cut: bool) -> None:
    """Done with the stream of an assembled answer. Cut at the reservation, the connection is
    closed (the generation stops). Otherwise the stream has ended, or is about to: aiohttp puts
    its connection back in the pool at the body's end (as for a relayed stream), and an upstream
    that holds the stream open past END_GRACE gets its connection closed."""
    if cut:
        resp.close()
    elif not resp.content.is_eof():
        asyncio.get_running_loop().call_later(END_GRACE, resp.close)


class EventsReader(aiohttp.StreamReader):
    """aiohttp's reader of a body, for an upstream's event stream: without the ends of its HTTP
    chunks (one an event on most servers). aiohttp's parser tells the reader each chunk's start
    and end, two Python calls (~1.2 k instructions) a chunk, and the reader keeps the ends for
    `readchunk` alone, which the gateway never calls (on this reader it returns the pieces with
    `end_of_http_chunk` False, as for a body that is not chunked). The rest is aiohttp's own."""

    __slots__ = ()

    def begin_http_chunk_receiving(self) -> None:
        pass

    def end_http_chunk_receiving(self) -> None:
        pass


def events_reader(content: aiohttp.StreamReader) -> None:
    """Makes aiohttp's reader of a streamed answer an `EventsReader` (the chunks already read
    are kept as they came); any other reader (another aiohttp's) is left as it is."""
    if type(content) is aiohttp.StreamReader:
        content.__class__ = EventsReader
        content._http_chunk_splits = None  # (the ends seen so far: none are kept from now on)


class StreamWaits:
    """The waits of one stream for its upstream's next piece (`_assemble`, `relay.relay`), each
    bounded by a limit (the idle timeout from now, or the call's deadline), through one timer for
    the whole stream rather than an `asyncio.timeout_at` around each wait (~27 k instructions each:
    a wait a token when the upstream streams as it generates). A wait moves the limit on; the
    timer, when it fires before the limit, is armed again for it; past the limit, while the task
    waits on the upstream's reader, it fails that wait with TimeoutError (the reader's waiter:
    the task itself is not cancelled, so a cancellation is always someone else's). Between two
    waits nothing is bounded (a relay's send to a slow client is not an idle upstream): a timer
    that fires then is dropped, and the next wait arms one. `close` when the stream is done."""

    __slots__ = ("_content", "_loop", "_timer", "_until")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._content: aiohttp.StreamReader | None = None
        self._until = 0.0  # the current wait's limit (loop time)
        self._timer: asyncio.TimerHandle | None = None

    def _check(self) -> None:
        if self._loop.time() < self._until:
            self._timer = self._loop.call_at(self._until, self._check)
            return
        self._timer = None
        waiter = getattr(self._content, "_waiter", None)  # aiohttp's: set while `read_any` waits
        if waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError())

    def read(self, content: aiohttp.StreamReader, until: float) -> Coroutine[Any, Any, bytes]:
        """`read_any(content)`, failing with TimeoutError once `until` (loop time) has passed."""
        self._content, self._until = content, until
        if self._timer is None:
            self._timer = self._loop.call_at(until, self._check)
        return read_any(content)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def read_any(content: aiohttp.StreamReader) -> bytes:
    """`content.readany()` through `drain`: by the time a reader woken by the first piece runs,
    the rest of a stream has often arrived (the whole of a short answer)."""
    try:
        while not content._buffer and not content._eof and content._exception is None:
            await content._wait("readany")
    except AttributeError:  # another aiohttp
        return await content.readany()
    return drain(content)


def drain(content: aiohttp.StreamReader) -> bytes:
    """What arrived of a body and was not read yet, at once: `content.read_nowait()` without its
    cost per HTTP chunk. aiohttp keeps each chunk of a chunked body apart (a stream's event each)
    and, reading them, takes them one by one and resumes its protocol after each (a call into
    its parser every time: ~6 k instructions an event); this joins them and resumes the
    protocol only when it was paused. It relies on `StreamReader`'s private fields (aiohttp is
    pinned by uv.lock; tests/gateway/test_assembly.py checks the reader's state against aiohttp's own
    reads); anything unexpected there falls back to `read_nowait`."""
    try:
        buffered = content._buffer
        if not buffered and content._exception is None and content._waiter is None:
            return b""  # nothing new (after each piece of a stream read as it comes): read_nowait's b""
        if content._exception is not None or not buffered or content._waiter is not None:
            return content.read_nowait()  # raises, or reads nothing, as aiohttp does
        offset, splits, protocol = content._buffer_offset, content._http_chunk_splits, content._protocol
        paused = protocol._reading_paused
    except AttributeError:  # another aiohttp
        return content.read_nowait()
    data = buffered[0] if len(buffered) == 1 else b"".join(buffered)
    if offset:
        data = data[offset:]
        content._buffer_offset = 0
    buffered.clear()
    content._size -= len(data)
    content._cursor = cursor = content._cursor + len(data)
    if splits:  # the ends of the chunks read (kept for `readchunk`): all behind the cursor now
        last = splits[-1]
        splits.clear()
        if last == cursor:
            splits.append(last)
    if paused:
        protocol.resume_reading()
    return data


@contextlib.asynccontextmanager
async def _no_deadline() -> AsyncIterator[None]:
    yield


DEBUG_HEADER = "x-portal-debug"
ROUTE_HEADER = b"x-portal-route"


def wants_route_header(req: Request, key: KeyInfo) -> bool:
    """`X-Portal-Debug: route` asks for the routing explanation as `X-Portal-Route`. Only an admin's
    key gets it: the explanation names channels, which developers are not shown anywhere."""
    value = req.headers.get(DEBUG_HEADER)
    return value is not None and key.owner_is_admin and "route" in value.lower()


def route_header(explanation: list[str]) -> tuple[bytes, bytes]:
    text = "; ".join(explanation).replace("\r", " ").replace("\n", " ")
    return ROUTE_HEADER, text[:4000].encode("ascii", "replace")


def attempt_note(a: Attempt) -> str:
    return lines.FAILOVER % {"error": a.status or a.error, "channel": a.channel_name}


# The call the running request opened (admission sets it): `asgi.handle` fails a call an error
# left open, without the request pointing back at its call. One per task (uvicorn runs each
# request in a task of its own).
current: contextvars.ContextVar[Call | None] = contextvars.ContextVar("gateway_call", default=None)


def opened() -> Call | None:
    """The call this request opened, if admission got that far."""
    return current.get()


class Call:
    """One admitted request: what it reserved, where it went, and its record when it ends.

    `routes` are the ones routing selected (`catalog.select_routes`); `explanation` says why, and
    `forward` adds the failovers and where it went."""

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
        selection: Selection,
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
        self.routes = selection.routes
        self.explanation = selection.explanation
        self._kept_local = selection.kept_local
        self.debug_route = wants_route_header(req, key)
        self.channel_id: int | None = None
        self.route: RouteInfo | None = None  # the route that served the call (its price is the cost's)
        self.ttft_ms: float | None = None
        self.cold_start_ms: float | None = None  # waited for its on-demand model to start (`gateway.ondemand`)
        self.upstream_request_id = ""
        self.finished = False
        self.usage: Usage | None = None  # what finish() recorded
        self.max_tokens: int | None = None  # what the reservation allows; a stream is cut past it
        self.choices = 1  # the outputs generated (`chat.generations`): the reservation is per choice
        self.choice = balance.Choice()  # the balancing's session, pick and reason (`catalog.ordered_routes`)
        self._busy: int | None = None  # the channel this call counts as in flight on (`balance.load`)
        # The on-demand models it is counted in flight on (`ondemand.counted`), until it finishes.
        self.on_demand: list[ModelInfo] = []
        # The whole call's deadline (event-loop clock): failover and relay stop there.
        self.deadline = asyncio.get_running_loop().time() + float(hot.GATEWAY_TOTAL_TIMEOUT)
        # What the client was sent, for a key whose request logs are on (None: not logged).
        self.logged: list[bytes] | None = [] if key.payload_days is not None else None
        self.logged_size = 0
        self.logged_sse = False  # what was kept is SSE (the writer assembles its text)

    @property
    def rate_headers(self) -> list[tuple[bytes, bytes]]:
        return self.admission.headers

    @property
    def response_headers(self) -> list[tuple[bytes, bytes]]:
        """The rate-limit headers, plus `X-Portal-Route` when the client asked for it."""
        if self.debug_route:
            return [*self.admission.headers, route_header(self.explanation)]
        return self.admission.headers

    async def forward(self, plan: Plan) -> UpstreamResponse:
        """Send the call along `plan`; a failure of every route fails the call and is raised.
        A client that leaves meanwhile cancels the upstream call (its generation stops) and the
        record says `client disconnected` (499); one the gateway's shutdown cuts is `interrupted`
        (503). Either is charged what the upstream generated of an answer being assembled (as
        `relay` charges a stream's)."""
        current = asyncio.current_task()
        gone = False
        assembling: list[tuple[RouteInfo, Assembly]] = []

        async def watch() -> None:
            nonlocal gone
            while (await self.req.receive())["type"] != "http.disconnect":
                pass
            gone = True
            if current is not None:
                current.cancel()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            if not plan.routes:
                raise GatewayError(503, f"No channel serves the model '{self.model.name}' this way.", code="no_channel")
            self._busy = first = plan.routes[0].channel_id
            balance.load.begin(first)
            up = await send_upstream(
                plan,
                stream=self.stream,
                deadline=self.deadline,
                prompt_tokens=self.prompt_estimate,
                limit=self.max_tokens,
                choices=self.choices,
                assembling=assembling,
            )
        except asyncio.CancelledError:
            used = None
            if assembling:  # the upstream was answering: priced at its route, as a stream is
                self.route, assembly = assembling[-1]
                self.channel_id = self.route.channel_id
                used = so_far(assembly.usage, self.prompt_estimate, assembly.tokens)
            if not gone:  # the server's shutdown cut the call (`asgi.handle` answers it)
                self.finish(used, status=UsageStatus.INTERRUPTED, http_status=503, error=SHUTDOWN)
                raise
            if current is not None:
                current.uncancel()
            err = GatewayError(499, "client disconnected", code="client_disconnected")
            self.finish(used, status=UsageStatus.CLIENT_DISCONNECTED, http_status=499, error=err.message)
            raise err from None
        except GatewayError as exc:
            if exc.attempts:
                self.channel_id = exc.attempts[-1].channel_id
            self.explanation += [attempt_note(a) for a in exc.attempts]
            self.explanation.append(lines.ALL_FAILED)
            if self._kept_local:
                exc.message += " External channels were not tried: this request is restricted to local channels."
            # (the error's answer fails the call, `asgi.handle` or the surface's own: the record
            # then has the status the client got, e.g. Messages' 529 for an overloaded upstream)
            raise
        finally:
            watcher.cancel()
        self.channel_id = served = up.route.channel_id
        self.route = up.route
        self.upstream_request_id = up.upstream_request_id
        if up.first_at is not None:  # time to the first token, streamed to the client or assembled
            self.ttft_ms = (up.first_at - self.started) * 1000
        if served != first:  # failed over: the load moves with the call
            balance.load.end(first)
            balance.load.begin(served)
            self._busy = served
        balance.load.observe(served, up.ttfb_ms)
        balance.settled(process.limiter.redis if process.limiter else None, self.model.id, self.choice, served)
        self.channel_id = up.route.channel_id
        self.explanation += [attempt_note(a) for a in up.attempts]
        sent = lines.SENT_TARGET if self.model.is_alias else lines.SENT
        self.explanation.append(sent % {"channel": up.route.channel_name, "model": up.route.model_name})
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
        if self._busy is not None:
            balance.load.end(self._busy)
            self._busy = None
        for target in self.on_demand:
            assert target.on_demand is not None
            # A use of the model: sent there, or (not an alias) meant for it.
            used = not self.model.is_alias or (self.route is not None and self.route.model_name == target.name)
            ondemand_ended(target.on_demand.deployment_id, self.request_id, used=used)
        usage, flag = self.bounded(usage or Usage(0, 0))
        self.usage = usage
        if flag:
            error = f"{error}; {flag}" if error else flag
        cost, pricing = self.cost(usage)
        if process.limiter is not None:
            process.limiter.settle(self.admission, usage.total, cost or 0)
        process.usage.record(
            UsageEvent(
                created=dt.datetime.now(dt.UTC),
                request_id=self.request_id,
                upstream_request_id=self.upstream_request_id,
                key_id=self.key.id,
                user_id=self.key.owner_id,
                team_id=self.key.team_id,
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
                cached_tokens=usage.cached_tokens,
                cache_creation_tokens=usage.cache_creation_tokens,
                route_explanation=self.explanation,
                cold_start_ms=self.cold_start_ms,
                cost_nanos=cost,
                pricing=pricing,
            )
        )
        if self.logged is not None:
            process.payloads.record(self._captured(status, http_status))

    def cost(self, usage: Usage) -> tuple[int | None, str]:
        """What the call cost (nano-units; None: its route has no price) from the served route's
        price in effect now, cached and cache-written prompt tokens at their own prices."""
        if usage.total == 0 or self.route is None:
            return 0, Pricing.PRICED
        rates, pricing = self.route.rates(time.time())
        if rates is None:
            return None, pricing
        return rates.cost(
            usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.cache_creation_tokens
        ), pricing

    def bounded(self, usage: Usage) -> tuple[Usage, str]:
        """Usage as charged: an upstream's report is bounded by what was sent (the prompt cannot
        hold more tokens than its bytes, plus room for templates and images) and what was
        reserved (max_tokens per choice). An implausible report is charged at the bounds, recorded
        as estimated, and flagged in the record's error (empty when plausible)."""
        received = self.req.received
        prompt_cap = len(received) + 4096 * (1 + received.count(b"image")) + self.prompt_estimate
        output_cap = None if self.max_tokens is None else self.max_tokens * self.choices
        prompt, completion = usage.prompt_tokens, usage.completion_tokens
        if prompt <= prompt_cap and (output_cap is None or completion <= output_cap) and prompt >= 0 <= completion:
            return usage, ""
        bounded_prompt = max(0, min(prompt, prompt_cap))
        bounded_completion = max(0, completion if output_cap is None else min(completion, output_cap))
        logger.warning(
            "channel %s reported implausible usage %s+%s; charged %s+%s",
            self.channel_id,
            prompt,
            completion,
            bounded_prompt,
            bounded_completion,
        )
        charged = Usage(
            bounded_prompt,
            bounded_completion,
            estimated=True,
            cached_tokens=min(max(usage.cached_tokens, 0), bounded_prompt),
            cache_creation_tokens=min(max(usage.cache_creation_tokens, 0), bounded_prompt),
        )
        flag = f"implausible upstream usage {prompt}+{completion} tokens, charged {bounded_prompt}+{bounded_completion}"
        return charged, flag[:200]

    def log_response(self, data: bytes, *, sse: bool = False) -> None:
        """Keep `data` (sent to the client) for the request log, up to its bound."""
        assert self.logged is not None
        self.logged_sse = sse
        cap = max_bytes() * (RAW_STREAM_FACTOR if sse else 1)
        if self.logged_size < cap:
            self.logged.append(data[: cap - self.logged_size])
        self.logged_size += len(data)

    def _captured(self, status: str, http_status: int) -> Captured:
        """This call for the request log; redacted and stored by the payload writer's thread."""
        assert self.logged is not None and self.key.payload_days is not None
        cap = max_bytes()
        request = self.req.received
        response = b"".join(self.logged)
        return Captured(
            created=dt.datetime.now(dt.UTC),
            request_id=self.request_id,
            key_id=self.key.id,
            user_id=self.key.owner_id,
            model=self.model.name,
            surface=self.surface,
            stream=self.stream,
            status=status,
            http_status=http_status,
            retention_days=self.key.payload_days,
            request=request[:cap],
            response=response if self.logged_sse else response[:cap],
            request_bytes=len(request),
            response_bytes=self.logged_size,
            truncated=len(request) > cap
            or len(response) < self.logged_size
            or (not self.logged_sse and len(response) > cap),
            sse=self.logged_sse,
        )

    def fail(self, exc: GatewayError) -> None:
        """Finish a call that ended in an error before any upstream tokens."""
        upstream = exc.status >= 500 or (exc.code or "").startswith("upstream")
        status = UsageStatus.UPSTREAM_ERROR if upstream else UsageStatus.CLIENT_ERROR
        if self.debug_route and not self.finished:
            exc.headers.append(route_header(self.explanation))
        self.finish(None, status=status, http_status=exc.status, error=exc.message)

    async def send_json(self, status: int, body: bytes, usage: Usage | None, content_type: bytes | None = None) -> None:
        """Send a complete JSON answer, then finish the call."""
        if self.ttft_ms is None:
            self.ttft_ms = (time.perf_counter() - self.started) * 1000
        if self.logged is not None:
            self.log_response(body)
        try:
            await send_bytes(self.req.send, status, body, self.response_headers, content_type)
        finally:
            ok = status < 400
            self.finish(
                usage,
                status=UsageStatus.OK if ok else UsageStatus.CLIENT_ERROR,
                http_status=status,
                error="" if ok else body[:300].decode(errors="replace"),
            )
