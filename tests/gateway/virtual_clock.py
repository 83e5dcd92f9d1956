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


class Protocol:
    """What aiohttp's StreamReader asks of its protocol."""

    connected = True
    _reading_paused = False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def fed_reader(body: bytes, gaps: list[float]) -> tuple[StreamReader, asyncio.Task[None]]:
    """aiohttp's reader of a body that comes in `len(gaps)` pieces, each after its gap (seconds,
    on the running loop's clock), then ends; and the task feeding it (cancel it when done)."""
    content = StreamReader(Protocol(), 2**16, loop=asyncio.get_running_loop())
    cut = len(body) // len(gaps)
    pieces = [body[i * cut : (i + 1) * cut if i + 1 < len(gaps) else None] for i in range(len(gaps))]

    async def feed() -> None:
        for gap, piece in zip(gaps, pieces, strict=True):
            await asyncio.sleep(gap)
            content.feed_data(piece)
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
