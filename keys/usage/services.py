"""Usage reports: tokens per day and model, totals grouped by user, team, key, model or channel
(with the prompt-cache hit ratio), and today's and this month's use against limits. Shared by the
usage pages and the usage API."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from django.db.models import QuerySet, Sum
from django.utils import timezone
from django.utils.translation import gettext

from channels.health.history import percentile
from keys.models import Key, UsageDaily, UsageRecord
from portal.showback import Share

if TYPE_CHECKING:
    from accounts.models import User


def cache_hit_ratio(cached_tokens: int | None, prompt_tokens: int | None) -> float | None:
    """The share of prompt tokens read from a prompt cache (0..1), None without prompt tokens."""
    if not prompt_tokens:
        return None
    return round((cached_tokens or 0) / prompt_tokens, 4)


def _with_ratio(row: dict[str, Any]) -> dict[str, Any]:
    row["cache_hit_ratio"] = cache_hit_ratio(row.get("cached_tokens"), row.get("prompt_tokens"))
    return row


def daily_totals(qs: QuerySet[UsageDaily], since: dt.date) -> list[dict[str, Any]]:
    """Tokens and requests per day per model since `since` (inclusive), oldest first."""
    rows = (
        qs.filter(day__gte=since)
        .values("day", "model")
        .annotate(
            requests=Sum("requests"),
            errors=Sum("errors"),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
            total_tokens=Sum("total_tokens"),
            cached_tokens=Sum("cached_tokens"),
        )
        .order_by("day", "model")
    )
    return [_with_ratio(row) for row in cast("list[dict[str, Any]]", list(rows))]  # values() rows are dicts


def today() -> dt.date:
    return timezone.now().date()


GROUPS = {
    "model": ("model",),
    "user": ("user__username",),
    "team": ("team__name",),
    "key": ("key__name", "key__prefix", "key__last_four", "key__owner__username"),
    "channel": ("channel__name",),
}


def grouped_totals(qs: QuerySet[UsageDaily], group_by: str, since: dt.date, until: dt.date) -> list[dict[str, Any]]:
    """Totals per user, team, key, model or channel between two days (inclusive), largest first."""
    fields = GROUPS[group_by]
    rows = (
        qs.filter(day__gte=since, day__lte=until)
        .values(*fields)
        .annotate(
            requests=Sum("requests"),
            errors=Sum("errors"),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
            total_tokens=Sum("total_tokens"),
            estimated_requests=Sum("estimated_requests"),
            cached_tokens=Sum("cached_tokens"),
            cache_creation_tokens=Sum("cache_creation_tokens"),
        )
        .order_by("-total_tokens", *fields)
    )
    out = []
    for row in rows:
        if group_by == "key":
            label = (
                f"{row['key__name']} ({row['key__prefix']}…{row['key__last_four']}, {row['key__owner__username']})"
                if row["key__name"] is not None
                else "(deleted key)"
            )
        else:
            value = row[fields[0]]
            label = value if value is not None else "(none)"
        out.append(_with_ratio({"group": label, **{k: row[k] for k in row if k not in fields}}))
    return out


def limit_status(user: User, keys: Iterable[Key]) -> list[dict[str, Any]]:
    """Tokens used today and this month against the limits of `user`, their team (its members
    together, as recorded at request time) and each of `keys`."""
    now = timezone.now().date()
    first = now.replace(day=1)
    daily = UsageDaily.objects.filter(user=user, day__gte=first)
    per_key: dict[int | None, list[int]] = defaultdict(lambda: [0, 0])
    total = [0, 0]
    for bucket in daily.values("key_id", "day").annotate(t=Sum("total_tokens")):
        per_key[bucket["key_id"]][1] += bucket["t"]
        total[1] += bucket["t"]
        if bucket["day"] == now:
            per_key[bucket["key_id"]][0] += bucket["t"]
            total[0] += bucket["t"]
    rows = [
        {
            "label": gettext("Your account (all keys)"),
            "today": total[0],
            "month": total[1],
            "tokens_per_day": user.tokens_per_day,
            "tokens_per_month": user.tokens_per_month,
            "requests_per_minute": user.requests_per_minute,
        }
    ]
    team = user.team
    if team is not None:
        used = [0, 0]
        team_days = (
            UsageDaily.objects.filter(team=team, day__gte=first).values_list("day").annotate(t=Sum("total_tokens"))
        )
        for day, tokens in team_days:
            used[1] += tokens
            used[0] += tokens if day == now else 0
        rows.append(
            {
                "label": gettext("Your team %(team)s (all members)") % {"team": team.name},
                "today": used[0],
                "month": used[1],
                "tokens_per_day": team.tokens_per_day,
                "tokens_per_month": team.tokens_per_month,
                "requests_per_minute": team.requests_per_minute,
            }
        )
    for key in keys:
        used = per_key.get(key.id, [0, 0])
        rows.append(
            {
                "label": gettext("Key %(name)s (%(masked)s)") % {"name": key.name, "masked": key.masked},
                "today": used[0],
                "month": used[1],
                "tokens_per_day": key.tokens_per_day,
                "tokens_per_month": key.tokens_per_month,
                "requests_per_minute": key.requests_per_minute,
            }
        )
    for row in rows:
        for window, limit in (("today", "tokens_per_day"), ("month", "tokens_per_month")):
            row[f"{window}_pct"] = min(100, round(row[window] * 100 / row[limit])) if row[limit] else None
    return rows


DASHBOARD_HOURS = 24
TTFT_SAMPLE_LIMIT = 5000  # per channel, newest first: enough for p95 of a day without loading everything


def last_day(user: User, now: dt.datetime | None = None) -> dict[str, Any]:
    """The dashboard's usage: tokens and requests per hour over the last 24 h, and time to first
    token (p50/p95) per channel over the same window, from the usage records `user` may see."""
    now = now or timezone.now()
    first = now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=DASHBOARD_HOURS - 1)
    records = UsageRecord.objects.visible_to(user).filter(created__gte=first)
    hours = [first + dt.timedelta(hours=i) for i in range(DASHBOARD_HOURS)]
    tokens = dict.fromkeys(hours, 0)
    requests = dict.fromkeys(hours, 0)
    for created, total in records.values_list("created", "total_tokens").iterator():
        hour = created.replace(minute=0, second=0, microsecond=0)
        if hour in tokens:
            tokens[hour] += total
            requests[hour] += 1
    ttft = []
    for channel_id, name in (
        records.filter(channel__isnull=False)
        .values_list("channel_id", "channel__name")
        .distinct()
        .order_by("channel__name")
    ):
        values = [
            v
            for v in records.filter(channel_id=channel_id, ttft_ms__isnull=False)
            .order_by("-created")
            .values_list("ttft_ms", flat=True)[:TTFT_SAMPLE_LIMIT]
            if v is not None
        ]
        ttft.append(
            {
                "channel": name,
                "requests": records.filter(channel_id=channel_id).count(),
                "p50": percentile(values, 50),
                "p95": percentile(values, 95),
            }
        )
    return {
        "chart": {
            "labels": [f"{h:%H}:00" for h in hours],
            "tokens": [tokens[h] for h in hours],
            "requests": [requests[h] for h in hours],
        },
        "total_tokens": sum(tokens.values()),
        "total_requests": sum(requests.values()),
        "ttft": ttft,
    }


def channel_token_shares(channel_id: int, since: dt.datetime, until: dt.datetime) -> list[Share]:
    """Tokens per (team at request time, user) sent through one channel in [since, until): the
    GPU-hours showback's token source (`portal.showback`)."""
    rows = (
        UsageRecord.objects.filter(channel_id=channel_id, created__gte=since, created__lt=until)
        .values("team__name", "user__username")
        .annotate(tokens=Sum("total_tokens"))
        .order_by("team__name", "user__username")
    )
    return [Share(team=r["team__name"], user=r["user__username"], tokens=int(r["tokens"] or 0)) for r in rows]
