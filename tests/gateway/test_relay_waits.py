"""`relay`'s waits for the upstream's next piece: bounded by GATEWAY_IDLE_TIMEOUT (and the call's
deadline) through one timer for the whole stream, with the outcomes `asyncio.timeout_at` around
each wait had: a gap past the limit is the stream's idle-timeout (or deadline) failure, gaps within
it are not however long the stream, a slow client is never one, a disconnect or a shutdown stays a
cancellation, and no timer outlives the stream. (The first token's wait is the attempt's, before
the relay: `call.call`.)

They run on a loop with its own clock (`VirtualClockLoop`): the gaps and limits are exact, whatever
else the machine is doing."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gateway import relay as relay_module
from gateway.relay import ChatDialect, relay
from keys.choices import UsageStatus
from tests.gateway.virtual_clock import fed_reader, nothing_left_behind, run

HEAD = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
FIRST = HEAD + b'[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
REST = (
    (HEAD + b'[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n') * 5
    + HEAD
    + b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    + HEAD
    + b'[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}\n\n'
    + b"data: [DONE]\n\n"
)
IDLE = 0.3


@pytest.fixture(autouse=True)
def idle_timeout(settings, monkeypatch):
    settings.GATEWAY_IDLE_TIMEOUT = IDLE
    reports: list[tuple[Any, ...]] = []
    monkeypatch.setattr(relay_module.passive, "report", lambda *a, **kw: reports.append((a, kw)))
    return reports


class Call:
    """What `relay` asks of a call: its client's send and receive (a send takes `send_delay`; the
    client leaves when `leave` is set), its deadline, and the outcome it is finished with."""

    def __init__(self, deadline: float, send_delay: float = 0.0) -> None:
        self.req = SimpleNamespace(send=self.send, receive=self.receive)
        self.response_headers: list[tuple[bytes, bytes]] = []
        self.ttft_ms: float | None = None
        self.started = time.perf_counter()
        self.logged = None
        self.deadline = deadline
        self.request_id = "req-1"
        self.max_tokens = None
        self.prompt_estimate = 3
        self.usage = None
        self.send_delay = send_delay
        self.leave = asyncio.Event()
        self.body = b""
        self.outcome: tuple[str, int, str] | None = None

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.body" and message["more_body"] and self.send_delay:
            await asyncio.sleep(self.send_delay)
        self.body += message.get("body", b"")

    async def receive(self) -> dict:
        await self.leave.wait()
        return {"type": "http.disconnect"}

    def finish(self, usage: Any, *, status: str, http_status: int, error: str) -> None:
        if self.outcome is None:
            self.outcome = (status, http_status, error)
            self.usage = usage


async def relayed(
    gaps: list[float], *, deadline_in: float = 100.0, send_delay: float = 0.0, call: Call | None = None
) -> Call:
    """`relay` of a stream whose first event is there and whose rest comes in pieces, each after
    its gap (seconds); the last piece ends the body."""
    loop = asyncio.get_running_loop()
    content, feeder = fed_reader(REST, gaps)
    call = call or Call(loop.time() + deadline_in, send_delay)
    up = SimpleNamespace(
        first_chunk=FIRST,
        response=SimpleNamespace(content=content),
        route=SimpleNamespace(channel_id=1, channel_name="c"),
        close=lambda: None,
        release=lambda: None,
    )
    try:
        await relay(call, up, ChatDialect(None, wants_usage=True))  # type: ignore[arg-type]
    finally:
        feeder.cancel()
    return call


def test_gaps_within_the_idle_timeout_never_time_out_however_long_the_stream():
    async def scenario() -> None:
        call = await relayed([IDLE * 0.4] * 8)  # 3.2 x IDLE in all
        assert call.outcome == (UsageStatus.OK, 200, "")
        assert call.body.count(b'"content":"a"') == 5
        assert call.body.endswith(b"data: [DONE]\n\n")
        await nothing_left_behind(IDLE * 1.5)

    run(scenario())


def test_a_slow_client_is_not_an_idle_upstream():
    """Sends to the client are not bounded: a send longer than the idle timeout, between waits
    that are each within it, is no failure."""

    async def scenario() -> None:
        call = await relayed([IDLE * 2.5, IDLE * 2.3, IDLE * 2.3], send_delay=IDLE * 2)
        assert call.outcome == (UsageStatus.OK, 200, "")
        assert call.body.endswith(b"data: [DONE]\n\n")
        await nothing_left_behind(IDLE * 1.5)

    run(scenario())


def test_a_gap_past_the_idle_timeout_is_the_idle_failure(idle_timeout):
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        call = await relayed([IDLE * 0.4, IDLE * 0.4, IDLE * 3])
        assert loop.time() - started == pytest.approx(IDLE * 0.8 + IDLE)  # the third gap's limit
        assert call.outcome is not None
        status, http_status, error = call.outcome
        assert (status, http_status) == (UsageStatus.UPSTREAM_ERROR, 504)
        assert error.startswith("idle_timeout: ")
        assert b'"code":"upstream_timeout"' in call.body
        assert [kw["error"] for _, kw in idle_timeout] == ["idle_timeout"]
        await nothing_left_behind(IDLE * 1.5)

    run(scenario())


def test_the_deadline_bounds_the_waits(idle_timeout):
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        call = await relayed([IDLE * 0.4] * 8, deadline_in=IDLE)
        assert loop.time() - started == pytest.approx(IDLE)
        assert call.outcome is not None
        assert call.outcome[:2] == (UsageStatus.UPSTREAM_ERROR, 504)
        assert call.outcome[2].startswith("deadline: ")
        assert b'"code":"deadline"' in call.body
        assert idle_timeout == []  # the gateway's own limit is no evidence against the channel
        await nothing_left_behind(IDLE * 1.5)

    run(scenario())


def test_a_client_that_leaves_mid_wait_is_a_disconnect():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        call = Call(loop.time() + 100)
        loop.call_later(IDLE * 0.6, call.leave.set)
        await relayed([IDLE * 0.4, IDLE * 0.9], call=call)
        assert call.outcome == (UsageStatus.CLIENT_DISCONNECTED, 499, "client disconnected")
        await nothing_left_behind(IDLE * 1.5)

    run(scenario())


def test_a_shutdown_mid_wait_stays_a_cancellation():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        call = Call(loop.time() + 100)
        task = asyncio.create_task(relayed([IDLE * 0.4, IDLE * 0.9], call=call))
        await asyncio.sleep(IDLE * 0.6)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert call.outcome is not None
        assert call.outcome[:2] == (UsageStatus.INTERRUPTED, 503)
        assert b'"code":"shutdown"' in call.body
        await nothing_left_behind(IDLE * 1.5)

    run(scenario())
