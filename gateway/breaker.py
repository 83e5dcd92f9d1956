"""A circuit breaker per channel, in this process: a channel that just hung or refused the
connection is tried last for a while, instead of costing every request sent to it the whole
GATEWAY_HEADERS_TIMEOUT (or first-token deadline) before its failover.

    closed ──connect failure, headers or first-token timeout──▶ cooling (tried last)
    cooling ──GATEWAY_CHANNEL_COOLDOWN passed──▶ due: the next request that tries it is the trial
    trial ──an answer──▶ closed          trial ──the same failure──▶ cooling, twice as long
                                          (up to GATEWAY_CHANNEL_COOLDOWN_MAX)

`call.send_upstream` moves the arrows (`failed`, `answered`, `claim`/`release` around an attempt);
`catalog.select_routes` puts cooling channels at the end of a request's routes (`partition`):
never removed, so when every channel is cooling they are still tried, in their usual order, and
any answer closes a breaker at once. Other failures (429, 5xx, 4xx, a broken answer) leave it as
it is: they fail over at once, and the health checks judge them. A client that leaves, or a call
that ran out of its own deadline, says nothing about the channel either.

Per process, not shared through Redis: a replica learns that a channel hangs from its own first
request that waits for it (one deadline per replica and cooldown, plus the requests it had sent
to the channel before that deadline passed: tests/gateway/test_breaker_replicas.py), and asking
Redis would put a round trip on every request, or a subscription and its failure modes on every
replica, to save the other replicas that one wait each. Nothing here does I/O; while no breaker is open the hot path
pays one truthiness test of `open`, and while one is, a dict lookup per candidate route.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from portal.hot import hot

from .cache import RouteInfo
from .errors import Failure

logger = logging.getLogger(__name__)

# What opens a breaker: an upstream that did not answer at all, or not within its deadline.
BREAKING = frozenset({Failure.CONNECT, Failure.HEADERS_TIMEOUT, Failure.FIRST_TOKEN_TIMEOUT})
MAX_DOUBLINGS = 16  # past this the cap has long been reached (and 2**n stays a small number)


@dataclass(slots=True)
class Breaker:
    """One channel's open breaker."""

    channel_name: str
    failure: Failure  # the last failure that (re)opened it
    until: float  # the clock's time when its cooldown ends
    cooldowns: int = 1  # in a row: each failed trial doubles the next one
    trial: bool = False  # a request is trying it now (the one let through after the cooldown)


class Breakers:
    """The open breakers of this process's channels, by channel id (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.open: dict[int, Breaker] = {}
        self.clock = clock
        self.opened: dict[str, int] = {}  # cooldowns begun, by channel name (`gateway.metrics` reads it)

    def cooling(self, channel_id: int, now: float) -> Breaker | None:
        """The channel's breaker if requests should try it last at `now`."""
        b = self.open.get(channel_id)
        return b if b is not None and (b.trial or now < b.until) else None

    def partition(self, routes: list[RouteInfo], cooled: list[RouteInfo]) -> list[RouteInfo]:
        """`routes` without the cooling ones, which are appended to `cooled`. Call it only while
        `open` is not empty."""
        now = self.clock()
        kept: list[RouteInfo] = []
        for r in routes:
            (kept if self.cooling(r.channel_id, now) is None else cooled).append(r)
        return kept

    def claim(self, channel_id: int) -> bool:
        """Before an attempt on the channel: is it the trial after its cooldown? Only one attempt
        is, until its outcome is known (`failed`, `answered` or `release`)."""
        b = self.open.get(channel_id)
        if b is None or b.trial or self.clock() < b.until:
            return False
        b.trial = True
        return True

    def release(self, channel_id: int) -> None:
        """A claimed trial ended without telling anything (its client left, the call's deadline):
        the next request may try the channel."""
        b = self.open.get(channel_id)
        if b is not None:
            b.trial = False

    def answered(self, channel_id: int) -> None:
        """The channel answered (headers, and a first token where one was awaited): closed."""
        b = self.open.pop(channel_id, None)
        if b is not None:
            logger.info("channel %s answered again: breaker closed after %d cooldown(s)", b.channel_name, b.cooldowns)

    def failed(self, route: RouteInfo, failure: Failure) -> None:
        """An attempt on `route` failed with `failure`. Opens the breaker on a BREAKING failure, or
        opens it again, twice as long, when it was due (its trial failed); an attempt that started
        before the channel was cooling, or that tried it anyway, does not lengthen its cooldown."""
        base = float(hot.GATEWAY_CHANNEL_COOLDOWN)
        if failure not in BREAKING or base <= 0:
            return
        now = self.clock()
        b = self.open.get(route.channel_id)
        if b is None:
            b = self.open[route.channel_id] = Breaker(route.channel_name, failure, now + base)
        elif b.trial or now < b.until:
            return
        else:
            b.cooldowns += 1
            b.failure = failure
            b.until = now + self.cooldown(b.cooldowns)
        self.opened[b.channel_name] = self.opened.get(b.channel_name, 0) + 1
        logger.warning(
            "channel %s failed (%s): breaker open, tried last for %g s (cooldown %d in a row)",
            b.channel_name,
            failure,
            b.until - now,
            b.cooldowns,
        )

    @staticmethod
    def cooldown(cooldowns: int) -> float:
        """Seconds of the `cooldowns`-th cooldown in a row: GATEWAY_CHANNEL_COOLDOWN, doubled each
        time, at most GATEWAY_CHANNEL_COOLDOWN_MAX."""
        base = float(hot.GATEWAY_CHANNEL_COOLDOWN)
        cap = max(float(hot.GATEWAY_CHANNEL_COOLDOWN_MAX), base)
        return float(min(base * 2 ** min(cooldowns - 1, MAX_DOUBLINGS), cap))


breakers = Breakers()
