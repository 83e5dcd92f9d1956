"""Stopping the real servers the tests start (sshd, llama.cpp, an OIDC provider, gateways), and
reading their output while they run."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import IO


def stop(process: subprocess.Popen | None, timeout: float = 10) -> None:
    """SIGTERM, wait up to `timeout` s, then SIGKILL; a process already gone is left alone."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Output:
    """A process's output pipe read by a thread as it comes (a full pipe would stop the process),
    with a wait that wakes on each line instead of polling."""

    def __init__(self, pipe: IO) -> None:
        self.lines: list[str] = []
        self._more = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._reader.start()

    def _read(self, pipe: IO) -> None:
        for line in pipe:
            with self._more:
                self.lines.append(line if isinstance(line, str) else line.decode(errors="replace"))
                self._more.notify_all()
        with self._more:
            self._more.notify_all()  # the end of the output: a waiter gives up now

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, found: str | Callable[[str], bool], timeout: float) -> bool:
        """Whether the output came to hold `found` (a text, or a test of the whole output) within
        `timeout` seconds and before it ended."""
        check = found if callable(found) else lambda text: found in text
        with self._more:
            self._more.wait_for(lambda: check(self.text) or not self._reader.is_alive(), timeout)
            return check(self.text)

    def join(self, timeout: float = 5) -> None:
        self._reader.join(timeout)
