"""FilterSets of request logs: the policies by key, user or team, the stored payloads by time and request."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from keys.models import PayloadLogging, RequestPayload
from portal.filters import FilterSet, UTCDateTimeFilter
from portal.forms import DatalistInput


class PayloadLoggingFilterSet(FilterSet):
    class Meta:
        model = PayloadLogging
        fields = ["key", "user", "team", "enabled"]


class RequestPayloadFilterSet(FilterSet):
    since = UTCDateTimeFilter(field_name="created", lookup_expr="gte")
    until = UTCDateTimeFilter(field_name="created", lookup_expr="lt")
    ranges = (("since", "until"),)

    class Meta:
        model = RequestPayload
        fields = ["key", "user", "model", "request_id", "surface", "status", "stream", "since", "until"]


def _usernames() -> list[str]:
    from accounts.models import User

    return list(
        User.objects.filter(payloads__isnull=False).distinct().order_by("username").values_list("username", flat=True)
    )


class RequestLogPageFilterSet(RequestPayloadFilterSet):
    """The request-logs page's filter form: the API's filters, with a key typed (suggested from a
    datalist, `forms.find_key` reads it) instead of picked from hundreds of ids, a user by name,
    and days instead of date-times."""

    key = django_filters.CharFilter(method="by_key", label=_("Key"))
    user = django_filters.CharFilter(field_name="user__username", label=_("User"))
    model = django_filters.CharFilter(label=_("Model"))
    since = django_filters.DateFilter(field_name="created", lookup_expr="date__gte", label=_("From (UTC)"))
    until = django_filters.DateFilter(field_name="created", lookup_expr="date__lte", label=_("Until (UTC)"))

    class Meta(RequestPayloadFilterSet.Meta):
        fields = ["key", "user", "model", "status", "since", "until"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from .forms import key_options

        super().__init__(*args, **kwargs)
        fields = self.form.fields
        fields["key"].widget = DatalistInput(key_options, attrs={"placeholder": _("name or gp-…")})
        fields["user"].widget = DatalistInput(_usernames)
        fields["model"].widget = DatalistInput(
            lambda: list(RequestPayload.objects.order_by("model").values_list("model", flat=True).distinct()[:200])
        )
        for name in ("since", "until"):
            fields[name].widget = forms.DateInput(attrs={"type": "date"})
        fields["status"].label = _("Status")

    def by_key(self, queryset: QuerySet[RequestPayload], name: str, value: str) -> QuerySet[RequestPayload]:
        from .forms import find_key

        key = find_key(value)
        return queryset.filter(key=key) if key is not None else queryset.none()
