"""A request's body must arrive within PORTAL_BODY_TIMEOUT seconds, on every path (gateway and
Django alike): a client that sends its headers and then nothing, or trickles, gets 408 instead of
holding a connection and a task forever. ASGI middleware, in front of both apps (`portal.asgi`)."""

from __future__ import annotations

import asyncio
from typing import Any

from portal.hot import hot

REQUEST_ID_KEY = "portal.request_id"  # the request's `x-request-id`, in its scope (set by the gateway)

BODY_TIMEOUT_ANSWER = (
    b'{"error":{"message":"The request body did not arrive in time (PORTAL_BODY_TIMEOUT).",'
    b'"type":"invalid_request_error","code":"request_timeout","param":null}}'
)


async def _receive_within(receive: Any, until: float) -> dict[str, Any] | None:
    """`receive()` bounded by `until` (event-loop clock); None when it passed."""
    try:
        async with asyncio.timeout_at(until):
            message: dict[str, Any] = await receive()
            return message
    except TimeoutError:
        return None


class BodyDeadline:
    """Bounds the time to receive a request's whole body; then steps aside (a streamed answer's
    disconnect watch is not timed). A late body looks like a client that left to the app, and the
    client gets 408 when nothing was answered yet."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + float(hot.PORTAL_BODY_TIMEOUT)
        complete = False
        timed_out = False
        # One timer per request, armed at the first wait for the body and cancelled when the body is
        # complete: an `asyncio.timeout_at` around each wait cost ~27 k instructions a request.
        # When it fires during a wait, it cancels the waiting task (as `timeout_at` would).
        timer: asyncio.TimerHandle | None = None
        waiter: asyncio.Task[Any] | None = None  # the task waiting in `timed_receive`, while it waits
        expired = False

        def deadline() -> None:
            nonlocal timer, expired
            timer = None
            if waiter is not None:
                expired = True
                waiter.cancel()

        async def timed_receive() -> dict[str, Any]:
            nonlocal complete, timed_out, timer, waiter, expired
            if complete:
                return await receive()
            task = asyncio.current_task()
            if waiter is not None or task is None or loop.time() >= until:
                message = await _receive_within(receive, until)  # a second concurrent wait, or late
                if message is None:
                    timed_out = complete = True
                    return {"type": "http.disconnect"}
            else:
                if timer is None:
                    timer = loop.call_at(until, deadline)
                cancelling = task.cancelling()
                waiter = task
                try:
                    message = await receive()
                except asyncio.CancelledError:
                    if expired and task.uncancel() <= cancelling:
                        timed_out = complete = True
                        return {"type": "http.disconnect"}
                    raise
                finally:
                    waiter = None
                    expired = False
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
                if timer is not None:
                    timer.cancel()
                    timer = None
            return message

        try:
            await self.app(scope, timed_receive, send)
        except asyncio.CancelledError:
            if not timed_out:
                raise
        finally:
            if timer is not None:  # the app answered without reading the whole body
                timer.cancel()
        if timed_out:  # the app was still reading the body: it has not answered
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(BODY_TIMEOUT_ANSWER)).encode()),
                (b"connection", b"close"),
            ]
            if (request_id := scope.get(REQUEST_ID_KEY)) is not None:  # the gateway's, as on its answers
                headers.append((b"x-request-id", request_id))
            await send({"type": "http.response.start", "status": 408, "headers": headers})
            await send({"type": "http.response.body", "body": BODY_TIMEOUT_ANSWER})
