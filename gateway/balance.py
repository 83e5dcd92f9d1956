"""Routing's last step: the order of one group of equally good routes (same status tier and
priority), by the model's balancing policy (`channels.choices.BalancePolicy`, chosen per model by
an admin). `catalog.ordered_routes` filters first and then hands each group to `order`; higher
groups always come first, whatever the policy.

- **weighted** (the default): a weighted random permutation, so each channel gets its weight's share.
- **affinity**: every request of one agent session goes to the same replica, where its prompt
  cache is (llama.cpp's slots and RAM cache, vLLM's prefix cache). The session is the client's own
  identifier where it sends one (Codex/Responses `prompt_cache_key`, Claude Code's
  `metadata.user_id`, OpenAI `user`), else a hash of the key, the system prompt and the first
  messages, which an agent resends unchanged on every turn (`session_of`). The replica is found by
  consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018): walk the ring from
  the session's point and take the first replica whose requests in flight stay within
  GATEWAY_AFFINITY_LOAD (1.25) times its weighted share, so a hot session spills over instead of
  overloading one replica. Where a session went is kept in Redis (`{ns}:aff:{model}:{session}`,
  GATEWAY_AFFINITY_TTL), read with the admission script in the same write (`admission.open_call`)
  and written only when it changes, so every gateway replica sends the session to the same
  replica, and a session that moved (its replica went down, or a failover served it elsewhere)
  stays where its cache now is when the old replica comes back. A Redis that does not answer the
  lookup costs the request nothing: it goes to the hash's replica.
- **least_busy**: power of two choices: two routes drawn by weight, the one with fewer requests in
  flight first, and on a tie the one with the lower moving average of time to first byte
  (`Load.ttft`, an EWMA over this process's calls).

In-flight counts and the TTFT average are per gateway process (`load`): no Redis round trip per
request; with N gateway replicas each one balances its own share of the traffic.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import logging
import math
import random
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from keys.usage import explanation as lines

from .cache import ModelInfo, RouteInfo, namespace
from .resp import RespClient, RespError

logger = logging.getLogger(__name__)

WEIGHTED = "weighted"
AFFINITY = "affinity"
LEAST_BUSY = "least_busy"

VNODES = 64  # points per unit of weight on the hash ring: shares within a few % of the weights
EWMA_ALPHA = 0.3  # weight of the newest TTFT sample


@dataclass(slots=True)
class Choice:
    """One request's balancing: its session and the replica Redis remembered for it (affinity),
    then which channel the policy put first and why (`reason`, for the usage record's explanation)."""

    session: str | None = None
    remembered: int | None = None  # channel id from Redis
    chosen: int | None = None
    reason: str = ""
    remember: bool = False  # the session is new here or moved: write `chosen` back


class Load:
    """Requests in flight and an EWMA of time to first byte per channel, in this process."""

    def __init__(self) -> None:
        self.in_flight: dict[int, int] = {}
        self.ttft: dict[int, float] = {}

    def begin(self, channel_id: int) -> None:
        self.in_flight[channel_id] = self.in_flight.get(channel_id, 0) + 1

    def end(self, channel_id: int) -> None:
        left = self.in_flight.get(channel_id, 0) - 1
        if left > 0:
            self.in_flight[channel_id] = left
        else:
            self.in_flight.pop(channel_id, None)

    def observe(self, channel_id: int, ttft_ms: float | None) -> None:
        if ttft_ms is None:
            return
        old = self.ttft.get(channel_id)
        self.ttft[channel_id] = ttft_ms if old is None else old + EWMA_ALPHA * (ttft_ms - old)


load = Load()


# --------------------------------------------------------------------------------- ordering


def order(
    group: list[RouteInfo], policy: str, choice: Choice | None = None, notes: list[str] | None = None
) -> list[RouteInfo]:
    """`group` in the order to try it; `choice` (the first group's only) learns what was chosen and
    why; `notes` (the call's explanation) gets the reason when there was a choice to make."""
    if policy == AFFINITY and choice is not None and choice.session is not None:
        out, reason = _affinity(group, choice)
    elif policy == LEAST_BUSY:
        out, reason = _least_busy(group), lines.LEAST_BUSY
    else:
        out, reason = _weighted(group), lines.BY_WEIGHT
    if choice is not None:
        choice.chosen = out[0].channel_id
        choice.reason = reason
    if notes is not None and len(out) > 1:
        notes.append(lines.CHOSEN % {"policy": reason, "channel": out[0].channel_name, "count": len(out)})
    return out


def _weighted(group: list[RouteInfo]) -> list[RouteInfo]:
    if len(group) == 1:
        return list(group)
    # Efraimidis-Spirakis: a weighted random permutation in one sort.
    return sorted(group, key=_weighted_draw, reverse=True)


def _weighted_draw(r: RouteInfo) -> float:
    draw: float = random.random() ** (1.0 / max(r.weight, 1))
    return draw


def _least_busy(group: list[RouteInfo]) -> list[RouteInfo]:
    drawn = _weighted(group)
    if len(drawn) < 2:
        return drawn
    a, b = drawn[0], drawn[1]
    known = [load.ttft[r.channel_id] for r in group if r.channel_id in load.ttft]
    unknown = sum(known) / len(known) if known else 0.0  # a new channel counts as average

    def busy(r: RouteInfo) -> tuple[int, float]:
        return load.in_flight.get(r.channel_id, 0), load.ttft.get(r.channel_id, unknown)

    if busy(b) < busy(a):
        drawn[0], drawn[1] = b, a
    return drawn


def _affinity(group: list[RouteInfo], choice: Choice) -> tuple[list[RouteInfo], str]:
    assert choice.session is not None
    walk = ring_walk(group, choice.session)
    factor = float(settings.GATEWAY_AFFINITY_LOAD)
    total = sum(load.in_flight.get(r.channel_id, 0) for r in group) + 1  # this request included
    weights = sum(max(r.weight, 1) for r in group)

    def fits(r: RouteInfo) -> bool:
        capacity = math.ceil(factor * total * max(r.weight, 1) / weights)
        return load.in_flight.get(r.channel_id, 0) + 1 <= capacity

    remembered = next((r for r in group if r.channel_id == choice.remembered), None)
    if remembered is not None and fits(remembered):
        first, reason = remembered, lines.AFFINITY_HIT
    else:
        # Capacities add up to at least `total`, so some replica always fits.
        first = next((r for r in walk if fits(r)), walk[0])
        if remembered is not None:
            reason = lines.AFFINITY_SPILL  # over its bound: this request only; the session stays
        else:
            reason = lines.AFFINITY_MOVED if choice.remembered is not None else lines.AFFINITY_NEW
            choice.remember = True
    return [first, *(r for r in walk if r is not first)], reason


_rings: dict[tuple[tuple[int, int], ...], tuple[list[int], list[int]]] = {}


def ring_walk(group: list[RouteInfo], session: str) -> list[RouteInfo]:
    """The group's routes in the order met walking the hash ring clockwise from `session`'s point.
    Removing a route moves only the sessions that were on it."""
    if len(group) == 1:
        return list(group)
    ident = tuple(sorted((r.channel_id, max(r.weight, 1)) for r in group))
    ring = _rings.get(ident)
    if ring is None:
        points = sorted(
            (_hash(f"{cid}:{i}".encode()), cid) for cid, weight in ident for i in range(VNODES * min(weight, 100))
        )
        ring = ([p for p, _ in points], [cid for _, cid in points])
        if len(_rings) > 1024:
            _rings.clear()
        _rings[ident] = ring
    hashes, owners = ring
    by_id = {r.channel_id: r for r in group}
    out: list[RouteInfo] = []
    start = bisect.bisect(hashes, int(session[:16], 16))
    for i in range(len(owners)):
        route = by_id[owners[(start + i) % len(owners)]]
        if route not in out:
            out.append(route)
            if len(out) == len(group):
                break
    return out


def _hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


# --------------------------------------------------------------------------------- sessions


def affine(model: ModelInfo) -> bool:
    """Whether requests for `model` look up their session: it is balanced by affinity, or it is an
    alias whose first target is (the session's replica is remembered under the public model)."""
    if model.balance == AFFINITY:
        return True
    return model.is_alias and bool(model.targets) and model.targets[0].balance == AFFINITY


def session_of(body: dict[str, Any], key_id: int) -> str:
    """The request's agent session as 24 hex digits: the client's own identifier where it sends
    one, else the key with the system prompt and the first messages up to the first user turn."""
    ident: object = None
    metadata = body.get("metadata")
    for value in (
        body.get("prompt_cache_key"),
        metadata.get("user_id") if isinstance(metadata, dict) else None,
        body.get("user"),
    ):
        if isinstance(value, str) and value:
            ident = value
            break
    if ident is None:
        ident = [body.get("system") or body.get("instructions"), _opening(body.get("messages", body.get("input")))]
    return hashlib.blake2b(orjson.dumps([key_id, ident]), digest_size=12).hexdigest()


def _opening(messages: object) -> object:
    """The conversation's opening: the messages up to and including the first user message."""
    if not isinstance(messages, list):
        return messages
    out = []
    for m in messages[:8]:
        out.append(m)
        if isinstance(m, dict) and m.get("role") == "user":
            break
    return out


# --------------------------------------------------------------------------------- Redis

_writes: set[asyncio.Task[None]] = set()


def _redis_key(model_id: int, session: str) -> str:
    return f"{namespace()}:aff:{model_id}:{session}"


async def recall(redis: RespClient, model_id: int, session: str) -> int | None:
    """The channel this session last went to (and keep the mapping alive), or None: unknown, or
    Redis did not answer within its deadline."""
    try:
        value = await redis.call("GETEX", _redis_key(model_id, session), "EX", int(settings.GATEWAY_AFFINITY_TTL))
    except (OSError, RespError) as exc:  # ConnectionError and TimeoutError are OSErrors
        logger.warning("session affinity lookup failed, using the hash: %r", exc)
        return None
    try:
        return int(value) if value else None
    except ValueError:
        return None


def settled(redis: RespClient | None, model_id: int, choice: Choice, served: int) -> None:
    """After a call found its channel: remember it for the session when it is new, moved, or a
    failover served it elsewhere. Written without waiting; a lost write only costs a cache miss."""
    if redis is None or choice.session is None:
        return
    if not (choice.remember or (served != choice.chosen and served != choice.remembered)):
        return
    task = asyncio.get_running_loop().create_task(_write(redis, _redis_key(model_id, choice.session), served))
    _writes.add(task)
    task.add_done_callback(_writes.discard)


async def _write(redis: RespClient, key: str, channel_id: int) -> None:
    try:
        await redis.call("SET", key, channel_id, "EX", int(settings.GATEWAY_AFFINITY_TTL))
    except (OSError, RespError) as exc:
        logger.warning("session affinity not stored: %r", exc)
