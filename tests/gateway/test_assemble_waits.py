"""`call._assemble`'s waits for the rest of a stream: bounded by the idle timeout (and the call's
deadline) through one timer for the whole stream, with the outcomes `asyncio.timeout_at` around
each wait had: a gap past the limit is a TimeoutError, gaps within it are not however long the
stream, an outer cancellation stays one, and nothing is cancelled once the answer is read.

They run on a loop with its own clock (`VirtualClockLoop`): the gaps and limits are exact, whatever
else the machine is doing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from gateway.call import _assemble
from gateway.chunks import ChatAssembly
from tests.gateway.virtual_clock import fed_reader, nothing_left_behind, run

HEAD = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
FIRST = HEAD + b'{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
REST = (
    (HEAD + b'{"content":"a"},"finish_reason":null}]}\n\n') * 5
    + HEAD
    + b'{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)
IDLE = 0.3


async def assembled(gaps: list[float], *, deadline_in: float | None = None) -> dict:
    """The answer of a stream whose first event is there and whose rest comes in pieces, each
    after its gap (seconds); the last piece ends the body."""
    loop = asyncio.get_running_loop()
    content, feeder = fed_reader(REST, gaps)
    try:
        deadline = None if deadline_in is None else loop.time() + deadline_in
        return await _assemble(
            SimpleNamespace(content=content),  # type: ignore[arg-type]
            FIRST,
            ChatAssembly(None),
            idle=IDLE,
            cap=2**20,
            deadline=deadline,
        )
    finally:
        feeder.cancel()


def test_gaps_within_the_idle_timeout_never_time_out_however_long_the_stream():
    async def scenario() -> None:
        answer = await assembled([IDLE * 0.4] * 6)  # 2.4 x IDLE in all
        assert answer["choices"][0]["message"]["content"] == "aaaaa"
        await nothing_left_behind(IDLE * 1.5)  # the timer went with the stream: nothing cancels this task

    run(scenario())


def test_a_gap_past_the_idle_timeout_is_a_timeout():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await assembled([IDLE * 0.4, IDLE * 0.4, IDLE * 3])
        assert loop.time() - started == pytest.approx(IDLE * 0.8 + IDLE)  # the third gap's limit
        await nothing_left_behind(IDLE * 1.5)

    run(scenario())


def test_the_deadline_bounds_the_waits():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await assembled([IDLE * 0.4] * 6, deadline_in=IDLE)
        assert loop.time() - started == pytest.approx(IDLE)

    run(scenario())


def test_an_outer_cancellation_stays_a_cancellation():
    async def scenario() -> None:
        task = asyncio.create_task(assembled([IDLE * 0.4, IDLE * 3]))
        await asyncio.sleep(IDLE * 0.6)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await nothing_left_behind(IDLE * 1.5)  # its timer went with it

    run(scenario())
