"""Prometheus metrics of this process, and `GET /metrics` (bearer token `PORTAL_METRICS_TOKEN`).

Per-process scrape, not multiprocess mode: every deployment runs one ASGI process per container
(`portal up`, the Dockerfile and docker-compose.yml; no `--workers`), so Prometheus scrapes each
replica and sums over `instance` (README: "Metrics"). The samples stay in this process's memory:
no mmap file and lock per sample, no files of dead processes to clean up.

Every finished request is counted where its usage record is queued (`UsageWriter.record` calls
`observe`), so the counters and the usage records agree by construction: requests by model,
channel, surface and status, tokens (prompt, completion, cached, cache_creation), cost (and the
requests without a price), request duration and time to first token. The label children of each
(model, channel, surface, status) are looked up once and kept, so a request costs a dict lookup
and a few increments. In-flight requests, the usage writer's queue and the channels' breakers
(`gateway_channel_cooling`, `gateway_channel_cooldowns_total`) are read when scraped. The
channels and hosts apps register their own collectors (channel status, probe TTFT, launch jobs),
which read the database at scrape time; so the page is rendered on the gateway's database thread.
"""

from __future__ import annotations

import hmac
import logging
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from django.conf import settings
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .breaker import breakers
from .cache import DatabaseUnavailable, db_health, run_db, snapshot
from .http import GatewayError, Request, send_bytes

if TYPE_CHECKING:
    from .usage import UsageEvent

logger = logging.getLogger(__name__)

REQUESTS = Counter(
    "gateway_requests",
    "Finished gateway requests (one per usage record), by public model, channel, API surface and usage status.",
    ["model", "channel", "surface", "status"],
)
TOKENS = Counter(
    "gateway_tokens",
    "Tokens of finished requests by type: prompt, completion, cached (prompt tokens read from a prompt "
    "cache, part of prompt) and cache_creation (written to one, Anthropic).",
    ["model", "channel", "type"],
)
DURATION = Histogram(
    "gateway_request_duration_seconds",
    "Time from admission to the last byte of a finished request.",
    ["model", "channel"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900),
)
TTFT = Histogram(
    "gateway_ttft_seconds",
    "Time to first token: from admission to the first event of a stream, or to a JSON answer's body.",
    ["model", "channel"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)
REFUSALS = Counter(
    "gateway_limiter_refusals",
    "Requests the limiter refused, by the limit that refused them (`unavailable`: Redis did not answer) "
    "and whose it was (key, user or team).",
    ["limit", "scope"],
)
ONDEMAND_WAIT = Histogram(
    "gateway_ondemand_wait_seconds",
    "Time a request to an on-demand model waited for it to start (its queue wait), in this process.",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)
ONDEMAND_REFUSED = Counter(
    "gateway_ondemand_refused",
    "Requests to a cold on-demand model answered 503 instead of waiting, by why: queue_full, no_wait "
    "(Prefer: wait=0), budget (it did not start in time), failed (its start failed).",
    ["reason"],
)
COST = Counter(
    "gateway_cost",
    "Cost of finished requests in the portal's currency (PORTAL_CURRENCY, the `currency` label), from the "
    "price of the route that served each when it finished (the fallback price where the admin chose one).",
    ["model", "channel", "currency"],
)
UNPRICED = Counter(
    "gateway_unpriced_requests",
    "Finished requests with tokens whose route had no price (their cost is unknown, not 0).",
    ["model", "channel"],
)
FLUSH_ERRORS = Counter("gateway_usage_flush_errors", "Usage batches whose write failed (kept for the next flush).")


class InFlight:
    """Gateway requests being handled now (`asgi.handle` counts them; read when scraped)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


IN_FLIGHT = InFlight()
Gauge("gateway_in_flight_requests", "Gateway requests being handled by this process.").set_function(lambda: IN_FLIGHT.n)
# Its value is read from the usage writer when scraped (`state` sets the function).
QUEUE_DEPTH = Gauge("gateway_usage_queue_depth", "Usage records queued in this process, not yet written.")
Gauge(
    "gateway_snapshot_staleness_seconds",
    "Seconds since this process last read the database (keys, models and routes are served from its "
    "snapshot meanwhile, for up to GATEWAY_DB_OUTAGE_GRACE).",
).set_function(db_health.staleness)
Gauge(
    "gateway_database_up", "1 while this process reaches the database, 0 while it serves from its snapshot."
).set_function(lambda: 0.0 if db_health.down else 1.0)
# Read from the usage writer when scraped (`state` sets the function).
JOURNAL_DEPTH = Gauge(
    "gateway_usage_journal_events", "Usage records waiting in this process's journal for the database to answer."
)


class BreakerCollector(Collector):
    """The channels' breakers in this process (`gateway.breaker`), read when scraped."""

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, CounterMetricFamily]:
        cooling = GaugeMetricFamily(
            "gateway_channel_cooling",
            "Channels whose breaker is open in this process (they got no answer in time): 1 while requests "
            "try them last, 0 once the cooldown is over and the next request tries them again.",
            labels=["channel"],
        )
        cooldowns = CounterMetricFamily(
            "gateway_channel_cooldowns",
            "Times this process's breaker of a channel opened (a failed try after a cooldown opens it again).",
            labels=["channel"],
        )
        return cooling, cooldowns

    def collect(self) -> Iterator[Metric]:
        cooling, cooldowns = self._families()
        now = breakers.clock()
        for b in list(breakers.open.values()):  # (the event loop changes it meanwhile)
            cooling.add_metric([b.channel_name], 1.0 if b.trial or now < b.until else 0.0)
        for name, n in list(breakers.opened.items()):
            cooldowns.add_metric([name], n)
        yield cooling
        yield cooldowns


REGISTRY.register(BreakerCollector())

# (model, channel id, surface, status) -> the label children one request touches, as their values
# (`_Fast`): what `Counter.inc` and `Histogram.observe` come down to, without their per-call checks.
_children: dict[tuple[str, int | None, str, str], _Fast] = {}


class _Value(Protocol):
    def inc(self, amount: float) -> None: ...


class _Buckets:
    """A histogram child's sum and buckets: `Histogram.observe` without an exemplar."""

    __slots__ = ("bounds", "buckets", "sum")

    def __init__(self, child: Histogram) -> None:
        self.sum: _Value = child._sum
        self.buckets: list[_Value] = child._buckets
        self.bounds: list[float] = child._upper_bounds

    def observe(self, amount: float) -> None:
        self.sum.inc(amount)
        if amount <= self.bounds[-1]:  # +Inf: all but NaN, which no bucket counts
            self.buckets[bisect_left(self.bounds, amount)].inc(1)


class _Fast:
    """The values one request increments. The children are checked observable once (`labels`
    made them so); each increment is then its value's own locked `inc`, ~4 k instructions less a
    request than the metrics' public `inc`/`observe` (a Python frame and two checks each)."""

    __slots__ = ("cached", "completion", "cost", "created", "duration", "prompt", "requests", "ttft", "unpriced")

    def __init__(self, model: str, channel_id: int | None, surface: str, status: str) -> None:
        channel = channel_name(channel_id)
        self.requests: _Value = REQUESTS.labels(model, channel, surface, status)._value
        self.prompt: _Value = TOKENS.labels(model, channel, "prompt")._value
        self.completion: _Value = TOKENS.labels(model, channel, "completion")._value
        self.cached: _Value = TOKENS.labels(model, channel, "cached")._value
        self.created: _Value = TOKENS.labels(model, channel, "cache_creation")._value
        self.duration = _Buckets(DURATION.labels(model, channel))
        self.ttft = _Buckets(TTFT.labels(model, channel))
        self.cost: _Value = COST.labels(model, channel, str(settings.PORTAL_CURRENCY))._value
        self.unpriced: _Value = UNPRICED.labels(model, channel)._value


def channel_name(channel_id: int | None) -> str:
    """The channel's name from the catalog snapshot ('' for none, its id when it is not there)."""
    if channel_id is None:
        return ""
    catalog = snapshot.catalog
    if catalog is not None:
        for info in catalog.models.values():
            for group in info.groups:
                for route in group:
                    if route.channel_id == channel_id:
                        return route.channel_name
    return str(channel_id)


def observe(event: UsageEvent) -> None:
    """Count one finished request (called with its usage record)."""
    key = (event.model, event.channel_id, event.surface, event.status)
    fast = _children.get(key)
    if fast is None:
        fast = _children[key] = _Fast(*key)
    fast.requests.inc(1)
    if event.prompt_tokens > 0:
        fast.prompt.inc(event.prompt_tokens)
    if event.completion_tokens > 0:
        fast.completion.inc(event.completion_tokens)
    if event.cached_tokens > 0:
        fast.cached.inc(event.cached_tokens)
    if event.cache_creation_tokens > 0:
        fast.created.inc(event.cache_creation_tokens)
    if event.latency_ms is not None:
        fast.duration.observe(event.latency_ms / 1000)
    if event.ttft_ms is not None:
        fast.ttft.observe(event.ttft_ms / 1000)
    if event.cost_nanos is None:
        fast.unpriced.inc(1)
    elif event.cost_nanos > 0:
        fast.cost.inc(event.cost_nanos / 1e9)


def refused(limit: str, scope: str) -> None:
    REFUSALS.labels(limit or "unknown", scope).inc()


# ------------------------------------------------------------------------------------ /metrics


async def serve(req: Request) -> None:
    """The Prometheus text format, for `Authorization: Bearer $PORTAL_METRICS_TOKEN` only: 404
    while no token is set (the endpoint is off), 401 for a missing or wrong one."""
    token = str(settings.PORTAL_METRICS_TOKEN)
    if not token:
        raise GatewayError(404, "Metrics are off: set PORTAL_METRICS_TOKEN to turn on /metrics.", code="not_found")
    sent = req.headers.get("authorization", "")
    if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        raise GatewayError(
            401,
            "Send the metrics token as `Authorization: Bearer <PORTAL_METRICS_TOKEN>`.",
            code="invalid_metrics_token",
            headers=[(b"www-authenticate", b'Bearer realm="metrics"')],
        )
    try:
        body = await run_db(generate_latest, REGISTRY)
    except DatabaseUnavailable:
        # The collectors that read the database cannot answer: the gateway's own series still do.
        body = generate_latest(REGISTRY.restricted_registry(_own_names()))
    await send_bytes(req.send, 200, body, content_type=CONTENT_TYPE_LATEST.encode())


def _own_names() -> list[str]:
    """The names of this process's in-memory series (not the apps' database collectors)."""
    from portal.metrics import database_collectors

    skip = database_collectors()
    return [name for name, c in REGISTRY._names_to_collectors.items() if c not in skip]


def ondemand_waited(seconds: float) -> None:
    ONDEMAND_WAIT.observe(seconds)


def ondemand_refused(reason: str) -> None:
    ONDEMAND_REFUSED.labels(reason).inc()
