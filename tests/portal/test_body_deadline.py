"""`BodyDeadline` in-process: one timer per request bounds the waits for the body, cancelled once it
is complete; a wait past it is a disconnect to the app and a 408 to the client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from portal.body_deadline import BodyDeadline

SCOPE = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}


def run(app: Any, messages: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Drive `BodyDeadline(app)`; None in `messages` is a receive that never answers."""
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            message = queue.pop(0) if queue else None
            if message is None:
                await asyncio.Event().wait()  # never
            assert message is not None
            return message

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await BodyDeadline(app)(SCOPE, receive, send)
        # nothing of the request's is left scheduled on the loop (the timer was cancelled)
        assert not [h for h in asyncio.get_running_loop()._scheduled if not h.cancelled()]  # type: ignore[attr-defined]

    asyncio.run(main())
    return sent


async def _answer(send: Any, got: list[dict[str, Any]]) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": repr([m["type"] for m in got]).encode()})


@pytest.fixture(autouse=True)
def short_deadline(settings):
    settings.PORTAL_BODY_TIMEOUT = 0.05


def test_a_body_that_arrives_is_passed_on_and_the_timer_is_cancelled():
    async def app(scope: Any, receive: Any, send: Any) -> None:
        got = [await receive(), await receive()]
        await _answer(send, got)

    sent = run(app, [{"type": "http.request", "body": b"{}", "more_body": True}, {"type": "http.request", "body": b""}])
    assert sent[0]["status"] == 200 and sent[1]["body"] == b"['http.request', 'http.request']"


def test_a_body_that_stops_arriving_is_a_disconnect_to_the_app_and_408_to_the_client():
    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(await receive())
        seen.append(await receive())  # never comes: the deadline answers it

    sent = run(app, [{"type": "http.request", "body": b"{", "more_body": True}, None])
    assert [m["type"] for m in seen] == ["http.request", "http.disconnect"]
    assert sent[0]["status"] == 408 and b"request_timeout" in sent[1]["body"]


def test_an_app_that_waits_past_the_deadline_before_reading_is_answered_by_a_bounded_wait():
    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(await receive())
        await asyncio.sleep(0.1)  # the timer fires while nobody waits for the body
        seen.append(await receive())

    sent = run(app, [{"type": "http.request", "body": b"{", "more_body": True}, None])
    assert [m["type"] for m in seen] == ["http.request", "http.disconnect"]
    assert sent[0]["status"] == 408


def test_a_cancellation_from_elsewhere_is_not_a_timeout():
    async def main() -> None:
        entered = asyncio.Event()

        async def receive() -> dict[str, Any]:
            entered.set()
            await asyncio.Event().wait()
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            raise AssertionError("nothing is answered")

        async def app(scope: Any, receive_: Any, send_: Any) -> None:
            await receive_()

        request = BodyDeadline(app)(SCOPE, receive, send)
        task = asyncio.ensure_future(request)
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_the_app_answering_without_reading_the_body_leaves_no_timer():
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()  # a part only
        await _answer(send, [])

    sent = run(app, [{"type": "http.request", "body": b"{", "more_body": True}, None])
    assert sent[0]["status"] == 200
