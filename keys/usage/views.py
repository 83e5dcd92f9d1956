"""Usage pages: "My usage" for everyone, usage by user/team/key/model/channel for admins and, scoped
to their team, for team leads (with CSV)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.mixins import LoginRequiredMixin
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views import View
from django.views.generic import DetailView

from channels.prices import currency, format_money
from keys.budgets.services import budgets_for
from keys.models import USAGE_COUNTERS, Key, UsageDaily, UsageRecord
from portal.pagination import CappedCountPaginator
from portal.permissions import AdminOrTeamLeadRequiredMixin, AdminRequiredMixin
from portal.ui import FilteredListView, bad_query, csv_download, csv_safe, sort_rows

from .filters import UsageRecordFilterSet
from .forms import DEFAULT_DAYS, UsageQueryForm
from .retention import raw_cutoff
from .services import GROUPS, cache_hit_ratio, daily_totals, limit_status, usage_totals

if TYPE_CHECKING:
    from portal.permissions import AuthenticatedHttpRequest

    _RecordDetailView = DetailView[UsageRecord]
else:
    _RecordDetailView = DetailView  # Django's generic views take no [] at runtime


def chart_data(rows: list[dict[str, Any]], since: dt.date, until: dt.date) -> dict[str, Any]:
    """Chart.js data: one stacked dataset of total tokens per model, one label per day."""
    days = [(since + dt.timedelta(days=i)) for i in range((until - since).days + 1)]
    index = {d: i for i, d in enumerate(days)}
    series: dict[str, list[int]] = {}
    for row in rows:
        series.setdefault(row["model"], [0] * len(days))[index[row["day"]]] += row["total_tokens"] or 0
    return {
        "labels": [d.isoformat() for d in days],
        "datasets": [{"label": model, "data": values} for model, values in sorted(series.items())],
    }


class MyUsageView(LoginRequiredMixin, View):
    """Tokens per day per model for the signed-in user, against their limits."""

    def get(self, request: AuthenticatedHttpRequest) -> HttpResponse:
        query = UsageQueryForm(request.GET)
        if not query.is_valid():
            return bad_query(request, _("My usage"), query)
        since, until = query.period
        rows = daily_totals(UsageDaily.objects.filter(user=request.user), since, until)
        keys = Key.objects.not_revoked().filter(owner=request.user).order_by("name")
        cost = sum(r["cost_nanos"] for r in rows)
        totals = {
            "cost_text": format_money(cost),
            "unpriced_requests": sum(r["unpriced_requests"] for r in rows),
            "requests": sum(r["requests"] or 0 for r in rows),
            "total_tokens": sum(r["total_tokens"] or 0 for r in rows),
            "errors": sum(r["errors"] or 0 for r in rows),
            "cache_hit_ratio": cache_hit_ratio(
                sum(r["cached_tokens"] or 0 for r in rows), sum(r["prompt_tokens"] or 0 for r in rows)
            ),
        }
        shown, sort = sort_rows(request, list(reversed(rows)), {"day", "model", *USAGE_COLUMNS})
        return render(
            request,
            "keys/usage_mine.html",
            {
                "days": query.cleaned_data["days"] or (None if query.cleaned_data["since"] else DEFAULT_DAYS),
                "since": since,
                "until": until,
                "rows": shown,
                "sort": sort,
                "totals": totals,
                "chart": chart_data(rows, since, until),
                "limits": limit_status(request.user, keys),
                "budgets": budgets_for(request.user),
            },
        )


# Columns the usage tables sort by (`?sort=`), as in the rows `grouped_totals`/`daily_totals` return.
USAGE_COLUMNS = {"name", *USAGE_COUNTERS, "cache_hit_ratio"}
# The CSV's counters; the cost follows as a decimal with its currency, and then the unpriced requests.
CSV_COUNTERS = [c for c in USAGE_COUNTERS if c not in ("cost_nanos", "unpriced_requests")]
# The CSV's column headers, for a person opening it in a spreadsheet, in their language (a script
# reads `/api/usage/summary/`, whose names stay the field ids).
CSV_HEADERS = {
    "since": _("First day (UTC)"),
    "until": _("Last day (UTC)"),
    "requests": _("Requests"),
    "errors": _("Errors"),
    "prompt_tokens": _("Prompt tokens"),
    "completion_tokens": _("Completion tokens"),
    "total_tokens": _("Total tokens"),
    "estimated_requests": _("Estimated requests"),
    "cached_tokens": _("Cached tokens"),
    "cache_creation_tokens": _("Cache write tokens"),
    "cache_hit_ratio": _("Cache hit ratio"),
    "cost": _("Cost"),
    "currency": _("Currency"),
    "unpriced_requests": _("Unpriced requests"),
}


# What each grouping is called: the select's options, the first column's header, and the heading, a
# whole sentence per grouping (an admin's, a team lead's) so a translation can order its words.
GROUP_NAMES = {"model": _("Model"), "user": _("User"), "team": _("Team"), "key": _("Key"), "channel": _("Channel")}
HEADINGS = {
    "model": (_("Usage by model"), _("Team usage by model")),
    "user": (_("Usage by user"), _("Team usage by user")),
    "team": (_("Usage by team"), _("Team usage by team")),
    "key": (_("Usage by key"), _("Team usage by key")),
    "channel": (_("Usage by channel"), _("Team usage by channel")),
}


class AdminUsageView(AdminOrTeamLeadRequiredMixin, View):
    """Usage of everyone (a team lead: of their team, as recorded at request time) grouped by user,
    team, key, model or channel; `?format=csv` downloads it."""

    def get(self, request: AuthenticatedHttpRequest) -> HttpResponse:
        groups = list(GROUPS) if request.user.is_admin else [g for g in GROUPS if g not in ("channel", "team")]
        title = _("Usage") if request.user.is_admin else _("Team usage")
        query = UsageQueryForm(request.GET, groups=groups, default_group="user", csv=True)
        if not query.is_valid():
            return bad_query(request, title, query)
        group_by, (since, until) = query.group, query.period
        rows = usage_totals(request.user, group_by, since, until)
        for row in rows:  # the group's name sorts as text whatever it is (a user, a model…)
            row["name"] = str(row["group"])
        rows, sort = sort_rows(request, rows, USAGE_COLUMNS, warn=not query.csv)  # a file shows no warning
        if query.csv:
            columns = ["since", "until", *CSV_COUNTERS, "cache_hit_ratio", "cost", "currency", "unpriced_requests"]
            response, writer = csv_download(
                f"usage-by-{group_by}-{since}-{until}.csv", [GROUP_NAMES[group_by], *(CSV_HEADERS[c] for c in columns)]
            )
            unnamed = gettext("(deleted key)") if group_by == "key" else gettext("(none)")
            for row in rows:
                ratio = "" if row["cache_hit_ratio"] is None else f"{row['cache_hit_ratio']:.4f}"
                name = gettext("(keys you cannot see)") if row["hidden"] else unnamed
                writer.writerow(
                    [
                        name if row["unnamed"] else csv_safe(str(row["group"])),
                        since,
                        until,
                        *(row[c] or 0 for c in CSV_COUNTERS),
                        ratio,
                        row["cost"],
                        currency(),
                        row["unpriced_requests"],
                    ]
                )
            return response
        series = daily_totals(UsageDaily.objects.visible_to(request.user, whole_team=True), since, until)
        return render(
            request,
            "keys/usage_admin.html",
            {
                "rows": rows,
                "group_by": group_by,
                "groups": [(g, GROUP_NAMES[g]) for g in groups],
                "group_name": GROUP_NAMES[group_by],
                "title": title,
                "heading": HEADINGS[group_by][0 if request.user.is_admin else 1],
                "days": query.cleaned_data["days"] or (None if query.cleaned_data["since"] else DEFAULT_DAYS),
                "since": since,
                "until": until,
                "chart": chart_data(series, since, until),
                "sort": sort,
                "unpriced": sum(r["unpriced_requests"] for r in rows),
            },
        )


class RequestListView(AdminRequiredMixin, FilteredListView):
    """The latest gateway requests, one row each, newest first; each opens its detail."""

    model = UsageRecord
    filterset_class = UsageRecordFilterSet
    template_name = "keys/request_list.html"
    paginator_class = CappedCountPaginator  # a full COUNT(*) over millions of records on every view
    sort_fields = {"created": "created", "model": "model", "total_tokens": "total_tokens", "latency": "latency_ms"}

    def get_base_queryset(self) -> QuerySet[UsageRecord]:
        return UsageRecord.objects.select_related("key", "user", "channel")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(
            filter_fields=["model", "status", "surface", "stream"],
            retention_days=settings.PORTAL_USAGE_RETENTION_DAYS,
            raw_since=raw_cutoff(),
            **kwargs,
        )


class RequestDetailView(AdminRequiredMixin, _RecordDetailView):
    """One request: who, which model, where it went and why (the routing explanation)."""

    model = UsageRecord
    template_name = "keys/request_detail.html"
    context_object_name = "record"

    def get_queryset(self) -> QuerySet[UsageRecord]:
        return UsageRecord.objects.select_related("key", "user", "channel")
