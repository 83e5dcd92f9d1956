"""FilterSets of request logs: the policies by key, user or team, the stored payloads by time and request."""

from __future__ import annotations

from keys.models import PayloadLogging, RequestPayload
from portal.filters import FilterSet, UTCDateTimeFilter


class PayloadLoggingFilterSet(FilterSet):
    class Meta:
        model = PayloadLogging
        fields = ["key", "user", "team", "enabled"]


class RequestPayloadFilterSet(FilterSet):
    since = UTCDateTimeFilter(field_name="created", lookup_expr="gte")
    until = UTCDateTimeFilter(field_name="created", lookup_expr="lt")

    class Meta:
        model = RequestPayload
        fields = ["key", "user", "model", "request_id", "surface", "status", "stream", "since", "until"]
