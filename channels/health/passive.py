"""Passive health: what the gateway sees of real traffic feeds the channel's health window.

The gateway calls `report()` on its hot path, so it must be cheap and never block or raise: it only
appends to an in-process buffer. The health checks (3/6) drain it with `drain()` and fold it into
the same window as active probes. Until then it keeps a bounded record of recent outcomes.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Outcome:
    channel_id: int
    ok: bool
    at: float
    status: int | None = None  # upstream HTTP status, None for connect errors and timeouts
    error: str | None = None  # error class: "connect", "timeout", "http_429", "http_5xx", "protocol"
    ttft_ms: float | None = None


_MAX = 50_000
_buffer: collections.deque[Outcome] = collections.deque(maxlen=_MAX)
_lock = threading.Lock()


def report(
    channel_id: int,
    ok: bool,
    *,
    status: int | None = None,
    error: str | None = None,
    ttft_ms: float | None = None,
) -> None:
    """Record one request's outcome on `channel_id`. O(1), never raises."""
    _buffer.append(Outcome(channel_id, ok, time.time(), status, error, ttft_ms))


def drain() -> list[Outcome]:
    """Take every buffered outcome (oldest first)."""
    with _lock:
        items = list(_buffer)
        _buffer.clear()
    return items


def recent_failures(channel_id: int, window_s: float = 60.0) -> int:
    cutoff = time.time() - window_s
    return sum(1 for o in list(_buffer) if o.channel_id == channel_id and not o.ok and o.at >= cutoff)
