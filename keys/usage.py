"""Reports over the usage records the gateway writes (`gateway.usage`): per day, per group, against limits."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from django.db.models import QuerySet, Sum
from django.utils import timezone

from .models import UsageDaily, UsageRecord


def usage_queryset(user) -> QuerySet[UsageRecord]:
    """Records `user` may see: admins all, developers their own."""
    qs = UsageRecord.objects.select_related("key", "user", "channel")
    return qs if user.is_admin else qs.filter(user=user)


def daily_queryset(user) -> QuerySet[UsageDaily]:
    qs = UsageDaily.objects.all()
    return qs if user.is_admin else qs.filter(user=user)


def daily_totals(qs: QuerySet[UsageDaily], since: dt.date) -> list[dict]:
    """Tokens and requests per day per model since `since` (inclusive), oldest first."""
    return list(
        qs.filter(day__gte=since)
        .values("day", "model")
        .annotate(
            requests=Sum("requests"),
            errors=Sum("errors"),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
            total_tokens=Sum("total_tokens"),
        )
        .order_by("day", "model")
    )


def today() -> dt.date:
    return timezone.now().date()


GROUPS = {
    "model": ("model",),
    "user": ("user__username",),
    "key": ("key__name", "key__prefix", "key__last_four", "key__owner__username"),
    "channel": ("channel__name",),
}


def grouped_totals(qs: QuerySet[UsageDaily], group_by: str, since: dt.date, until: dt.date) -> list[dict]:
    """Totals per user, key, model or channel between two days (inclusive), largest first."""
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
        out.append({"group": label, **{k: row[k] for k in row if k not in fields}})
    return out


def limit_status(user, keys) -> list[dict]:
    """Tokens used today and this month against the limits of `user` and each of `keys`."""
    now = timezone.now().date()
    first = now.replace(day=1)
    daily = UsageDaily.objects.filter(user=user, day__gte=first)
    per_key: dict[int | None, list[int]] = defaultdict(lambda: [0, 0])
    total = [0, 0]
    for row in daily.values("key_id", "day").annotate(t=Sum("total_tokens")):
        per_key[row["key_id"]][1] += row["t"]
        total[1] += row["t"]
        if row["day"] == now:
            per_key[row["key_id"]][0] += row["t"]
            total[0] += row["t"]
    rows = [
        {
            "label": "Your account (all keys)",
            "today": total[0],
            "month": total[1],
            "tokens_per_day": user.tokens_per_day,
            "tokens_per_month": user.tokens_per_month,
            "requests_per_minute": user.requests_per_minute,
        }
    ]
    for key in keys:
        used = per_key.get(key.id, [0, 0])
        rows.append(
            {
                "label": f"Key {key.name} ({key.masked})",
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
