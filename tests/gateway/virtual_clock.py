"""An event loop with its own clock, for tests of the gateway's waits: the gaps and limits are
exact, whatever else the machine is doing."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


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
