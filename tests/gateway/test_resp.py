"""The gateway's Redis client keeps a deadline on every command with one timer per connection."""

from __future__ import annotations

import asyncio

import pytest

from gateway.resp import Encoded, RespClient, encode


def test_encoded_arguments_are_spliced_into_the_command_as_if_sent_one_by_one():
    args = ["EVALSHA", "ab", 2, b"raw", True, 1.5]
    assert encode(["X", Encoded.of(args[:3]), *args[3:]]) == encode(["X", *args])
    assert encode(["é", -1]) == b"*2\r\n$2\r\n\xc3\xa9\r\n$2\r\n-1\r\n"


async def _server(replies: list[bytes | None], delay: float = 0.0):
    """A server that answers each command (one per line of RESP it receives) with the next reply,
    `delay` seconds after it, and says nothing at all for a None."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for reply in replies:
            header = await reader.readline()  # *N
            for _ in range(int(header[1:]) * 2):
                await reader.readline()
            if reply is None:
                await reader.read()  # silent until the client hangs up
                return
            if delay:
                await asyncio.sleep(delay)
            writer.write(reply)
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_command_answered_in_time_succeeds_and_the_next_one_stalled_drops_the_connection():
    server, port = await _server([b"+PONG\r\n", None])
    async with server:
        client = RespClient(f"redis://127.0.0.1:{port}/0", timeout=0.3)
        assert await client.call("PING") == "PONG"
        with pytest.raises((TimeoutError, ConnectionError)):
            await client.call("PING")
        await client.close()


async def test_commands_waiting_behind_a_stalled_one_all_fail_at_its_deadline():
    server, port = await _server([None])
    async with server:
        client = RespClient(f"redis://127.0.0.1:{port}/0", timeout=0.3)
        results = await asyncio.gather(*(client.call("PING") for _ in range(20)), return_exceptions=True)
        assert all(isinstance(r, (TimeoutError, ConnectionError)) for r in results), results
        await client.close()


async def test_commands_that_find_no_connection_while_redis_is_silent_share_one_attempt_and_fail_together():
    """No connection alive (the last one dropped) and Redis accepting but silent: the connection's
    SELECT is never answered. Every caller joins one attempt and fails with it, at one deadline;
    behind a lock they took turns, each making its own attempt (20 connections, 20 deadlines)."""
    accepted = 0

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        await reader.read()  # until the client hangs up

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        client = RespClient(f"redis://127.0.0.1:{port}/1", timeout=0.3)
        results = await asyncio.gather(*(client.call("PING") for _ in range(20)), return_exceptions=True)
        assert all(isinstance(r, (TimeoutError, ConnectionError)) for r in results), results
        assert accepted == 1
        await client.close()


async def test_a_cancelled_command_does_not_drop_the_connection_of_the_ones_answered_after_it():
    server, port = await _server([b"+PONG\r\n", b"+ONE\r\n", b"+TWO\r\n"])
    async with server:
        client = RespClient(f"redis://127.0.0.1:{port}/0", timeout=5)
        assert await client.call("PING") == "PONG"  # connected: the next command is sent at once
        first = asyncio.ensure_future(client.call("ECHO", "one"))
        await asyncio.sleep(0)
        first.cancel()
        assert await client.call("ECHO", "two") == "TWO"  # the first's reply is skipped, not misread
        await client.close()


async def test_a_command_queued_while_the_event_loop_was_busy_gets_its_whole_deadline_from_its_write():
    """A gateway busy with other requests between queueing a command and writing it (CI saw a fresh
    replica's first MCP burst answered "Redis unreachable") has not lost Redis: the deadline counts
    from the write. The event loop's clock is moved a minute on between the two, as a loop that was
    held that long would see it; the server then answers 50 ms after the command, within the 10 s
    deadline. Counted from the queueing, the deadline had passed before the command was sent."""
    server, port = await _server([b"+PONG\r\n", b"+LATE\r\n"], delay=0.05)
    async with server:
        client = RespClient(f"redis://127.0.0.1:{port}/0", timeout=10)
        assert await client.call("PING") == "PONG"  # connected
        loop = asyncio.get_running_loop()
        real = loop.time
        held = 0.0
        loop.time = lambda: real() + held  # type: ignore[method-assign]
        try:
            answer = asyncio.ensure_future(client.call("ECHO", "late"))
            await asyncio.sleep(0)  # queued: the write waits for the loop's next turn
            assert client._proto is not None and client._proto.wbuf, "the command should be queued, not written"
            held = 60.0  # ...which comes a minute later
            assert await answer == "LATE"
        finally:
            del loop.time
        await client.close()
