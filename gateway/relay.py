"""Request stage 5 for streams: relay an upstream SSE stream to the client, event by event,
through the surface's `Dialect`.

A JSON answer goes out whole with `Call.send_json`; a stream goes through `relay`, which never
buffers beyond one read, keeps a quiet stream alive, notices a client that leaves (the upstream
connection is closed at once: generation stops), bounds each gap between the upstream's events
(GATEWAY_IDLE_TIMEOUT) and the whole call (GATEWAY_TOTAL_TIMEOUT), and finishes the call with the
usage it saw (or its estimate).

A `Dialect` is how one surface reads an upstream stream and writes its client's: it passes each
upstream event on (as is, stripped, or translated), keeps the usage and the output tokens per
choice, says when the reservation is used up (`done`) and whether the upstream's stream reached
its own end (`complete`: a stream that stops before it is an error, not an answer), and renders
the end and an error in the client's API. Chat ↔ Chat is `ChatDialect`; the other surfaces add
their own (`surfaces/translated.py`: Chat chunks → Messages / Responses events; a native
channel's events as they came, `MessagesDialect`, `ResponsesDialect`; Messages events → Chat
chunks, `AnthropicChatDialect`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Protocol

import orjson
from django.conf import settings

from channels.health import passive
from keys.choices import UsageStatus

from .call import Call, StreamWaits, TooLarge, UpstreamResponse, drain, recount
from .chunks import ChunkReader, delta_has_output, event_data, split_events
from .errors import SHUTDOWN, Failure, GatewayError, UpstreamStreamError
from .http import SSE_HEADERS, sse_error_event
from .usage import Usage, so_far, usage_from

logger = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0


class Dialect(Protocol):
    """One surface's stream (see the module docstring). `feed` may raise UpstreamStreamError (an
    upstream error event or invalid JSON): the relay then sends `error(...)` of its own making,
    never the upstream's text."""

    @property
    def usage(self) -> Usage | None:
        """What the upstream reported so far, None when it reported nothing."""

    @property
    def tokens(self) -> int:
        """Output events seen (the completion estimate when the upstream reports no usage)."""

    @property
    def done(self) -> bool:
        """The reservation is used up on every choice: stop reading, close the upstream."""

    @property
    def complete(self) -> bool:
        """The upstream's stream reached its own last event (`message_stop`, `response.completed`)."""

    def feed(self, event: bytes) -> bytes:
        """The bytes to send for one upstream SSE event (b"" for none)."""

    def close(self, usage: Usage) -> bytes:
        """The last bytes, once the upstream ended or was cut (`usage` is what the call settles on)."""

    def error(self, err: GatewayError) -> bytes:
        """The error event(s) ending a stream that failed after its first byte."""


def sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class ReadsChunks:
    """A dialect whose upstream speaks Chat chunks, read by a `ChunkReader` (usage, tokens, the cut
    at the reservation): the Dialect attributes come from the reader."""

    __slots__ = ()
    reader: ChunkReader

    @property
    def usage(self) -> Usage | None:
        return usage_from(self.reader.usage)

    @property
    def tokens(self) -> int:
        return self.reader.tokens

    @property
    def done(self) -> bool:
        return self.reader.done

    @property
    def complete(self) -> bool:
        return self.reader.ended  # `[DONE]` seen: a stream closed before it is incomplete


def model_renames(upstream: object, public: str) -> tuple[tuple[bytes, bytes], ...]:
    """What puts the model's public name in an answer's `"model"` in place of the upstream's id
    (llama.cpp's is the path of the weights on its host, `/models/qwen3-q4_k_m.gguf`, when it was
    started without an alias; a client asked for the public name, and the translated surfaces
    answer with it): the member as JSON writes it, with and without a space after the colon
    (Python's `json`, as some servers use). Bytes, so a relayed event stays as it came but for
    that; nothing when the upstream's id is the name, or not a string."""
    if not public or not isinstance(upstream, str) or upstream == public:
        return ()
    old, new = orjson.dumps(upstream), orjson.dumps(public)
    return ((b'"model":' + old, b'"model":' + new), (b'"model": ' + old, b'"model": ' + new))


def renamed(out: bytes, renames: tuple[tuple[bytes, bytes], ...] | None) -> bytes:
    """`out` with the public name in the upstream's id's place (the pairs `model_renames` gives)."""
    for upstream, public in renames or ():
        out = out.replace(upstream, public)
    return out


# What a usage chunk of the gateway's own repeats of the stream's first chunk.
USAGE_CHUNK_FIELDS = ("id", "object", "created", "model", "system_fingerprint")


class ChatDialect(ReadsChunks):
    """Chat Completions (and legacy Completions) relayed to a client of the same API: events go
    out byte for byte, minus what the gateway asked for on its own behalf (the usage chunk and the
    `"usage":null` of every chunk, for a client that did not ask for usage) and with the model's
    public name in place of the upstream's id; a choice that passes its reservation ends there
    with finish reason `length`."""

    __slots__ = ("model", "reader", "rename", "renames", "wants_usage", "withheld")

    def __init__(self, limit: int | None, *, choices: int = 1, wants_usage: bool = False, model: str = "") -> None:
        self.reader = ChunkReader(limit, choices)
        self.wants_usage = wants_usage
        self.withheld = False  # a usage the upstream put on one choice's chunk: ours goes out at the end
        self.model = model  # the public name, in place of the upstream's (`renames`)
        self.renames: tuple[tuple[bytes, bytes], ...] | None = None  # known from the first chunk
        self.rename: tuple[bytes, bytes] | None = None  # the one of them the upstream's events hold

    def feed(self, event: bytes) -> bytes:
        reader = self.reader
        if reader.choices == 1 and not reader.cut and event.startswith(b"data: {"):
            # The common event (one choice, text or a role, no usage): parsed once (junk is an
            # error), counted, passed on as it came. Everything else is read in full below.
            try:
                chunk = orjson.loads(event[6:])
            except orjson.JSONDecodeError:
                raise UpstreamStreamError(Failure.INVALID_JSON) from None
            choices = chunk.get("choices") if type(chunk) is dict else None
            if (
                choices
                and len(choices) == 1
                and type(choices[0]) is dict
                and choices[0].get("index", 0) == 0
                and chunk.get("usage") is None
                and "error" not in chunk
            ):
                if reader.first is None:  # (its id, model… for a usage chunk of ours, `close`)
                    reader.first = chunk
                    self._learn_renames(event)
                if delta_has_output(choices[0]):
                    seen = reader.counts.get(0, 0) + 1
                    if reader.limit is not None and seen > reader.limit:
                        return self._slow(event)  # the cut: the full path ends the choice
                    reader.counts[0] = seen
                if not self.wants_usage and "usage" in chunk:
                    event = event.replace(b',"usage":null', b"").replace(b', "usage": null', b"")
                rename = self.rename
                return event if rename is None else event.replace(*rename)
        return self._slow(event)

    def _learn_renames(self, event: bytes) -> None:
        """What puts the public name in place of the upstream's id (`model_renames`), once the first
        chunk is known; the common event's one `replace` is the form its `event` holds."""
        first = self.reader.first or {}
        self.renames = renames = model_renames(first.get("model"), self.model)
        self.rename = next((pair for pair in renames if event.find(pair[0]) >= 0), None)

    def _slow(self, event: bytes) -> bytes:
        data = event_data(event)
        if data is None:
            return b""  # comments: the relay sends its own keep-alives
        reader = self.reader
        chunk, closing = reader.read(data)
        if self.renames is None and reader.first is not None:
            self._learn_renames(event)
        out = b""
        if chunk is not None:
            if chunk.get("usage") is not None and not self.wants_usage:
                if chunk.get("choices"):  # usage on a content chunk (continuous usage): strip it
                    out = sse({k: v for k, v in chunk.items() if k != "usage"})
            elif chunk.get("usage") is not None and reader.choices > 1:
                # Several prompts or choices (llama.cpp puts each one's usage on its finish, or on a
                # chunk after it): the client gets the request's total once, on a chunk of its own at
                # the end, as OpenAI sends it (`close`).
                if chunk.get("choices"):
                    out = sse({k: v for k, v in chunk.items() if k != "usage"})
                self.withheld = True
            else:
                out = sse(chunk) if reader.changed else event
                if not self.wants_usage and out.find(b'"usage"') >= 0:
                    out = out.replace(b',"usage":null', b"").replace(b', "usage": null', b"")
        for ended in closing:
            out += sse(ended)
        return renamed(out, self.renames)  # (events of ours are written without a space)

    def close(self, usage: Usage) -> bytes:
        """`[DONE]`, after the usage chunk a client that asked for usage did not get from the
        upstream: the stream was cut at the reservation before it, the upstream sent none, or it
        sent each prompt's own (`withheld`), so it gets the usage as charged."""
        reader = self.reader
        if not self.wants_usage or (reader.usage is not None and not reader.done and not self.withheld):
            return b"data: [DONE]\n\n"
        first = reader.first or {}
        chunk: dict[str, Any] = {k: first[k] for k in USAGE_CHUNK_FIELDS if k in first}
        if self.model and "model" in chunk:
            chunk["model"] = self.model
        chunk["choices"] = []
        chunk["usage"] = usage.as_chat()
        return sse(chunk) + b"data: [DONE]\n\n"

    def error(self, err: GatewayError) -> bytes:
        return sse_error_event(err)


def stream_failure(call: Call, failure: Failure) -> GatewayError:
    """Our own error for a stream that broke after its first byte: a generic message with our
    request id, never the upstream's text (which can carry anything, even the channel's key)."""
    if failure == Failure.IDLE_TIMEOUT:
        seconds = float(settings.GATEWAY_IDLE_TIMEOUT)
        message = f"The upstream went silent mid-answer for GATEWAY_IDLE_TIMEOUT ({seconds:g} s)"
        status, code = 504, "upstream_timeout"
    elif failure == Failure.DEADLINE:
        message = "The answer took longer than this gateway allows (GATEWAY_TOTAL_TIMEOUT)"
        status, code = 504, "deadline"
    elif failure == Failure.TRUNCATED:
        message = "The upstream ended the stream before the answer was complete"
        status, code = 502, "upstream_truncated"
    elif failure == Failure.TOO_LARGE:
        message = f"The upstream's answer passed {int(settings.GATEWAY_MAX_RESPONSE_BYTES)} bytes"
        status, code = 502, "upstream_too_large"
    else:
        message = "The upstream failed while streaming"
        status, code = 502, "upstream_stream_error"
    return GatewayError(status, f"{message}; the answer is incomplete (request {call.request_id}).", code=code)


async def relay(call: Call, up: UpstreamResponse, dialect: Dialect) -> None:
    """Relay `up` to the client through `dialect` and finish `call`. Each wait for the upstream's
    next piece is bounded by GATEWAY_IDLE_TIMEOUT (and the call's deadline), a send to the client
    is not (a slow client is not an idle upstream): `call.StreamWaits`."""
    send = call.req.send
    receive = call.req.receive
    loop = asyncio.get_running_loop()
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + call.response_headers})
    current = asyncio.current_task()
    assert current is not None
    disconnected = False
    last_sent = loop.time()
    waits_for = StreamWaits()

    async def watch() -> None:
        """Notice a client that leaves, and keep a quiet stream alive: an SSE comment after
        KEEPALIVE_SECONDS without a byte, so proxies and clients do not time out while a long
        prompt is processed upstream."""
        nonlocal disconnected
        while True:
            try:
                message = await asyncio.wait_for(receive(), KEEPALIVE_SECONDS)
            except TimeoutError:
                if loop.time() - last_sent >= KEEPALIVE_SECONDS:
                    await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})
                continue
            if message["type"] == "http.disconnect":
                disconnected = True
                current.cancel()
                return

    watcher = loop.create_task(watch())
    status, http_status, error = UsageStatus.OK, 200, ""
    failed: GatewayError | None = None
    buffer = b""
    chunk = up.first_chunk
    content = up.response.content if up.response is not None else None
    cap = int(settings.GATEWAY_MAX_RESPONSE_BYTES)
    idle = float(settings.GATEWAY_IDLE_TIMEOUT)
    deadline = call.deadline
    relayed = 0
    try:
        while chunk:
            relayed += len(chunk)
            if relayed > cap:
                raise TooLarge
            events, buffer = split_events(buffer + chunk)
            parts = []
            broken: Exception | None = None
            for event in events:
                try:
                    parts.append(dialect.feed(event))
                except Exception as exc:  # (the events before it, read with it, still go out first)
                    broken = exc
                    break
                if dialect.done:  # nothing past the reservation, not even a usage chunk
                    break
            out = b"".join(parts)
            if out:
                if call.ttft_ms is None:
                    call.ttft_ms = (time.perf_counter() - call.started) * 1000
                await send({"type": "http.response.body", "body": out, "more_body": True})
                last_sent = loop.time()
                if call.logged is not None:
                    call.log_response(out, sse=True)
            if broken is not None:
                raise broken
            if dialect.done:
                break
            if content is None:
                break
            chunk = drain(content)  # what already arrived needs no deadline (nor its cost)
            if not chunk and not content.at_eof():
                until = loop.time() + idle
                chunk = await waits_for.read(content, until if until < deadline else deadline)
        if not dialect.done and not dialect.complete:
            raise UpstreamStreamError(Failure.TRUNCATED)  # closed before its last event: incomplete
        if dialect.done:
            up.close()  # the upstream ignores max_tokens: what the key reserved is all it gets
            logger.info(
                "upstream %s passed max_tokens=%s; the stream was cut there", up.route.channel_name, call.max_tokens
            )
            error = f"cut at max_tokens ({call.max_tokens})"
        else:
            up.release()
    except asyncio.CancelledError:
        up.close()
        if not disconnected:  # cancelled by the server (shutdown): the answer is incomplete
            status, http_status, error = UsageStatus.INTERRUPTED, 503, SHUTDOWN
            failed = GatewayError(
                503,
                f"The gateway is shutting down; the answer is incomplete (request {call.request_id}).",
                code="shutdown",
            )
            with contextlib.suppress(Exception):  # the connection may be gone already
                await _finish(call, up, dialect, status, http_status, error, failed, disconnected)
            call.finish(None, status=status, http_status=http_status, error=error)  # no-op once finished
            raise
        current.uncancel()
        status, http_status, error = UsageStatus.CLIENT_DISCONNECTED, 499, "client disconnected"
    except Exception as exc:  # the upstream died, timed out, sent junk or too much mid-stream
        up.close()
        if isinstance(exc, TooLarge):
            failure = Failure.TOO_LARGE
        elif isinstance(exc, TimeoutError):
            failure = Failure.DEADLINE if loop.time() >= call.deadline else Failure.IDLE_TIMEOUT
        elif isinstance(exc, UpstreamStreamError):
            failure = exc.failure
        else:
            failure = Failure.PROTOCOL
        logger.info("upstream %s failed mid-stream (%s): %r", up.route.channel_name, failure, exc)
        if failure != Failure.DEADLINE:
            passive.report(up.route.channel_id, False, error=failure)  # evidence for the health window
        failed = stream_failure(call, failure)
        status, http_status, error = UsageStatus.UPSTREAM_ERROR, failed.status, f"{failure}: {failed.message}"
    finally:
        watcher.cancel()
        waits_for.close()
    await _finish(call, up, dialect, status, http_status, error, failed, disconnected)


async def _finish(
    call: Call,
    up: UpstreamResponse,
    dialect: Dialect,
    status: str,
    http_status: int,
    error: str,
    failed: GatewayError | None,
    disconnected: bool,
) -> None:
    reported = dialect.usage
    usage = so_far(reported, call.prompt_estimate, dialect.tokens)
    if reported is None and status == UsageStatus.OK and not disconnected:
        try:  # the upstream reported none: its own tokenizer counts the prompt (bounded)
            usage = await recount(up, usage)
        except BaseException:
            call.finish(usage, status=status, http_status=http_status, error=error)
            raise
    call.finish(usage, status=status, http_status=http_status, error=error)  # before any await
    if disconnected:
        return
    tail = dialect.error(failed) if failed is not None else dialect.close(call.usage or usage)
    await call.req.send({"type": "http.response.body", "body": tail, "more_body": False})
