"""Per-process snapshots of keys, models and routes, so the steady-state hot path reads no database.

Invalidation (a revoked key must stop within seconds on every replica):

- Saving or deleting a Key, User, Team, Model, ModelRoute or Channel (and their allowed-model M2Ms) bumps
  a generation: in this process at once, and in Redis (`gw:gen:keys` / `gw:gen:routes`, see `namespace()`) after the
  transaction commits.
- The per-request admission script returns both generations; a process that sees a new one drops
  its snapshot and re-runs the request from authentication (see `admission`). Entries also expire
  after `GATEWAY_KEY_TTL` (4 s; routes `GATEWAY_CACHE_TTL`, 5 s) as a safety net. The embedded
  default works the same way, on the embedded Redis.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings
from django.db import OperationalError, close_old_connections, connections

from portal.db import use_timeouts

logger = logging.getLogger(__name__)

T = TypeVar("T")


def namespace() -> str:
    """Prefix of every Redis key the gateway uses (tests give each run its own)."""
    return os.environ.get("GATEWAY_REDIS_NAMESPACE") or "gw"


def generation_keys() -> tuple[str, str]:
    ns = namespace()
    return f"{ns}:gen:keys", f"{ns}:gen:routes"


# A key expired by age is still served for this long while it reloads: with GATEWAY_KEY_TTL (4 s)
# a change whose Redis bump was lost still ends within 5 s.
STALE_GRACE = 1.0

# Channel statuses in preference order; anything else (down, credentials_rejected) is a last resort.
_TIER = {"healthy": 0, "unknown": 0, "degraded": 1}
_LAST_RESORT = 2


# The gateway's lookups (key and catalog loads) run on one thread, so its connection is reused and
# can be closed at shutdown; the usage writer has its own thread and connection (`usage`).
_db_executor = ThreadPoolExecutor(
    max_workers=1, thread_name_prefix="gateway-db", initializer=use_timeouts, initargs=("gateway",)
)


def _with_fresh_connection(fn: Callable[..., T], *args: Any) -> T:
    close_old_connections()
    for attempt in range(5):
        try:
            return fn(*args)
        except OperationalError as exc:
            # SQLite (embedded) answers "locked" when another process holds the write lock.
            if "locked" not in str(exc) or attempt == 4:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


async def run_db(fn: Callable[..., T], *args: Any) -> T:
    """Run a synchronous database function on the gateway's database thread."""
    return await asyncio.get_running_loop().run_in_executor(_db_executor, _with_fresh_connection, fn, *args)


async def close_db() -> None:
    await asyncio.get_running_loop().run_in_executor(_db_executor, connections.close_all)


@dataclass(slots=True, frozen=True)
class RouteInfo:
    """One channel serving one public model, with everything the forwarder needs."""

    route_id: int
    channel_id: int
    channel_name: str
    kind: str
    base_url: str
    api_key: str
    priority: int
    weight: int
    status: str
    upstream_id: str
    speaks_messages: bool
    speaks_responses: bool
    model_name: str = ""  # the public model this route serves (an alias's target, in explanations)
    local: bool = False  # the channel is local (`Channel.locality`): local-only requests may use it
    context_window: int | None = None  # served window: discovered, else configured; None = unknown
    max_output_tokens: int | None = None

    @property
    def tier(self) -> int:
        return _TIER.get(self.status, _LAST_RESORT)


@dataclass(slots=True)
class ModelInfo:
    id: int
    name: str
    enabled: bool
    created: int
    context_window: int | None
    max_output_tokens: int | None
    description: str
    balance: str = "weighted"  # channels.choices.BalancePolicy: how `gateway.balance` orders a group
    # Routes grouped by (tier, -priority), best first: `catalog.ordered_routes` draws within a group.
    groups: list[list[RouteInfo]] = field(default_factory=list)
    local_only: bool = False
    is_alias: bool = False
    targets: list[ModelInfo] = field(default_factory=list)  # an alias's models, in the order to try

    @property
    def has_routes(self) -> bool:
        """Something can serve it: routes of its own, or (an alias) an enabled target with routes."""
        return bool(self.groups) or any(t.enabled and t.groups for t in self.targets)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_NORM = re.compile(r"[\s_\-.:/]+")


def normalize_model_name(name: str) -> str:
    """For "did you mean": `Qwen3_32B`, `qwen3-32b` and `qwen3.32b` compare equal."""
    return _NORM.sub("", name.lower())


@dataclass(slots=True)
class Catalog:
    models: dict[str, ModelInfo]
    by_id: dict[int, ModelInfo]
    by_norm: dict[str, list[str]]
    loaded_at: float


@dataclass(slots=True)
class KeyInfo:
    """What the gateway needs of a key and its owner; built once per key per process."""

    id: int
    name: str
    prefix: str  # the key's first characters, as shown in lists (access log); never the key
    owner_id: int
    owner_name: str
    revoked: bool
    expires_at: float | None  # epoch seconds
    owner_active: bool
    key_model_ids: frozenset[int]
    owner_model_ids: frozenset[int]
    networks: tuple[Network, ...]  # empty = any address
    local_only: bool
    owner_is_admin: bool  # may see routing explanations (they name channels) on X-Portal-Route
    limits: dict[str, int | None]
    owner_limits: dict[str, int | None]
    loaded_at: float
    team_id: int | None = None  # the owner's team: its limits are a third scope, its models a third list
    team_model_ids: frozenset[int] = frozenset()
    team_limits: dict[str, int | None] = field(default_factory=dict)
    payload_days: int | None = None  # request logs on (kept this many days), see keys.PayloadLogging

    def may_use(self, model: ModelInfo) -> bool:
        return (
            model.enabled
            and (not self.key_model_ids or model.id in self.key_model_ids)
            and (not self.owner_model_ids or model.id in self.owner_model_ids)
            and (not self.team_model_ids or model.id in self.team_model_ids)
        )


def _load_catalog() -> Catalog:
    from channels.choices import Locality
    from channels.models import AliasTarget, Model, ModelRoute, alias_limits, route_limits

    models: dict[str, ModelInfo] = {}
    by_id: dict[int, ModelInfo] = {}
    for m in Model.objects.all():
        info = ModelInfo(
            id=m.id,
            name=m.name,
            enabled=m.enabled,
            created=int(m.created.timestamp()),
            context_window=None,
            max_output_tokens=None,
            description=m.description,
            balance=m.balance,
            local_only=m.local_only,
            is_alias=m.is_alias,
        )
        models[m.name] = info
        by_id[m.id] = info
    routes: dict[int, list[RouteInfo]] = {}
    ctx: dict[int, list[int]] = {}
    out: dict[int, list[int]] = {}
    for r in ModelRoute.objects.enabled().select_related("channel", "model"):
        ch = r.channel
        try:
            api_key = ch.api_key or ""
        except ValueError:  # undecryptable: the route is unusable, not the whole gateway
            logger.error("channel %s: api_key cannot be decrypted; skipping its routes", ch.name)
            continue
        routes.setdefault(r.model_id, []).append(
            RouteInfo(
                route_id=r.id,
                channel_id=ch.id,
                channel_name=ch.name,
                kind=ch.kind,
                base_url=ch.base_url.rstrip("/"),
                api_key=api_key,
                priority=ch.priority,
                weight=ch.weight,
                status=ch.status,
                upstream_id=r.upstream_id,
                speaks_messages=ch.speaks_messages,
                speaks_responses=ch.speaks_responses,
                model_name=r.model.name,
                local=ch.locality == Locality.LOCAL,
                context_window=r.effective_context_window,
                max_output_tokens=r.max_output_tokens,
            )
        )
        if r.effective_context_window:
            ctx.setdefault(r.model_id, []).append(r.effective_context_window)
        if r.max_output_tokens:
            out.setdefault(r.model_id, []).append(r.max_output_tokens)
    for model_id, rs in routes.items():
        model = by_id.get(model_id)
        if model is None:
            continue
        grouped: dict[tuple[int, int], list[RouteInfo]] = {}
        for ri in rs:
            grouped.setdefault((ri.tier, -ri.priority), []).append(ri)
        model.groups = [grouped[k] for k in sorted(grouped)]
        model.context_window = min(ctx[model_id]) if model_id in ctx else None
        model.max_output_tokens = min(out[model_id]) if model_id in out else None
    for t in AliasTarget.objects.order_by("alias_id", "position"):
        alias, target = by_id.get(t.alias_id), by_id.get(t.target_id)
        if alias is not None and target is not None and alias.is_alias and not target.is_alias:
            alias.targets.append(target)
    for alias in by_id.values():
        if alias.is_alias:
            # What the alias can serve: the largest of its enabled targets' (local routes only
            # when the alias is local-only), as `channels.models.Model.effective_limits` says.
            alias.context_window, alias.max_output_tokens = alias_limits(
                route_limits(
                    (r.context_window, r.max_output_tokens)
                    for g in t.groups
                    for r in g
                    if r.local or not alias.local_only
                )
                for t in alias.targets
                if t.enabled
            )
    by_norm: dict[str, list[str]] = {}
    for name in models:
        by_norm.setdefault(normalize_model_name(name), []).append(name)
    return Catalog(models=models, by_id=by_id, by_norm=by_norm, loaded_at=time.monotonic())


def _load_key(digest: str) -> KeyInfo | None:
    from keys.models import PAYLOAD_LOGGING_RELATED, Key, payload_logging_of

    key = (
        Key.objects.select_related(*PAYLOAD_LOGGING_RELATED)
        .prefetch_related("allowed_models", "owner__allowed_models", "owner__team__allowed_models")
        .filter(key_hash=digest)
        .first()
    )
    if key is None:
        return None
    networks = []
    for cidr in key.ip_allowlist or ():
        try:
            networks.append(ipaddress.ip_network(str(cidr).strip(), strict=False))
        except ValueError:
            logger.warning("key %s: ignoring invalid CIDR %r", key.id, cidr)
    owner = key.owner
    team = owner.team
    logging_policy = payload_logging_of(key)
    return KeyInfo(
        id=key.id,
        name=key.name,
        prefix=key.prefix,
        owner_id=owner.id,
        owner_name=owner.username,
        revoked=key.revoked_at is not None,
        expires_at=key.expires_at.timestamp() if key.expires_at else None,
        owner_active=owner.is_active,
        key_model_ids=frozenset(m.id for m in key.allowed_models.all()),
        owner_model_ids=frozenset(m.id for m in owner.allowed_models.all()),
        networks=tuple(networks),
        local_only=key.local_only,
        owner_is_admin=owner.is_admin,
        limits=key.limits(),
        owner_limits=owner.limits(),
        loaded_at=time.monotonic(),
        team_id=team.id if team is not None else None,
        team_model_ids=frozenset(m.id for m in team.allowed_models.all()) if team is not None else frozenset(),
        team_limits=team.limits() if team is not None else {},
        payload_days=logging_policy.retention_days if logging_policy and logging_policy.enabled else None,
    )


class Snapshot:
    """The process-wide cache. All access happens on the event loop thread."""

    MAX_KEYS = 100_000

    def __init__(self) -> None:
        self.catalog: Catalog | None = None
        self.keys: dict[str, KeyInfo] = {}
        self.missing: dict[str, float] = {}  # digests of unknown keys, with when we looked
        self.generation: tuple[str | None, str | None] | None = None
        self._catalog_lock: asyncio.Lock | None = None
        self.routes_version = 0
        self.keys_version = 0  # a load that started before an invalidation must not be stored
        self._key_locks: dict[str, asyncio.Future[KeyInfo | None]] = {}

    @property
    def ttl(self) -> float:
        """How long a cached key is trusted: every request learns of changes through the Redis
        generation, so this is only a safety net."""
        return float(settings.GATEWAY_KEY_TTL)

    def reset(self) -> None:
        """Forget everything, including loop-bound locks (a new event loop is starting)."""
        self.invalidate()
        self.generation = None
        self._catalog_lock = None
        self._key_locks = {}

    def invalidate(self, *, keys: bool = True, routes: bool = True) -> None:
        if keys:
            self.keys, self.missing = {}, {}
            self.keys_version += 1
        if routes:
            self.catalog = None
            self.routes_version += 1

    def observe_generation(self, gen_keys: str | None, gen_routes: str | None) -> bool:
        """Record the generations Redis reported; True when something changed since last time."""
        previous = self.generation
        self.generation = (gen_keys, gen_routes)
        if previous is None:
            return False  # first answer from Redis in this process: nothing to compare with
        old_keys, old_routes = previous
        changed_keys = gen_keys != old_keys
        changed_routes = gen_routes != old_routes
        if changed_keys or changed_routes:
            self.invalidate(keys=changed_keys, routes=changed_routes)
            return True
        return False

    async def get_catalog(self) -> Catalog:
        """The current catalog. It is reloaded in the background every GATEWAY_CACHE_TTL seconds
        (`refresh_forever`), so a request only waits for a load after an invalidation."""
        cat = self.catalog
        if cat is not None:
            return cat
        if self._catalog_lock is None:
            self._catalog_lock = asyncio.Lock()
        async with self._catalog_lock:
            if self.catalog is None:
                version = self.routes_version
                cat = await run_db(_load_catalog)
                if version == self.routes_version:
                    self.catalog = cat
                return cat
            return self.catalog

    async def refresh_forever(self) -> None:
        """Keep the catalog fresh for changes that send no signal (health checks use update())."""
        while True:
            await asyncio.sleep(float(settings.GATEWAY_CACHE_TTL))
            version = self.routes_version
            try:
                cat = await run_db(_load_catalog)
            except Exception:
                logger.exception("reloading the gateway's model catalog failed; keeping the last one")
                continue
            if version == self.routes_version:
                self.catalog = cat

    async def get_key(self, digest: str) -> KeyInfo | None:
        now = time.monotonic()
        entry = self.keys.get(digest)
        if entry is not None and now - entry.loaded_at < self.ttl:
            return entry
        missing_at = self.missing.get(digest)
        if missing_at is not None and now - missing_at < self.ttl:
            return None
        # One load per digest at a time: a burst of requests with a new key makes one query.
        pending = self._key_locks.get(digest)
        if entry is not None and now - entry.loaded_at < self.ttl + STALE_GRACE:
            # Expired by age only (a change would have dropped it): serve the cached copy while
            # it is reloaded, so a slow database never stalls a key's requests.
            if pending is None:
                task = asyncio.get_running_loop().create_task(self._load_key(digest))
                task.add_done_callback(_log_reload_failure)
            return entry
        if pending is not None:
            return await asyncio.shield(pending)
        return await self._load_key(digest)

    async def _load_key(self, digest: str) -> KeyInfo | None:
        pending = self._key_locks.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[KeyInfo | None] = asyncio.get_running_loop().create_future()
        self._key_locks[digest] = fut
        version = self.keys_version
        try:
            info = await run_db(_load_key, digest)
            if len(self.keys) + len(self.missing) >= self.MAX_KEYS:
                self.keys, self.missing = {}, {}
            if version != self.keys_version:
                pass  # changed meanwhile: answer this request, keep nothing
            elif info is None:
                self.missing[digest] = time.monotonic()
            else:
                self.keys[digest] = info
            fut.set_result(info)
            return info
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            self._key_locks.pop(digest, None)


def _log_reload_failure(task: asyncio.Task[KeyInfo | None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("reloading a key failed; the cached copy is kept for now: %r", task.exception())


snapshot = Snapshot()
