"""Usage reports: tokens per day and model, totals grouped by user, team, key, model or channel
(with the prompt-cache hit ratio), and today's and this month's use against limits. Shared by the
usage pages and the usage API."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from django.db.models import Case, F, Q, QuerySet, Sum, Value, When
from django.utils import timezone
from django.utils.translation import gettext

from channels.prices import amount_text, format_money
from keys.models import TTFT_BOUNDS_MS, TTFT_FIELDS, USAGE_COUNTERS, Key, UsageDaily, UsageHourly
from portal.showback import Share, Window

if TYPE_CHECKING:
    from accounts.models import User


def cache_hit_ratio(cached_tokens: int | None, prompt_tokens: int | None) -> float | None:
    """The share of prompt tokens read from a prompt cache (0..1), None without prompt tokens."""
    if not prompt_tokens:
        return None
    return round((cached_tokens or 0) / prompt_tokens, 4)


def _with_ratio(row: dict[str, Any]) -> dict[str, Any]:
    """Adds the cache-hit ratio, and the cost as an exact decimal string (`cost`, in PORTAL_CURRENCY)
    and as text (`cost_text`); `unpriced_requests` had no price (their cost is unknown, not 0)."""
    row["cache_hit_ratio"] = cache_hit_ratio(row.get("cached_tokens"), row.get("prompt_tokens"))
    if "cost_nanos" in row:
        nanos = int(row["cost_nanos"] or 0)
        row["cost"] = amount_text(nanos)
        row["cost_nanos"] = nanos
        row["cost_text"] = format_money(nanos)
        row["unpriced_requests"] = int(row.get("unpriced_requests") or 0)
    return row


_SUMS = {name: Sum(name) for name in USAGE_COUNTERS}


def daily_totals(qs: QuerySet[UsageDaily], since: dt.date, until: dt.date | None = None) -> list[dict[str, Any]]:
    """Tokens and requests per day per model from `since` to `until` (inclusive), oldest first."""
    if until is not None:
        qs = qs.filter(day__lte=until)
    rows = qs.filter(day__gte=since).values("day", "model").annotate(**_SUMS).order_by("day", "model")
    return [_with_ratio(row) for row in cast("list[dict[str, Any]]", list(rows))]  # values() rows are dicts


def today() -> dt.date:
    return timezone.now().date()


GROUPS = {
    "model": ("model",),
    "user": ("user_id",),
    "team": ("team_id",),
    "key": ("key_id",),
    "channel": ("channel_id",),
}


def _labels(group_by: str, ids: set[Any]) -> dict[Any, str]:
    """Names for the grouped ids, in one query: the rollups are grouped by integer ids (cheap to
    sort and hash at millions of rows), never by joined text columns."""
    from accounts.models import Team, User
    from channels.models import Channel

    ids.discard(None)
    if group_by == "model":
        return {m: m for m in ids}
    if group_by == "user":
        return dict(User.objects.filter(pk__in=ids).values_list("pk", "username"))
    if group_by == "team":
        return dict(Team.objects.filter(pk__in=ids).values_list("pk", "name"))
    if group_by == "channel":
        return dict(Channel.objects.filter(pk__in=ids).values_list("pk", "name"))
    return {
        pk: f"{name} ({prefix}…{last_four}, {owner})"
        for pk, name, prefix, last_four, owner in Key.objects.filter(pk__in=ids).values_list(
            "pk", "name", "prefix", "last_four", "owner__username"
        )
    }


HIDDEN_KEYS = 0  # no key's id: the group of the keys the reader may not see
HIDDEN_KEYS_LABEL = "(keys you cannot see)"


def grouped_totals(
    qs: QuerySet[UsageDaily], group_by: str, since: dt.date, until: dt.date, *, listed: Q | None = None
) -> list[dict[str, Any]]:
    """Totals per user, team, key, model or channel between two days (inclusive), largest first.
    `listed`: the rows whose key the reader may see; the keys of the others are one row (`hidden`)."""
    (field,) = GROUPS[group_by]
    qs = qs.filter(day__gte=since, day__lte=until)
    if group_by == "key" and listed is not None:
        qs = qs.annotate(shown_key=Case(When(listed, then=F(field)), default=Value(HIDDEN_KEYS)))
        field = "shown_key"
    rows = list(qs.values(field).annotate(**_SUMS).order_by("-total_tokens", field))
    labels = _labels(group_by, {row[field] for row in rows})
    missing = "(deleted key)" if group_by == "key" else "(none)"
    out = []
    for row in rows:
        value = row.pop(field)
        hidden = field == "shown_key" and value == HIDDEN_KEYS
        label = labels.get(value) if value is not None and not hidden else None
        # `unnamed`: no such user, team, key… (any more), or `hidden`: the page says so in its reader's language
        group = HIDDEN_KEYS_LABEL if hidden else label or missing
        out.append(_with_ratio({"group": group, "unnamed": label is None, "hidden": hidden, **row}))
    return out


def usage_totals(user: User, group_by: str, since: dt.date, until: dt.date) -> list[dict[str, Any]]:
    """`grouped_totals` of the usage `user` may see. A team lead's team totals count every member,
    an admin's and another lead's usage too; but the keys of those, which are not the lead's to see
    (`Key.objects.visible_to`), are not named one by one."""
    qs = UsageDaily.objects.visible_to(user, whole_team=True)
    listed = None if user.is_admin else UsageDaily.objects.seen_by(user)
    return grouped_totals(qs, group_by, since, until, listed=listed)


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
                "label": gettext("Key %(name)s (%(masked)s)") % {"name": key.shown_name, "masked": key.masked},
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


def ttft_percentile(histogram: Mapping[str, Any], pct: float) -> float | None:
    """The `pct` percentile (ms) estimated from an hourly rollup's TTFT histogram: linear within
    the bucket holding it (as Prometheus' histogram_quantile does); the open last bucket answers its
    lower bound. None without samples."""
    total = sum(int(histogram.get(name, 0) or 0) for name in TTFT_FIELDS)
    if not total:
        return None
    rank = total * pct / 100
    seen = 0
    lower = 0.0
    for bound, name in zip((*TTFT_BOUNDS_MS, None), TTFT_FIELDS, strict=True):
        count = int(histogram.get(name, 0) or 0)
        if count and seen + count >= rank:
            if bound is None:
                return lower
            return round(lower + (bound - lower) * (rank - seen) / count, 1)
        seen += count
        lower = float(bound) if bound is not None else lower
    return lower


def last_day(user: User, now: dt.datetime | None = None) -> dict[str, Any]:
    """The dashboard's usage: tokens and requests per hour over the last 24 h, and time to first
    token (p50/p95, estimated from the hourly histograms) per channel over the same window, from the
    hourly rollups `user` may see. Two queries, whatever the traffic or the number of channels."""
    now = now or timezone.now()
    first = now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=DASHBOARD_HOURS - 1)
    buckets = UsageHourly.objects.visible_to(user, whole_team=True).filter(hour__gte=first)
    hours = [first + dt.timedelta(hours=i) for i in range(DASHBOARD_HOURS)]
    tokens = dict.fromkeys(hours, 0)
    requests = dict.fromkeys(hours, 0)
    for hour, total, count in buckets.values_list("hour").annotate(Sum("total_tokens"), Sum("requests")).order_by():
        if hour in tokens:
            tokens[hour] += total or 0
            requests[hour] += count or 0
    ttft = []
    per_channel = (
        buckets.filter(channel__isnull=False)
        .values("channel__name")
        .annotate(requests=Sum("requests"), **{name: Sum(name) for name in TTFT_FIELDS})
        .order_by("channel__name")
    )
    for row in per_channel:
        ttft.append(
            {
                "channel": row["channel__name"],
                "requests": row["requests"],
                "p50": ttft_percentile(row, 50),
                "p95": ttft_percentile(row, 95),
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
    """Tokens per (team at request time, user) sent through one channel in [since, until)."""
    return windows_token_shares([(channel_id, since, until)])[0]


# Windows read per query: each is at most one daily and four hourly spans of the query's VALUES
# lists (five bound values each), well below SQLite's 32,766 bound parameters.
WINDOWS_PER_QUERY = 1000

# (window's index, channel id, first day or hour, the one after the last, weight: the share of
# each hour the window covers)
Span = tuple[int, int, Any, Any, float]


def windows_token_shares(windows: list[Window]) -> list[list[Share]]:
    """For each (channel, since, until): tokens per (team at request time, user) sent through the
    channel in [since, until). The GPU-hours showback's token source (`portal.showback`).

    A window's whole UTC days come from the daily rollups and only the partial days at its ends from
    the hourly ones; an hour a window only partly covers counts by the share it covers, so two
    adjacent runs never count one hour twice. The windows are cut into those spans in Python and
    joined with the rollups in one query, grouped by window, team and user: a month's runs cost one
    query and one plan, however many runs and records there are."""
    tokens: list[dict[tuple[int | None, int | None], float]] = [defaultdict(float) for _ in windows]
    for first in range(0, len(windows), WINDOWS_PER_QUERY):
        days: list[Span] = []
        hours: list[Span] = []
        for i, window in enumerate(windows[first : first + WINDOWS_PER_QUERY], start=first):
            _window_spans(i, *window, days=days, hours=hours)
        for run, team, user, count in _read_spans(days, hours):
            tokens[run][(team, user)] += count
    # Grouped by ids (integer keys, no join per row); the names in two small queries.
    people = list({person for shares in tokens for person in shares})
    names = dict(zip(people, _named_people(people), strict=True))
    return [
        sorted((Share(*names[person], tokens=round(n)) for person, n in shares.items()), key=_by_name)
        for shares in tokens
    ]


def _by_name(share: Share) -> tuple[str, str]:
    return share.team or "", share.user or ""


def _window_spans(
    run: int, channel_id: int, since: dt.datetime, until: dt.datetime, *, days: list[Span], hours: list[Span]
) -> None:
    """Cut one window into its whole days [first, last) (daily rollups) and its ends (hourly)."""
    day = dt.timedelta(days=1)
    since, until = since.astimezone(dt.UTC), until.astimezone(dt.UTC)
    first = since.replace(hour=0, minute=0, second=0, microsecond=0)
    first = first if first == since else first + day
    last = until.replace(hour=0, minute=0, second=0, microsecond=0)
    if first >= last:
        _hour_spans(run, channel_id, since, until, hours)
        return
    days.append((run, channel_id, first.date(), last.date(), 1.0))
    _hour_spans(run, channel_id, since, first, hours)
    _hour_spans(run, channel_id, last, until, hours)


def _hour_spans(run: int, channel_id: int, since: dt.datetime, until: dt.datetime, hours: list[Span]) -> None:
    """[since, until) as spans of hourly buckets with a weight: the hours at its edges by the share
    of them it covers, the whole hours between them at 1."""
    if since >= until:
        return
    hour = dt.timedelta(hours=1)
    first = since.replace(minute=0, second=0, microsecond=0)
    last = until.replace(minute=0, second=0, microsecond=0)
    hours.append((run, channel_id, first, first + hour, (min(first + hour, until) - since) / hour))
    if first + hour < last:
        hours.append((run, channel_id, first + hour, last, 1.0))
    if last != first and last < until:
        hours.append((run, channel_id, last, last + hour, (until - last) / hour))


def _merged(spans: list[Span]) -> list[tuple[Any, Any]]:
    """The periods the spans cover, whatever their channel, as few [lo, hi) ranges as possible."""
    ranges: list[tuple[Any, Any]] = []
    for _run, _channel, lo, hi, _w in sorted(spans, key=lambda s: s[2]):
        if ranges and lo <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], hi))
        else:
            ranges.append((lo, hi))
    return ranges


def _read_spans(days: list[Span], hours: list[Span]) -> list[tuple[int, int | None, int | None, float]]:
    """(window, team, user, tokens) summed over the daily and hourly rollups of the spans.

    The rollup rows are read by period first (the periods the spans cover, whatever the channel:
    rows written in the same hour or day lie together, so this touches few pages) and matched to
    the spans by channel and range in a hash join. Probing the (channel, period) index per span
    reads fewer rows but each on a page of its own, several times slower at a million records."""
    from django.db import connection

    ops = connection.ops
    q = ops.quote_name
    ctes, selects, span_params, range_params = [], [], [], []
    sources: list[tuple[str, type[UsageDaily | UsageHourly], str, list[Span], Callable[[Any], Any]]] = [
        ("day_spans", UsageDaily, "day", days, ops.adapt_datefield_value),
        ("hour_spans", UsageHourly, "hour", hours, ops.adapt_datetimefield_value),
    ]
    for name, rollup, period, spans, adapt in sources:
        if not spans:
            continue
        for run, channel, lo, hi, weight in spans:
            span_params += [run, channel, adapt(lo), adapt(hi), weight]
        ctes.append(f"{name}(run, channel, lo, hi, w) AS (VALUES {', '.join(['(%s, %s, %s, %s, %s)'] * len(spans))})")
        at, team, user, total = q(period), q("team_id"), q("user_id"), q("total_tokens")
        ranges = _merged(spans)
        within = " OR ".join([f"(u.{at} >= %s AND u.{at} < %s)"] * len(ranges))
        range_params += [adapt(v) for lo_hi in ranges for v in lo_hi]
        group = f"s.run, u.{team}, u.{user}"
        selects.append(
            f"SELECT {group}, SUM(u.{total} * s.w) FROM {q(rollup._meta.db_table)} AS u "  # noqa: S608
            f"JOIN {name} AS s ON u.{q('channel_id')} = s.channel AND u.{at} >= s.lo AND u.{at} < s.hi "
            f"WHERE {within} GROUP BY {group}"
        )
    if not selects:
        return []
    # Only our own quoted identifiers and placeholders go into the text; the values are bound.
    sql = f"WITH {', '.join(ctes)} {' UNION ALL '.join(selects)}"
    with connection.cursor() as cursor:
        cursor.execute(sql, span_params + range_params)
        return [(run, team, user, float(tokens or 0)) for run, team, user, tokens in cursor.fetchall()]


def spend_by_person(since: dt.datetime, until: dt.datetime) -> dict[tuple[str | None, str | None], int]:
    """Nano-units spent per (team at request time, user) on the UTC days in [since, until): the
    showback's spend beside the GPU-hours (`portal.showback`)."""
    rows = list(
        UsageDaily.objects.filter(day__gte=since.date(), day__lt=until.date())
        .values_list("team_id", "user_id")
        .annotate(cost=Sum("cost_nanos"))
        .order_by()
    )
    names = _named_people([(team, user) for team, user, _cost in rows])
    spent: dict[tuple[str | None, str | None], int] = defaultdict(int)
    for person, (_team, _user, cost) in zip(names, rows, strict=True):
        spent[person] += int(cost or 0)  # two deleted users are one "(deleted user)"
    return dict(spent)


def _named_people(people: list[tuple[int | None, int | None]]) -> list[tuple[str | None, str | None]]:
    """(team name, username) for (team id, user id) pairs, in two queries; None for none or deleted."""
    teams = _labels("team", {t for t, _u in people})
    users = _labels("user", {u for _t, u in people})
    return [(teams.get(t) if t else None, users.get(u) if u else None) for t, u in people]
