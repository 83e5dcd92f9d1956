"""Request stage 5 for streams: relay an upstream SSE stream to the client, event by event.

A JSON answer goes out whole with `Call.send_json`; a stream goes through `relay_sse`, which
never buffers beyond one event, handles client disconnects and upstream death, and finishes the
call with the usage it saw (or its estimate).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import orjson
from django.conf import settings

from channels.health import passive
from keys.choices import UsageStatus

from .call import Call, TooLarge, UpstreamResponse, recount
from .http import SSE_HEADERS, GatewayError, sse_error_event
from .translate.common import answer_usage
from .usage import Usage, usage_from

logger = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0
# Content events counted as tokens may include one that is not (a role chunk with text): a stream
# is cut only this far past its max_tokens.
CUT_SLACK = 1


async def relay_sse(
    call: Call,
    up: UpstreamResponse,
    *,
    on_event: Callable[[bytes], bytes | None] | None = None,
    client_wants_usage: bool = False,
    epilogue: Callable[[Usage | None], bytes] | None = None,
    on_error: Callable[[GatewayError], bytes] | None = None,
    usage_of_event: Callable[[bytes, Usage | None], Usage | None] | None = None,
) -> None:
    """Relay `up` to the client and finish `call`.

    Usage comes from the upstream's usage chunk (which we always ask for); the chunk is dropped
    for clients that did not ask for it. Without one, completion tokens are counted as the
    content-bearing events and the record is marked estimated. A client disconnect closes the
    upstream; an upstream failure becomes an SSE error event. `on_event` (for translating
    surfaces) gets each raw event (`data: …`) and returns the bytes to send or None;
    `on_error` renders an upstream failure in the client's API (default: an OpenAI `data:`
    error event); `usage_of_event(event, usage_so_far)` reads usage from a non-Chat upstream
    stream (Anthropic splits it between `message_start` and `message_delta`).
    """
    send = call.req.send
    receive = call.req.receive
    loop = asyncio.get_running_loop()
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + call.response_headers})
    current = asyncio.current_task()
    disconnected = False

    last_sent = loop.time()

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
                if current is not None:
                    current.cancel()
                return

    watcher = loop.create_task(watch())
    usage: Usage | None = None
    content_events = 0
    status, http_status, error = UsageStatus.OK, 200, ""
    buffer = b""
    chunk = up.first_chunk
    content = up.response.content if up.response is not None else None
    limit = call.max_tokens
    cap = int(settings.GATEWAY_MAX_RESPONSE_BYTES)
    relayed = 0
    cut = False
    try:
        async with asyncio.timeout_at(call.deadline):
            while chunk and not cut:
                relayed += len(chunk)
                if relayed > cap:
                    raise TooLarge
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
                        if limit is not None and content_events > limit + CUT_SLACK:
                            # The upstream ignores max_tokens: what the key reserved is all it gets.
                            cut = True
                            break
                    if on_event is not None:
                        translated = on_event(event)
                        if translated is None:
                            continue
                        event = translated
                    out.append(event)
                if out:
                    if call.ttft_ms is None:
                        call.ttft_ms = (time.perf_counter() - call.started) * 1000
                    body = b"".join(out)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                    last_sent = loop.time()
                    if call.logged is not None:
                        call.log_response(body, sse=True)
                if not cut:
                    chunk = await content.readany() if content is not None else b""
            if cut:
                up.close()
                logger.info("upstream %s ignored max_tokens=%s; the stream was cut there", up.route.channel_name, limit)
                usage = Usage(call.prompt_estimate, content_events - 1, estimated=True)  # the event not sent
                status, error = UsageStatus.OK, f"cut at max_tokens ({limit})"
                if epilogue is None and on_event is None:
                    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
            else:
                if buffer.strip():
                    await send({"type": "http.response.body", "body": buffer, "more_body": True})
                up.release()
    except asyncio.CancelledError:
        up.close()
        if not disconnected:  # cancelled by the server (shutdown): the answer is incomplete
            status, http_status, error = UsageStatus.INTERRUPTED, 503, "interrupted by the gateway's shutdown"
            raise
        if current is not None:
            current.uncancel()
        status, http_status, error = UsageStatus.CLIENT_DISCONNECTED, 499, "client disconnected"
    except Exception as exc:  # the upstream died, timed out or sent too much mid-stream
        up.close()
        logger.info("upstream %s failed mid-stream: %r", up.route.channel_name, exc)
        status, http_status = UsageStatus.UPSTREAM_ERROR, 502
        if isinstance(exc, TooLarge):
            error = f"upstream sent more than {cap} bytes"
            err = GatewayError(502, f"The upstream's answer passed {cap} bytes; it was cut.", code="upstream_too_large")
        elif isinstance(exc, TimeoutError) and loop.time() >= call.deadline:
            error = "the request passed its total deadline"
            err = GatewayError(
                504, "The answer took longer than this gateway allows (GATEWAY_TOTAL_TIMEOUT).", code="deadline"
            )
        else:
            kind = "timeout" if isinstance(exc, TimeoutError) else "protocol"
            passive.report(up.route.channel_id, False, error=kind)  # evidence for the health window
            error = f"upstream failed mid-stream ({exc.__class__.__name__})"
            err = GatewayError(
                502, "The upstream failed while streaming; the answer is incomplete.", code="upstream_stream_error"
            )
        body = on_error(err) if on_error is not None else sse_error_event(err)
        await send({"type": "http.response.body", "body": body, "more_body": True})
    finally:
        watcher.cancel()
        if usage is None:
            usage = Usage(call.prompt_estimate, content_events, estimated=True)
            if status == UsageStatus.OK and not disconnected:
                try:  # the upstream reported none: its own tokenizer counts the prompt (bounded)
                    usage = await recount(up, usage)
                except BaseException:
                    call.finish(usage, status=status, http_status=http_status, error=error)
                    raise
        call.finish(usage, status=status, http_status=http_status, error=error)  # before any await
        if not disconnected:
            tail = epilogue(usage) if epilogue is not None else b""
            await send({"type": "http.response.body", "body": tail, "more_body": False})


def _event_usage(event: bytes) -> Usage | None:
    start = event.find(b"{")
    if start < 0:
        return None
    try:
        data = orjson.loads(event[start:].strip())
    except orjson.JSONDecodeError:
        return None
    return usage_from(answer_usage(data))


def _has_content(event: bytes) -> bool:
    """Does this SSE event carry generated text or tool arguments? (one event ≈ one token)"""
    if b'"arguments"' in event:
        return True
    if b'"content"' in event or b'"text"' in event:
        return not (
            b'"content":""' in event
            or b'"content": ""' in event
            or b'"content":null' in event
            or b'"content": null' in event
            or b'"text":""' in event
            or b'"text": ""' in event
        )
    return False
