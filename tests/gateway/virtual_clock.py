"""An event loop with its own clock, for tests of the gateway's waits: the gaps and limits are
exact, whatever else the machine is doing."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from aiohttp import StreamReader


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock stands still while callbacks run and, when nothing is ready,
    jumps to the next timer: sleeps, `call_at` and the waits' limits happen in order and on time,
    in no real time at all."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now

    def _run_once(self) -> None:
        if not self._ready:  # type: ignore[attr-defined]
            timers = [handle.when() for handle in self._scheduled if not handle.cancelled()]  # type: ignore[attr-defined]
            if timers:
                self.now = max(self.now, min(timers))
        super()._run_once()  # type: ignore[misc]


def run(coro: Coroutine[Any, Any, None]) -> None:
    loop = VirtualClockLoop()
    try:
        loop.run_until_complete(coro)
    finally:
        loop.close()


class Transport:
    """A connection's transport, as the gateway pauses it. Paused, it holds what the feeder sends
    (as the kernel keeps what arrives on an unread socket) and, resumed, feeds it all as one piece
    on the loop's next turn (as the next read takes it all)."""

    def __init__(self) -> None:
        self.paused = False
        self.held: list[bytes] = []
        self.eof = False  # the body ended while reading was paused
        self.reader: StreamReader | None = None

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
        if self.held or self.eof:
            asyncio.get_running_loop().call_soon(self._release)

    def _release(self) -> None:
        assert self.reader is not None
        if self.paused:
            return
        if self.held:
            self.reader.feed_data(b"".join(self.held))
            self.held.clear()
        if self.eof:
            self.reader.feed_eof()


class Protocol:
    """What aiohttp's StreamReader asks of its protocol, and its transport."""

    connected = True
    _reading_paused = False

    def __init__(self) -> None:
        self.transport = Transport()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class CountingReader(StreamReader):
    """aiohttp's reader, counting the times a reader waited on it (each a wakeup of the gateway)."""

    waits = 0

    async def _wait(self, func_name: str) -> None:
        self.waits += 1
        await super()._wait(func_name)


def fed_reader(
    body: bytes, gaps: list[float], *, pieces: list[bytes] | None = None
) -> tuple[CountingReader, asyncio.Task[None]]:
    """aiohttp's reader of a body that comes in `len(gaps)` pieces (`pieces`, else `body` cut in
    as many), each after its gap (seconds, on the running loop's clock), then ends; and the task
    feeding it (cancel it when done)."""
    protocol = Protocol()
    content = CountingReader(protocol, 2**16, loop=asyncio.get_running_loop())
    transport = protocol.transport
    transport.reader = content
    if pieces is None:
        cut = len(body) // len(gaps)
        pieces = [body[i * cut : (i + 1) * cut if i + 1 < len(gaps) else None] for i in range(len(gaps))]

    async def feed() -> None:
        for gap, piece in zip(gaps, pieces, strict=True):
            await asyncio.sleep(gap)
            if transport.paused:
                transport.held.append(piece)
            else:
                content.feed_data(piece)
        if transport.paused:
            transport.eof = True
        else:
            content.feed_eof()

    return content, asyncio.create_task(feed())


async def nothing_left_behind(after: float) -> None:
    """No timer of a finished stream is left once the other tasks (a watcher, a feeder) have
    ended, and nothing cancels the current task in the `after` seconds that follow."""
    for _ in range(20):
        if asyncio.all_tasks() == {asyncio.current_task()}:
            break
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    assert not [handle for handle in loop._scheduled if not handle.cancelled()]  # type: ignore[attr-defined]
    await asyncio.sleep(after)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
