"""FilterSets of the usage API: records by time, daily aggregates by day."""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from keys.models import UsageDaily, UsageRecord
from portal.filters import BooleanFilter, FilterSet, UTCDateTimeFilter


class UsageRecordFilterSet(FilterSet):
    stream = BooleanFilter(label=_("Streamed"))
    since = UTCDateTimeFilter(field_name="created", lookup_expr="gte")
    until = UTCDateTimeFilter(field_name="created", lookup_expr="lt")

    class Meta:
        model = UsageRecord
        fields = [
            "key",
            "user",
            "team",
            "model",
            "channel",
            "surface",
            "status",
            "estimated",
            "stream",
            "since",
            "until",
        ]


class UsageDailyFilterSet(FilterSet):
    since = django_filters.DateFilter(label=_("From"), field_name="day", lookup_expr="gte")
    until = django_filters.DateFilter(label=_("Until"), field_name="day", lookup_expr="lte")

    class Meta:
        model = UsageDaily
        fields = ["key", "user", "team", "model", "channel", "day", "since", "until"]
