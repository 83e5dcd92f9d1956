"""FilterSets of the usage API: records by time, daily aggregates by day."""

from __future__ import annotations

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

from keys.models import UsageDaily, UsageRecord
from portal.filters import BooleanFilter, FilterSet, UTCDateTimeFilter

from .retention import days_pruned, raw_cutoff, records_pruned, rollup_cutoff


class UsageRecordFilterSet(FilterSet):
    stream = BooleanFilter(label=_("Streamed"))
    since = UTCDateTimeFilter(
        field_name="created", lookup_expr="gte", label=_("From"), help_text=_("ISO 8601 date-time, inclusive.")
    )
    until = UTCDateTimeFilter(
        field_name="created", lookup_expr="lt", label=_("Until"), help_text=_("ISO 8601 date-time, exclusive.")
    )
    ranges = (("since", "until"),)

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

    def clean(self, form: forms.Form) -> None:
        """A range wholly before the oldest record kept is pruned, not a time without requests."""
        super().clean(form)
        until = form.cleaned_data.get("until")
        if until is not None and until <= raw_cutoff():
            form.add_error("until", records_pruned())


class UsageDailyFilterSet(FilterSet):
    since = django_filters.DateFilter(
        label=_("From"), field_name="day", lookup_expr="gte", help_text=_("YYYY-MM-DD (UTC), inclusive.")
    )
    until = django_filters.DateFilter(
        label=_("Until"), field_name="day", lookup_expr="lte", help_text=_("YYYY-MM-DD (UTC), inclusive.")
    )
    ranges = (("since", "until"),)

    class Meta:
        model = UsageDaily
        fields = ["key", "user", "team", "model", "channel", "day", "since", "until"]

    def clean(self, form: forms.Form) -> None:
        """A range wholly before the oldest day kept is pruned, not a time without usage."""
        super().clean(form)
        until = form.cleaned_data.get("until")
        if until is not None and until < rollup_cutoff():
            form.add_error("until", days_pruned())
