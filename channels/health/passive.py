"""Passive health: what the gateway sees of real traffic feeds the channel's health window.

The gateway calls `report()` on its hot path, so it must be cheap and never block or raise: it
appends to an in-process deque (O(1), bounded) and, the first time, starts one daemon thread.

Cross-process path (the gateway and the Celery worker are different processes):

    gateway: report() → deque ──(flusher thread, every PORTAL_PASSIVE_FLUSH_SECONDS)──▶ flush()
             flush() folds the outcomes into one tally per channel and writes them
             to Redis (RPUSH onto `portal:health:passive`; the embedded Redis by default).
    worker:  collect() takes everything atomically (Redis MULTI LRANGE+DEL) plus
             this process's own buffer, and the probe round folds it into each
             channel's window (`channels.health.services`).

So the hot path never touches the network; at most one small write per flush interval leaves
the gateway, whatever the request rate. A gateway that dies loses at most one interval of
evidence, which is fine for health (it is evidence, not accounting).
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from redis.exceptions import RedisError

if TYPE_CHECKING:
    from redis import Redis

logger = logging.getLogger(__name__)

REDIS_KEY = "portal:health:passive"
EXPIRE_SECONDS = 3600


@dataclass(frozen=True, slots=True)
class Outcome:
    channel_id: int
    ok: bool
    at: float
    status: int | None = None  # upstream HTTP status, None for connect errors and timeouts
    error: str | None = None  # error class: "connect", "timeout", "http_429", "http_5xx", "protocol"
    ttft_ms: float | None = None


@dataclass(slots=True)
class Tally:
    """Everything the gateway saw of one channel since the last flush."""

    channel_id: int
    ok_count: int = 0
    fail_count: int = 0
    auth_failures: int = 0
    ttft_ms_sum: float = 0.0
    ttft_count: int = 0
    last_error: str = ""
    last_status: int | None = None

    def add(self, other: Tally) -> None:
        self.ok_count += other.ok_count
        self.fail_count += other.fail_count
        self.auth_failures += other.auth_failures
        self.ttft_ms_sum += other.ttft_ms_sum
        self.ttft_count += other.ttft_count
        if other.fail_count:
            self.last_error, self.last_status = other.last_error, other.last_status

    @property
    def samples(self) -> int:
        return self.ok_count + self.fail_count

    @property
    def ttft_ms(self) -> float | None:
        return round(self.ttft_ms_sum / self.ttft_count, 2) if self.ttft_count else None


_MAX = 50_000
_buffer: collections.deque[Outcome] = collections.deque(maxlen=_MAX)
_lock = threading.Lock()
_flusher: threading.Thread | None = None
_stop = threading.Event()


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
    if _flusher is None:
        _start_flusher()


def drain() -> list[Outcome]:
    """Take every buffered outcome of this process (oldest first)."""
    with _lock:
        items = list(_buffer)
        _buffer.clear()
    return items


def recent_failures(channel_id: int, window_s: float = 60.0) -> int:
    cutoff = time.time() - window_s
    return sum(1 for o in list(_buffer) if o.channel_id == channel_id and not o.ok and o.at >= cutoff)


def tally(outcomes: list[Outcome]) -> dict[int, Tally]:
    out: dict[int, Tally] = {}
    for o in outcomes:
        t = out.setdefault(o.channel_id, Tally(o.channel_id))
        if o.ok:
            t.ok_count += 1
            if o.ttft_ms is not None:
                t.ttft_ms_sum += o.ttft_ms
                t.ttft_count += 1
        else:
            t.fail_count += 1
            t.last_error, t.last_status = o.error or "", o.status
            if o.status in (401, 403):
                t.auth_failures += 1
    return out


# --- cross-process: gateway side ---------------------------------------------------------------


def _redis() -> Redis:
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)


def take_flush() -> tuple[int, list[str]]:
    """This process's buffered outcomes as the JSON tallies `flush()` pushes: (outcomes, items).
    The gateway pushes them through its own async Redis connection (`use_own_flusher`)."""
    outcomes = drain()
    if not outcomes:
        return 0, []
    return len(outcomes), [json.dumps(asdict(t)) for t in tally(outcomes).values()]


def use_own_flusher() -> None:
    """This process flushes by itself (the gateway, on its event loop): no flusher thread, and
    no synchronous Redis client (redis-py: ~10-20 MiB of the gateway's memory)."""
    global _flusher
    with _lock:
        if _flusher is None:
            _flusher = threading.Thread(target=lambda: None, name="passive-health-flush-external")


def flush() -> int:
    """Move this process's buffered outcomes to the shared store; returns how many were moved."""
    count, items = take_flush()
    if not count:
        return 0
    client = _redis()
    try:
        client.rpush(REDIS_KEY, *items)
        client.expire(REDIS_KEY, EXPIRE_SECONDS)  # nobody consuming for an hour: let it go
    finally:
        client.close()
    return count


def _flush_loop(interval: float) -> None:
    while not _stop.wait(interval):
        try:
            flush()
        except Exception as exc:  # a flush failure must never take the gateway down
            logger.warning("passive health flush failed: %s", exc.__class__.__name__)


def _start_flusher() -> None:
    global _flusher
    with _lock:
        if _flusher is not None:
            return
        try:
            interval = settings.PORTAL_PASSIVE_FLUSH_SECONDS
        except Exception:
            interval = 2.0
        if interval <= 0:  # disabled (tests that drive flush() themselves): keep report() O(1) all the same
            _flusher = threading.Thread(target=lambda: None, name="passive-health-flush-disabled")
            return
        _flusher = threading.Thread(target=_flush_loop, args=(interval,), name="passive-health-flush", daemon=True)
        _flusher.start()
        atexit.register(_final_flush)


def _final_flush() -> None:
    _stop.set()
    try:
        flush()
    except Exception:  # interpreter shutdown: best effort only
        logger.debug("final passive flush failed", exc_info=True)


# --- cross-process: worker side ----------------------------------------------------------------


def collect() -> dict[int, Tally]:
    """Take every outcome flushed by any process (and this one's own buffer), summed per channel."""
    totals = tally(drain())

    def merge(t: Tally) -> None:
        if t.channel_id in totals:
            totals[t.channel_id].add(t)
        else:
            totals[t.channel_id] = t

    client = _redis()
    try:
        with client.pipeline(transaction=True) as pipe:
            pipe.lrange(REDIS_KEY, 0, -1)
            pipe.delete(REDIS_KEY)
            raw, _ = pipe.execute()
    except (RedisError, OSError) as exc:
        # Redis away: the round goes on with its active probes (and this process's own outcomes);
        # what the gateways flushed stays in Redis for the next round.
        logger.warning("passive health outcomes unavailable this round (%r)", exc)
        raw = []
    finally:
        client.close()
    for item in raw:
        try:
            merge(Tally(**json.loads(item)))
        except (ValueError, TypeError):
            logger.warning("dropped a malformed passive health record")
    return totals
