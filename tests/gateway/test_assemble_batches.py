"""`call._assemble` reads a non-streaming answer's stream in batches once its events come fast: a
model server writes an event a token, and each read is a wakeup of the gateway that a client
waiting for the whole answer gains nothing from. The answer is the same, ends at most 10 % (and
0.1 s) later, a slow stream is read as it comes, and the idle timeout and a cancellation keep
their outcomes.

They run on a loop with its own clock (`VirtualClockLoop`), whose paused reader holds what arrives
as the kernel does: the times and the number of reads are exact, whatever else the machine is
doing; the last test reads a real connection with aiohttp's parser."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace

import aiohttp
import pytest

from gateway.call import BATCH_MAX, _assemble, events_reader, read_any
from gateway.chunks import ChatAssembly
from tests.gateway.virtual_clock import CountingReader, fed_reader, nothing_left_behind, run

HEAD = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
FIRST = HEAD + b'{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
TOKEN = HEAD + b'{"content":"a"},"finish_reason":null}]}\n\n'
LAST = HEAD + b'{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
IDLE = 0.3
PREFILL = 0.05  # seconds from the request to its first event


async def assembled(
    tokens: int, every: float, *, stall: float | None = None, limit: int | None = None
) -> tuple[dict, CountingReader, float]:
    """The answer of a stream whose first event came PREFILL after the request and whose tokens
    then come one an event, `every` seconds apart, then its end (or, with `stall`, a stall that
    long instead); the reader, and the loop time its last piece was sent."""
    loop = asyncio.get_running_loop()
    pieces = [TOKEN] * tokens + ([] if stall is not None else [LAST])
    gaps = [every] * len(pieces) + ([stall] if stall is not None else [])
    if stall is not None:
        pieces.append(LAST)
    content, feeder = fed_reader(b"", gaps, pieces=pieces)
    last_sent = loop.time() + sum(gaps)
    try:
        answer = await _assemble(
            SimpleNamespace(content=content),  # type: ignore[arg-type]
            FIRST,
            ChatAssembly(limit),
            idle=IDLE,
            cap=2**24,
            deadline=None,
            sent=loop.time() - PREFILL,
        )
        return answer, content, last_sent
    finally:
        feeder.cancel()


def test_a_fast_stream_is_read_in_batches_and_ends_at_most_a_tenth_later():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        answer, content, last_sent = await assembled(400, 0.005)  # 400 tokens at 200 a second: 2 s
        assert answer["choices"][0]["message"]["content"] == "a" * 400
        assert answer["choices"][0]["finish_reason"] == "stop"
        # Read as it came, each of the 401 pieces was a wakeup; in batches, a read every 10 % of the
        # time so far (from 0.15 s, when the gap holds 3 events) and every 0.1 s from 1 s on.
        assert content.waits <= 60
        late = loop.time() - last_sent
        assert late <= min(BATCH_MAX, 0.1 * (last_sent + PREFILL)) + 1e-9
        await nothing_left_behind(IDLE * 1.5)
        assert not content._protocol.transport.paused

    run(scenario())


def test_a_slow_stream_is_read_as_it_comes():
    """Ten tokens a second: a gap of at most 0.1 s would hold one, so nothing waits for it."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        answer, content, last_sent = await assembled(30, 0.1)
        assert answer["choices"][0]["message"]["content"] == "a" * 30
        assert loop.time() == pytest.approx(last_sent)  # not a moment later
        assert content.waits == 31  # each piece, as it came

    run(scenario())


def test_the_cut_at_the_reservation_is_where_it_was():
    async def scenario() -> None:
        answer, _content, _ = await assembled(400, 0.005, limit=250)
        assert answer["choices"][0]["message"]["content"] == "a" * 250
        assert answer["choices"][0]["finish_reason"] == "length"

    run(scenario())


def test_a_stall_after_a_fast_start_is_a_timeout_within_a_gap_of_the_idle_timeout():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await assembled(200, 0.005, stall=IDLE * 10)
        stalled_at = started + 200 * 0.005
        # The last tokens are read when a gap that began before the stall ends; the wait that
        # follows (a gap of its own included) is the idle timeout's.
        assert stalled_at + IDLE <= loop.time() <= stalled_at + BATCH_MAX + IDLE + 1e-9
        await nothing_left_behind(IDLE * 1.5)

    run(scenario())


def test_a_cancellation_during_a_gap_stays_one_and_reads_on():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        content_of: list[CountingReader] = []
        real = fed_reader

        def spied(*args, **kwargs):
            content, feeder = real(*args, **kwargs)
            content_of.append(content)
            return content, feeder

        globals()["fed_reader"] = spied
        try:
            task = asyncio.create_task(assembled(400, 0.005))
            await asyncio.sleep(1.0)  # well into the batches: a gap of 0.1 s is under way
            assert content_of[0]._protocol.transport.paused
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            globals()["fed_reader"] = real
        assert not content_of[0]._protocol.transport.paused
        assert loop.time() == pytest.approx(1.0)
        await nothing_left_behind(IDLE * 1.5)

    run(scenario())


@pytest.mark.parametrize("size", [1, 8000])
def test_a_burst_after_a_gap_is_read_whole_over_a_real_connection(size):
    """Over a real socket and aiohttp's own parser: five events in one write (the reader pauses
    then: 0.1 s, nothing comes), then, at 0.3 s, the other 25, the last event and the body's end
    in one write, each event an HTTP chunk of its own, as a burst that a network merged arrives;
    the connection then stays open. Paused through aiohttp's protocol (its parser too), the reader
    parsed the first of the burst's chunks and waited on the rest until the idle timeout. With
    8,000 characters a token the burst is 200 KB, several reads' worth: nothing is lost either."""
    token = HEAD + b'{"content":"' + b"a" * size + b'"},"finish_reason":null}]}\n\n'

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunked = [b"%x\r\n%s\r\n" % (len(event), event) for event in [FIRST, *[token] * 30, LAST]]
        writer.write(chunked[0])
        await asyncio.sleep(0.01)
        writer.write(b"".join(chunked[1:6]))
        await asyncio.sleep(0.3)
        writer.write(b"".join(chunked[6:]) + b"0\r\n\r\n")
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        writer.close()

    async def scenario() -> dict:
        loop = asyncio.get_running_loop()
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with aiohttp.ClientSession() as session:
                resp = await session.post(f"http://127.0.0.1:{port}/v1/chat/completions", data=b"{}")
                events_reader(resp.content)
                first = await read_any(resp.content)
                try:
                    return await _assemble(
                        resp, first, ChatAssembly(None), idle=2.0, cap=2**20, deadline=None, sent=loop.time() - 10
                    )
                finally:
                    resp.close()
        finally:
            server.close()

    answer = asyncio.run(scenario())
    assert answer["choices"][0]["message"]["content"] == "a" * size * 30
    assert answer["choices"][0]["finish_reason"] == "stop"
