"""Per-process snapshots of keys, models and routes, so the steady-state hot path reads no database.

Invalidation (a revoked key must stop within seconds on every replica):

- Saving or deleting a Key, User, Team, Model, ModelRoute or Channel (and their allowed-model M2Ms) bumps
  a generation: in this process at once, and in Redis (`gw:gen:keys` / `gw:gen:routes`, see `namespace()`) after the
  transaction commits.
- The per-request admission script returns both generations; a process that sees a new one drops
  its snapshot and re-runs the request from authentication (see `admission`). A request refused on
  the snapshot before that script runs (model unknown or not allowed, no price, key expired) asks
  Redis for the generations first and is resolved again when they changed. Entries also expire
  after `GATEWAY_KEY_TTL` (4 s; routes `GATEWAY_CACHE_TTL`, 5 s) as a safety net. The embedded
  default works the same way, on the embedded Redis.

Database outages (ARCHITECTURE.md, "When a dependency fails"): every load runs through `run_db`,
which knows the database's health (`db_health`). While the database is unreachable or stalled, a
key or catalog this process has loaded is served from the snapshot for up to
`GATEWAY_DB_OUTAGE_GRACE` seconds after its last successful load, and so is a key it found
unknown (401: its plaintext is random, nobody could present it before it existed); a key never
seen (or dropped by a change Redis announced before the outage) is answered 503 with Retry-After,
never served from an older copy. The snapshot is also kept on disk (`SnapshotFile`, encrypted, 0600), so a gateway
restarted during an outage serves the keys its replicas had loaded.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import logging
import os
import pickle
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connections
from django.utils import timezone as dj_timezone

from channels.prices import Rates, fallback_rates, in_effect, rates_of, to_nanos
from keys.choices import Pricing
from portal.db import retry_when_locked, use_timeouts
from portal.hot import hot
from portal.secrets import decrypt_bytes, encrypt_bytes

from .http import GatewayError
from .resp import RespError

logger = logging.getLogger(__name__)

T = TypeVar("T")


# `os.environ` as the bytes it is kept in (POSIX): one dict lookup instead of `os.environ.get`'s
# key encoding and value decoding (~8 k instructions, twice a request). `os.environ`'s writes
# (monkeypatch.setenv too) update it.
_ENVIRON: dict[bytes, bytes] | None = getattr(os.environ, "_data", None) if os.name == "posix" else None
_NAMESPACE = b"GATEWAY_REDIS_NAMESPACE"
# (the variable's raw value, the namespace, its generation keys and its Redis epoch key)
_namespace_cache: tuple[bytes | None, str, tuple[str, str, str]] = (
    None,
    "gw",
    ("gw:gen:keys", "gw:gen:routes", "gw:epoch"),
)


def _namespace() -> tuple[str, tuple[str, str, str]]:
    global _namespace_cache
    raw = _ENVIRON.get(_NAMESPACE) if _ENVIRON is not None else None
    cached = _namespace_cache
    if _ENVIRON is None or cached[0] != raw:  # not POSIX: read each time
        ns = os.environ.get("GATEWAY_REDIS_NAMESPACE") or "gw"
        cached = _namespace_cache = (raw, ns, (f"{ns}:gen:keys", f"{ns}:gen:routes", f"{ns}:epoch"))
    return cached[1], cached[2]


def namespace() -> str:
    """Prefix of every Redis key the gateway uses (tests give each run its own)."""
    return _namespace()[0]


def generation_keys() -> tuple[str, str]:
    """The Redis keys of the cache generations (keys, routes) in this namespace."""
    keys = _namespace()[1]
    return keys[0], keys[1]


def new_generation() -> str:
    """A value for a generation key that it never held before. Not a counter: a Redis restarted
    without its data would count again from 1, and a replica that learnt 1 before the restart would
    take the next change's 1 for the one it has (a revoked key served from its cache). A process
    only compares a generation with the last it saw (`Snapshot.observe_generation`)."""
    return secrets.token_hex(8)


def admission_keys() -> tuple[str, str, str]:
    """The generation keys and the epoch key (`limits.ADMIT_LUA`): one tuple, made once."""
    return _namespace()[1]


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


class DatabaseUnavailable(GatewayError):
    """The database did not answer (refused, stalled past its deadline, or known to be down and not
    due for another try): a 503 with Retry-After in the OpenAI shape when nothing cached can serve."""

    def __init__(self) -> None:
        super().__init__(
            503,
            "The gateway cannot reach the portal's database right now; retry in a few seconds.",
            code="database_unavailable",
            headers=[(b"retry-after", b"5")],
        )


class DatabaseHealth:
    """What this process knows of the database: when it last answered, since when it has not.
    While it is down, one load is tried per `PROBE_INTERVAL`; the others fail at once, so requests
    never queue behind a stalled connection on the one database thread."""

    PROBE_INTERVAL = 1.0
    SLOW_AFTER = 1.0  # a load running longer than this: serve the cached copy instead of waiting

    def __init__(self) -> None:
        self.last_ok = time.time()  # wall clock: the on-disk snapshot carries it across restarts
        self.down_since: float | None = None
        self.busy_since: float | None = None  # monotonic start of the load running now
        self._last_try = 0.0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def degraded(self) -> bool:
        """Down, or the load running now has taken longer than a healthy database would."""
        busy = self.busy_since
        return self.down or (busy is not None and time.monotonic() - busy > self.SLOW_AFTER)

    def may_try(self) -> bool:
        return self.down_since is None or time.monotonic() - self._last_try >= self.PROBE_INTERVAL

    def staleness(self) -> float:
        """Seconds since this process (or, after a restart, the snapshot it restored) last read the
        database; the /readyz answer and `gateway_snapshot_staleness_seconds` export it."""
        return max(0.0, time.time() - self.last_ok)

    def mark_ok(self) -> None:
        self.last_ok = time.time()
        if self.down_since is not None:
            logger.warning("database reachable again after %.0f s", time.time() - self.down_since)
            self.down_since = None

    def mark_failed(self, exc: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.time()
            logger.error("database unreachable (%s): serving from the snapshot", exc.__class__.__name__)


db_health = DatabaseHealth()


def outage_grace() -> float:
    return float(settings.GATEWAY_DB_OUTAGE_GRACE)


def _with_fresh_connection(fn: Callable[..., T], *args: Any) -> T:
    if not db_health.may_try():  # went down while this job waited its turn
        raise DatabaseUnavailable
    db_health._last_try = time.monotonic()
    db_health.busy_since = time.monotonic()
    try:
        close_old_connections()
        return retry_when_locked(lambda: fn(*args))
    finally:
        db_health.busy_since = None


async def run_db(fn: Callable[..., T], *args: Any) -> T:
    """Run a synchronous database function on the gateway's database thread. Raises
    DatabaseUnavailable (a 503) when the database is down, refused or stalled past its deadline."""
    if not db_health.may_try():
        raise DatabaseUnavailable
    try:
        result = await asyncio.get_running_loop().run_in_executor(_db_executor, _with_fresh_connection, fn, *args)
    except (OperationalError, InterfaceError) as exc:
        db_health.mark_failed(exc)
        close_db_soon()
        raise DatabaseUnavailable from exc
    db_health.mark_ok()
    return result


async def close_db() -> None:
    await asyncio.get_running_loop().run_in_executor(_db_executor, connections.close_all)


def close_db_soon() -> None:
    """Drop the database thread's broken connection (the next load reconnects)."""
    _db_executor.submit(connections.close_all)


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
    # The route's price in effect when the catalog was loaded and any that start later, oldest
    # first (`channels.RoutePrice`); empty: no price.
    prices: tuple[Rates, ...] = ()
    unpriced: str = ""  # channels.choices.UnpricedPolicy while it has no price ("": the portal's default)

    @property
    def tier(self) -> int:
        return _TIER.get(self.status, _LAST_RESORT)

    def rates(self, at: float) -> tuple[Rates | None, str]:
        return rates_at(self.prices, at, self.unpriced)


def rates_at(prices: tuple[Rates, ...], at: float, unpriced: str = "") -> tuple[Rates | None, str]:
    """The price of a call made at `at` (epoch seconds) and how it was found (`keys.choices.Pricing`):
    the price in effect, else the fallback when the admin chose one (for the route, `unpriced`,
    else for the portal), else none."""
    found = in_effect(prices, at)
    if found is not None:
        return found, Pricing.PRICED
    if (unpriced or hot.PORTAL_UNPRICED_ROUTES) == "fallback":
        return fallback_rates(), Pricing.FALLBACK
    return None, Pricing.NONE


@dataclass(slots=True, frozen=True)
class OnDemandInfo:
    """A model served by an on-demand deployment (`hosts.ondemand`): listed while it is stopped,
    started by the first request (`gateway.ondemand`)."""

    deployment_id: int
    budget: float  # seconds a request may wait for it to start
    estimate: float  # seconds a cold start takes (its history's median)
    # The price of the route its channel had when it last ran (kept, disabled, while it is
    # stopped): what a cold request reserves on a budget before it starts the model.
    prices: tuple[Rates, ...] = ()
    unpriced: str = ""  # that route's channels.choices.UnpricedPolicy
    context_window: int | None = None  # as its server reported it at its last start, else as configured

    def rates(self, at: float) -> tuple[Rates | None, str]:
        return rates_at(self.prices, at, self.unpriced)


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
    kind: str = "chat"  # channels.choices.ModelKind: an embedding model answers /v1/embeddings only
    # Routes grouped by (tier, -priority), best first: `catalog.ordered_routes` draws within a group.
    groups: list[list[RouteInfo]] = field(default_factory=list)
    local_only: bool = False
    is_alias: bool = False
    targets: list[ModelInfo] = field(default_factory=list)  # an alias's models, in the order to try
    on_demand: OnDemandInfo | None = None

    def starts_for(self, local: bool) -> ModelInfo | None:
        """The on-demand model a request for this one starts when no channel it may use serves it
        now (`serves`): itself, or an alias's first enabled on-demand target (once that runs, the
        request is routed through the alias as usual). None when something serves it, or nothing
        can be started for it. `local`: the request may only use local channels (a local-only key)."""
        if (self.on_demand is None and not self.is_alias) or self.serves(local):
            return None
        if self.on_demand is not None:
            return self
        return next((t for t in self.targets if t.enabled and t.on_demand is not None), None)

    def serves(self, local: bool) -> bool:
        """A channel a request may use serves it now: a route of its own, or (an alias) of an enabled
        target's, on a local channel when the request is local-only (`local`, a local-only key), the
        model is, or the alias or that target is: the routes `catalog.select_routes` keeps."""
        local = local or self.local_only
        if self.is_alias:
            return any(t.enabled and t.serves(local) for t in self.targets)
        return any(r.local or not local for group in self.groups for r in group)

    def limit_pairs(self, local: bool) -> list[tuple[int | None, int | None]]:
        """(window, max output) of each route a request may use (`local`: local ones only, as in
        `serves`); for an on-demand model nothing such serves now, the window of the server its
        request starts."""
        local = local or self.local_only
        pairs = [(r.context_window, r.max_output_tokens) for g in self.groups for r in g if r.local or not local]
        if not pairs and self.on_demand is not None:
            pairs.append((self.on_demand.context_window, None))
        return pairs

    @property
    def has_routes(self) -> bool:
        """Something can serve it: routes of its own, or (an alias) an enabled target with routes
        (on any channel: `serves` says whether one a given request may use)."""
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
    loaded_at: float


@dataclass(slots=True, frozen=True)
class BudgetInfo:
    """One `keys.Budget` as the admission script needs it (amounts in nano-units)."""

    id: int
    label: str  # "key", "user" or "team"
    window: str  # keys.choices.BudgetWindow
    amount: int
    topup: int = 0
    topup_until: float | None = None  # epoch seconds
    alert_percent: int | None = None

    def cap(self, at: float) -> int:
        return self.amount + (self.topup if self.topup_until is not None and self.topup_until > at else 0)


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
    budgets: tuple[BudgetInfo, ...] = ()  # the key's, its owner's and the owner's team's

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
            kind=m.kind,
            local_only=m.local_only,
            is_alias=m.is_alias,
        )
        models[m.name] = info
        by_id[m.id] = info
    prices = _load_prices()
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
                prices=prices.get(r.id, ()),
                unpriced=r.unpriced,
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
    from hosts.ondemand.services import catalog_entries

    entries = catalog_entries()
    served = ModelRoute.objects.filter(channel_id__in=[e["channel_id"] for e in entries.values() if e["channel_id"]])
    route_of = {(c, m): (r, u) for r, c, m, u in served.values_list("id", "channel_id", "model_id", "unpriced")}
    for name, entry in entries.items():
        model = models.get(name)
        if model is not None and not model.is_alias:
            route_id, unpriced = route_of.get((entry["channel_id"], model.id), (None, ""))
            model.on_demand = OnDemandInfo(
                entry["deployment_id"],
                entry["budget"],
                entry["estimate"],
                prices.get(route_id, ()) if route_id else (),
                unpriced,
                entry["context_window"],
            )
            if not model.groups and model.context_window is None:
                model.context_window = entry["context_window"]
    for t in AliasTarget.objects.order_by("alias_id", "position"):
        alias, target = by_id.get(t.alias_id), by_id.get(t.target_id)
        if alias is not None and target is not None and alias.is_alias and not target.is_alias:
            alias.targets.append(target)
    for alias in by_id.values():
        if alias.is_alias:
            # What the alias can serve: the largest of its enabled targets' (local routes only
            # when the alias is local-only; a cold target's, the window its start will serve), as
            # `clientconfigs.services.model_specs` says.
            alias.context_window, alias.max_output_tokens = alias_limits(
                route_limits(t.limit_pairs(alias.local_only)) for t in alias.targets if t.enabled
            )
    return Catalog(models=models, by_id=by_id, loaded_at=time.monotonic())


def _load_prices() -> dict[int, tuple[Rates, ...]]:
    """Per route: its price in effect now and those that start later, oldest first."""
    from channels.models import RoutePrice

    now = dj_timezone.now()
    out: dict[int, list[Rates]] = {}
    for p in RoutePrice.objects.order_by("route_id", "effective_from", "id"):
        rates = rates_of(
            since=p.effective_from.timestamp(),
            input=p.input,
            output=p.output,
            cached_input=p.cached_input,
            cache_write=p.cache_write,
        )
        mine = out.setdefault(p.route_id, [])
        if p.effective_from <= now and mine and mine[-1].since <= now.timestamp():
            mine[-1] = rates  # a newer price in effect replaces the older one
        else:
            mine.append(rates)
    return {route_id: tuple(rs) for route_id, rs in out.items()}


def _budgets_of(key: Any) -> tuple[BudgetInfo, ...]:
    from keys.models import Budget

    return tuple(
        BudgetInfo(
            id=b.id,
            label=b.label,
            window=b.window,
            amount=to_nanos(b.amount),
            topup=to_nanos(b.topup),
            topup_until=b.topup_until.timestamp() if b.topup_until else None,
            alert_percent=b.alert_percent,
        )
        for b in Budget.objects.covering(key).order_by("id")
    )


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
        budgets=_budgets_of(key),
    )


@dataclass(slots=True)
class Saved:
    catalog: Catalog
    keys: dict[str, KeyInfo]
    generation: tuple[str | None, str | None] | None
    saved_at: float  # wall clock


# The pickled shape of KeyInfo, RouteInfo and OnDemandInfo: a file of another shape is ignored (2: budgets, prices;
# 3: an on-demand model's prices, each route's policy while unpriced; 4: an on-demand model's window).
SNAPSHOT_FORMAT = 4


class SnapshotFile:
    """The snapshot on disk (`<data folder>/gateway-snapshot.bin`), shared by the replicas that share
    the data folder: each merges the keys it loaded into it (under a file lock, newest load wins, only
    entries loaded under the current key generation) every GATEWAY_CACHE_TTL while the database
    answers. Pickled, then encrypted and authenticated with PORTAL_ENCRYPTION_KEYS (it holds the
    channels' API keys and the key hashes); a file no key opens is ignored, so nothing another user
    wrote is ever unpickled. Mode 0600."""

    NAME = "gateway-snapshot.bin"

    def __init__(self) -> None:
        self.known: set[str] = set()  # digests in the file (a key gone from the database leaves it)

    @property
    def path(self) -> Path:
        return Path(settings.GATEWAY_STATE_DIR) / self.NAME

    def _read(self) -> dict[str, Any] | None:
        try:
            blob = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            data = pickle.loads(decrypt_bytes(blob))  # noqa: S301 - authenticated with our own key
        except Exception as exc:
            logger.warning("ignoring the gateway snapshot on disk: %s", exc)
            return None
        return data if isinstance(data, dict) and data.get("v") == SNAPSHOT_FORMAT else None

    def save(
        self,
        catalog: Catalog,
        keys: dict[str, KeyInfo],
        gone: list[str],
        generation: tuple[str | None, str | None] | None,
    ) -> None:
        now, mono = time.time(), time.monotonic()
        gen_keys = generation[0] if generation else None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = self._read() or {}
            entries: dict[str, tuple[float, KeyInfo]] = {}
            if current.get("gen_keys") == gen_keys:  # else they predate (or postdate) a change
                entries = dict(current.get("keys", {}))
            for digest, info in keys.items():
                wall = now - (mono - info.loaded_at)
                old = entries.get(digest)
                if old is None or old[0] <= wall:
                    entries[digest] = (wall, info)
            for digest in gone:
                entries.pop(digest, None)
            grace = outage_grace()
            entries = {d: e for d, e in entries.items() if now - e[0] <= grace}
            data = {
                "v": SNAPSHOT_FORMAT,
                "saved_at": now,
                "generation": generation,
                "gen_keys": gen_keys,
                "catalog": (now - (mono - catalog.loaded_at), catalog),
                "keys": entries,
            }
            blob = encrypt_bytes(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, blob)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            self.known = set(entries)

    def load(self) -> Saved | None:
        data = self._read()
        if data is None:
            return None
        now, mono = time.time(), time.monotonic()
        if now - float(data["saved_at"]) > outage_grace():
            return None
        wall, catalog = data["catalog"]
        catalog.loaded_at = mono - (now - wall)
        keys = {}
        for digest, (loaded, info) in data["keys"].items():
            info.loaded_at = mono - (now - loaded)
            keys[digest] = info
        self.known = set(keys)
        return Saved(catalog=catalog, keys=keys, generation=data["generation"], saved_at=float(data["saved_at"]))


class Snapshot:
    """The process-wide cache. All access happens on the event loop thread."""

    MAX_KEYS = 100_000

    def __init__(self) -> None:
        self.catalog: Catalog | None = None
        self.last_catalog: Catalog | None = None  # the last one loaded: served while the database is down
        self.keys: dict[str, KeyInfo] = {}
        self.missing: dict[str, float] = {}  # digests of unknown keys, with when we looked
        self.generation: tuple[str | None, str | None] | None = None
        self._catalog_lock: asyncio.Lock | None = None
        self.routes_version = 0
        self.keys_version = 0  # a load that started before an invalidation must not be stored
        self._key_locks: dict[str, asyncio.Future[KeyInfo | None]] = {}
        self.dirty = False  # loaded something since the last save to disk
        self.file = SnapshotFile()

    @property
    def ttl(self) -> float:
        """How long a cached key is trusted: every request learns of changes through the Redis
        generation, so this is only a safety net."""
        return float(hot.GATEWAY_KEY_TTL)

    def reset(self) -> None:
        """Forget everything, including loop-bound locks (a new event loop is starting)."""
        self.invalidate()
        self.last_catalog = None
        self.generation = None
        self._catalog_lock = None
        self._key_locks = {}

    def invalidate(self, *, keys: bool = True, routes: bool = True) -> None:
        # A dropped key is never served from an older copy, even during an outage: a revocation
        # announced before the database went away holds (SECURITY.md). Loads still running were
        # started before the change: their waiters get their answer, but a request from now on
        # starts a load of its own, whose result is kept (joining an old one, it got data from
        # before the change and left the key uncached, to be answered 503 in a later outage).
        if keys:
            self.keys, self.missing = {}, {}
            self._key_locks = {}
            self.keys_version += 1
        if routes:
            self.catalog = None
            self.routes_version += 1

    async def learn_generations(self, read: Callable[[], Awaitable[tuple[str | None, str | None]]]) -> bool | None:
        """Ask Redis (`read`: `RedisLimiter.generations`) for the cache generations and record them:
        True when something changed since last time (the stale parts are dropped), None when Redis
        did not answer."""
        try:
            generations = await read()
        except (OSError, RespError):
            return None
        return self.observe_generation(*generations)

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

    def _usable_in_outage(self, cat: Catalog | None) -> Catalog | None:
        if cat is not None and time.monotonic() - cat.loaded_at <= outage_grace():
            return cat
        return None

    async def get_catalog(self, *, fresh: bool = False) -> Catalog:
        """The current catalog. It is reloaded in the background every GATEWAY_CACHE_TTL seconds
        (`refresh_forever`), so a request only waits for a load after an invalidation. While the
        database is unreachable, the last one loaded (routing changes are not access changes), and
        while it is slow too, unless the caller needs the `fresh` one (it knows the last is stale)."""
        cat = self.catalog
        if cat is not None:
            return cat
        if self._catalog_lock is None:
            self._catalog_lock = asyncio.Lock()
        fallback = self._usable_in_outage(self.last_catalog)
        if fallback is not None and db_health.degraded():
            return fallback
        try:
            patience = None if fresh else self._patience(fallback)
            return await asyncio.wait_for(asyncio.shield(self._load_catalog()), patience)
        except (DatabaseUnavailable, TimeoutError):
            if fallback is None:
                raise DatabaseUnavailable from None
            return fallback

    async def reload_catalog(self) -> Catalog:
        """Load the catalog now and wait for it, whatever the database's speed (a model that just
        started on demand must be routed to, not served from the older copy)."""
        self.invalidate(keys=False, routes=True)
        if self._catalog_lock is None:
            self._catalog_lock = asyncio.Lock()
        return await self._load_catalog()

    @staticmethod
    def _patience(fallback: object) -> float | None:
        """How long a request waits for a load when a cached copy could answer it instead."""
        return DatabaseHealth.SLOW_AFTER if fallback is not None else None

    async def _load_catalog(self) -> Catalog:
        assert self._catalog_lock is not None
        async with self._catalog_lock:
            if self.catalog is None:
                version = self.routes_version
                cat = await run_db(_load_catalog)
                self.last_catalog = cat
                self.dirty = True
                if version == self.routes_version:
                    self.catalog = cat
                return cat
            return self.catalog

    async def refresh_forever(self) -> None:
        """Keep the catalog fresh for changes that send no signal (health checks use update()),
        and the on-disk copy of the snapshot current."""
        while True:
            await asyncio.sleep(float(settings.GATEWAY_CACHE_TTL))
            version = self.routes_version
            try:
                cat = await run_db(_load_catalog)
            except DatabaseUnavailable:
                continue  # logged once by db_health; the last catalog is kept
            except Exception:
                logger.exception("reloading the gateway's model catalog failed; keeping the last one")
                continue
            self.last_catalog = cat
            if version == self.routes_version:
                self.catalog = cat
            await self.save()

    async def save(self) -> None:
        """Write what changed to the on-disk snapshot (only from fresh data: never during an outage)."""
        if not self.dirty or db_health.down or self.last_catalog is None:
            return
        self.dirty = False
        keys = {d: k for d, k in self.keys.items()}
        gone = list(self.missing)
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, self.file.save, self.last_catalog, keys, gone, self.generation
            )
        except Exception:
            logger.exception("saving the gateway's snapshot to disk failed")

    def restore(self) -> None:
        """At start: the on-disk snapshot, if young enough, as the fallback for an outage. Its keys
        are due for a reload at once; its generation makes the first Redis answer drop them if
        anything changed since it was saved."""
        saved = self.file.load()
        if saved is None:
            return
        for model in saved.catalog.models.values():
            if not hasattr(model, "on_demand"):  # saved by a version before models on demand
                model.on_demand = None
        self.last_catalog = saved.catalog
        self.keys = saved.keys
        self.generation = saved.generation
        db_health.last_ok = saved.saved_at
        logger.info("restored the gateway snapshot saved %.0f s ago (%d keys)", db_health.staleness(), len(self.keys))

    def fresh_key(self, digest: str) -> KeyInfo | None:
        """The cached key when it is fresh: what `get_key` answers without waiting for anything
        (checked first, it spares a request the coroutine); None otherwise, then ask `get_key`."""
        entry = self.keys.get(digest)
        if entry is not None and time.monotonic() - entry.loaded_at < self.ttl:
            return entry
        return None

    async def get_key(self, digest: str) -> KeyInfo | None:
        fresh = self.fresh_key(digest)
        if fresh is not None:
            return fresh
        now = time.monotonic()
        entry = self.keys.get(digest)
        age = now - entry.loaded_at if entry is not None else 0.0
        missing_at = self.missing.get(digest)
        if missing_at is not None and (
            now - missing_at < self.ttl or (db_health.degraded() and now - missing_at <= outage_grace())
        ):
            return None  # unknown, through an outage too: a plaintext is random, none is presented before it exists
        # One load per digest at a time: a burst of requests with a new key makes one query.
        pending = self._key_locks.get(digest)
        in_outage = db_health.degraded() and age <= outage_grace()
        usable = entry is not None and (age < self.ttl + STALE_GRACE or in_outage)
        if usable:
            # Expired by age only (a change would have dropped it), or the database is down: serve
            # the cached copy while it is reloaded, so a slow database never stalls a key's requests.
            if pending is None and db_health.may_try():
                task = asyncio.get_running_loop().create_task(self._load_key(digest))
                task.add_done_callback(_log_reload_failure)
            return entry
        load = asyncio.shield(pending if pending is not None else asyncio.ensure_future(self._load_key(digest)))
        if entry is None or age > outage_grace():
            return await load
        try:  # a copy a little older than the TTL: wait for the reload, but not through a stall
            return await asyncio.wait_for(load, DatabaseHealth.SLOW_AFTER)
        except (DatabaseUnavailable, TimeoutError):
            return entry

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
                self.dirty = self.dirty or digest in self.file.known
            else:
                self.keys[digest] = info
                self.dirty = True
            fut.set_result(info)
            return info
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            if self._key_locks.get(digest) is fut:  # not a newer load started after an invalidation
                del self._key_locks[digest]


def _log_reload_failure(task: asyncio.Task[KeyInfo | None]) -> None:
    if not task.cancelled() and task.exception() is not None and not isinstance(task.exception(), DatabaseUnavailable):
        logger.warning("reloading a key failed; the cached copy is kept for now: %r", task.exception())


snapshot = Snapshot()
