"""Probe history: pruning, hourly aggregates, chart series and the per-channel summaries the UI shows."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q, Sum
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext

from channels.choices import ChannelStatus
from channels.models import AlertDelivery, Channel, ModelRoute, ProbeHourly, ProbeResult, StatusChange
from portal.dashboard import Attention


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return round(ordered[rank - 1], 2)


def _hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def prune(now: dt.datetime | None = None) -> dict[str, int]:
    """Delete raw probes older than PORTAL_PROBE_RETENTION_DAYS and aggregates past theirs."""
    now = now or timezone.now()
    raw_cut = now - dt.timedelta(days=settings.PORTAL_PROBE_RETENTION_DAYS)
    hourly_cut = now - dt.timedelta(days=settings.PORTAL_PROBE_HOURLY_RETENTION_DAYS)
    probes, _ = ProbeResult.objects.filter(created__lt=raw_cut).delete()
    hours, _ = ProbeHourly.objects.filter(hour__lt=hourly_cut).delete()
    changes, _ = StatusChange.objects.filter(created__lt=hourly_cut).delete()
    deliveries, _ = AlertDelivery.objects.filter(created__lt=hourly_cut).delete()
    return {"probes": probes, "hours": hours, "status_changes": changes, "deliveries": deliveries}


def summarize(rows: list[ProbeResult]) -> dict[str, Any]:
    samples = sum(r.samples for r in rows)
    failures = sum(r.failures for r in rows)
    ttfts = [r.ttft_ms for r in rows if r.ttft_ms is not None]
    totals = [r.total_ms for r in rows if r.total_ms is not None and r.source == "active"]
    return {
        "samples": samples,
        "failures": failures,
        "ttft_p50_ms": percentile(ttfts, 50),
        "ttft_p95_ms": percentile(ttfts, 95),
        "total_p50_ms": percentile(totals, 50),
    }


def aggregate_hours(hours_back: int = 3, now: dt.datetime | None = None) -> int:
    """(Re)compute the hourly aggregates of the last `hours_back` hours, the current one included.

    Recomputing from raw rows makes it idempotent: running it twice, or late, gives the same rows.
    """
    now = now or timezone.now()
    start = _hour(now) - dt.timedelta(hours=hours_back)
    buckets: dict[tuple[int, dt.datetime], list[ProbeResult]] = defaultdict(list)
    for r in ProbeResult.objects.filter(created__gte=start).only(
        "channel_id", "created", "samples", "failures", "ttft_ms", "total_ms", "source"
    ):
        buckets[(r.channel_id, _hour(r.created))].append(r)
    for (channel_id, hour), rows in buckets.items():
        ProbeHourly.objects.update_or_create(channel_id=channel_id, hour=hour, defaults=summarize(rows))
    return len(buckets)


CHECKS_LIMIT = 300
RANGES = {"24h": dt.timedelta(hours=24), "7d": dt.timedelta(days=7)}


def series(channel: Channel, range_: str = "24h", now: dt.datetime | None = None) -> dict[str, Any]:
    """Chart data: hourly p50/p95 TTFT and error ratio. Raw rows for 24 h, aggregates (+ today) for 7 d."""
    now = now or timezone.now()
    span = RANGES.get(range_, RANGES["24h"])
    start = _hour(now - span) + dt.timedelta(hours=1)
    points: dict[dt.datetime, dict[str, Any]] = {}
    raw_from = start if range_ == "24h" else _hour(now) - dt.timedelta(hours=1)
    if range_ != "24h":
        for h in ProbeHourly.objects.filter(channel=channel, hour__gte=start, hour__lt=raw_from):
            points[h.hour] = {
                "samples": h.samples,
                "failures": h.failures,
                "ttft_p50_ms": h.ttft_p50_ms,
                "ttft_p95_ms": h.ttft_p95_ms,
            }
    buckets: dict[dt.datetime, list[ProbeResult]] = defaultdict(list)
    for r in ProbeResult.objects.filter(channel=channel, created__gte=raw_from).only(
        "created", "samples", "failures", "ttft_ms", "total_ms", "source"
    ):
        buckets[_hour(r.created)].append(r)
    for hour, rows in buckets.items():
        points[hour] = summarize(rows)
    # Each check's own TTFT (the last 24 h at most): a new channel's few checks draw a line of
    # their own instead of one dot on a 24-hour axis.
    measured = sorted((r.created, r.ttft_ms) for rows in buckets.values() for r in rows if r.ttft_ms)
    checks = [{"at": at.isoformat(), "ttft_ms": ttft} for at, ttft in measured[-CHECKS_LIMIT:]]
    labels, p50, p95, err = [], [], [], []
    hour = start
    while hour <= now:
        p = points.get(hour)
        labels.append(hour.isoformat())
        p50.append(p and p.get("ttft_p50_ms"))
        p95.append(p and p.get("ttft_p95_ms"))
        err.append(round(p["failures"] / p["samples"], 4) if p and p.get("samples") else None)
        hour += dt.timedelta(hours=1)
    return {
        "range": range_,
        "labels": labels,
        "ttft_p50_ms": p50,
        "ttft_p95_ms": p95,
        "error_ratio": err,
        "checks": checks if range_ == "24h" else [],
    }


@dataclass
class HealthSummary:
    """What the badge shows for one channel."""

    status: str
    label: str
    message: str
    last_ttft_ms: float | None
    error_ratio: float | None  # over the last 24 h
    samples_24h: int
    last_checked: dt.datetime | None
    spark: list[float | None] = field(default_factory=list)  # hourly p50 TTFT, oldest first

    @property
    def sparkline_points(self) -> str:
        """SVG polyline points (100x20 box) for the 24 h sparkline; empty when there is no data."""
        values = [v for v in self.spark if v is not None]
        if len(values) < 2:
            return ""
        top = max(values) or 1.0
        n = len(self.spark)
        pts = []
        for i, v in enumerate(self.spark):
            if v is not None:
                pts.append(f"{i * 100 / max(n - 1, 1):.1f},{20 - (v / top) * 18 - 1:.1f}")
        return " ".join(pts)


def attach_health(channels: list[Channel], now: dt.datetime | None = None) -> list[Channel]:
    """Set `channel.health` (a HealthSummary) on each channel with two queries in all, for list pages."""
    now = now or timezone.now()
    ids = [c.pk for c in channels]
    since = now - dt.timedelta(hours=24)
    first_hour = _hour(since) + dt.timedelta(hours=1)
    ratio = {
        row["channel_id"]: row
        for row in ProbeResult.objects.filter(channel_id__in=ids, created__gte=since)
        .values("channel_id")
        .annotate(n=Sum("samples"), f=Sum("failures"))
    }
    spark: dict[int, dict[dt.datetime, list[float]]] = defaultdict(lambda: defaultdict(list))
    for cid, created, ttft in ProbeResult.objects.filter(
        channel_id__in=ids, created__gte=first_hour, ttft_ms__isnull=False
    ).values_list("channel_id", "created", "ttft_ms"):
        assert ttft is not None  # filtered on ttft_ms__isnull=False
        spark[cid][_hour(created)].append(ttft)
    hours = [first_hour + dt.timedelta(hours=i) for i in range(24)]
    for c in channels:
        r: Mapping[str, Any] = ratio.get(c.pk) or {}
        n, f = r.get("n") or 0, r.get("f") or 0
        per_hour = spark.get(c.pk, {})
        # A disabled channel is not routed whatever its last check said (a stopped deployment
        # disables its channel): its badge says so instead of a stale "Healthy".
        c.health = HealthSummary(
            status=c.status if c.enabled else "disabled",
            label=c.get_status_display() if c.enabled else gettext("Disabled"),
            message=c.status_message_text
            if c.enabled
            else gettext("Not routed: the channel is disabled. %(why)s")
            % {"why": c.status_message_text or gettext("Enable it to route requests to it again.")},
            last_ttft_ms=c.last_ttft_ms,
            error_ratio=(f / n) if n else None,
            samples_24h=n,
            last_checked=c.last_checked,
            spark=[percentile(per_hour[h], 50) if h in per_hour else None for h in hours],
        )
    return channels


def dashboard(limit: int = 5) -> dict[str, Any]:
    """Context for the health dashboard partial: channels by status, slowest, recent changes."""
    counts = dict(Channel.objects.enabled().values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    by_status = [{"status": s.value, "label": s.label, "count": counts.get(s.value, 0)} for s in ChannelStatus]
    attention = list(
        Channel.objects.enabled().exclude(status__in=[ChannelStatus.HEALTHY]).order_by("status", "name")[:limit]
    )
    slowest = list(Channel.objects.enabled().filter(last_ttft_ms__isnull=False).order_by("-last_ttft_ms")[:limit])
    changes = list(StatusChange.objects.select_related("channel").order_by("-created", "-id")[: limit * 2])
    return {
        "health_by_status": by_status,
        "health_total": sum(counts.values()),
        "health_attention": attention,
        "health_slowest": slowest,
        "health_changes": changes,
        "health_last_round": Channel.objects.enabled().aggregate(t=Max("last_checked"))["t"],
        "health_failing_24h": ProbeResult.objects.filter(
            created__gte=timezone.now() - dt.timedelta(hours=24), ok=False
        ).aggregate(n=Count("id", filter=Q(source="active")))["n"],
    }


def attention() -> list[Attention]:
    """For the dashboard: enabled channels that are not healthy, with what to do next, and routes
    whose model id their server does not serve (requests for it fail there)."""
    items = [
        Attention(
            gettext("Channel"),
            c.name,
            c.status,
            c.get_status_display(),
            c.status_message_text
            or (gettext("Not checked yet: open it and press Check now.") if not c.last_checked else ""),
            reverse("channel_detail", args=[c.pk]),
        )
        for c in Channel.objects.enabled().exclude(status=ChannelStatus.HEALTHY).order_by("status", "name")
    ]
    unlisted = ModelRoute.objects.exclude(unlisted_upstream_id="").filter(enabled=True, channel__enabled=True)
    items += [
        Attention(
            gettext("Route"),
            f"{r.model.name} → {r.channel.name}",
            "down",
            gettext("not served"),
            gettext("The server does not list %(id)s among its models: requests for this route fail there.")
            % {"id": r.upstream_id},
            reverse("channel_detail", args=[r.channel_id]),
        )
        for r in unlisted.select_related("model", "channel").order_by("model__name", "channel__name")
        if r.upstream_unlisted
    ]
    return items
