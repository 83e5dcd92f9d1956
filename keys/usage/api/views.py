"""REST API for usage: records and daily aggregates (read-only, scoped: a developer sees their own,
a team lead also their team's, an admin everyone's) and totals grouped by user, team, key, model or
channel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.response import Response

from channels.prices import currency
from keys.models import UsageDaily, UsageRecord
from keys.usage.filters import UsageDailyFilterSet, UsageRecordFilterSet
from keys.usage.forms import DEFAULT_DAYS, MAX_DAYS, UsageQueryForm
from keys.usage.services import GROUPS, usage_totals
from portal.api.pagination import CappedCountPagination
from portal.permissions import is_admin

from .serializers import UsageDailySerializer, UsageRecordSerializer

if TYPE_CHECKING:
    from keys.models import OwnedQuerySet
    from portal.permissions import AuthenticatedRequest


class UsageRecordViewSet(viewsets.ReadOnlyModelViewSet[UsageRecord]):
    """One record per gateway request. Developers see their own; team leads also those of the
    members they manage (not an admin's or another lead's, whose keys they do not see); admins all."""

    request: AuthenticatedRequest
    serializer_class = UsageRecordSerializer
    pagination_class = CappedCountPagination
    filterset_class = UsageRecordFilterSet
    ordering_fields = ["created", "total_tokens", "latency_ms", "ttft_ms"]
    search_fields = ["model", "request_id", "key__name"]

    def get_queryset(self) -> OwnedQuerySet[UsageRecord]:
        if getattr(self, "swagger_fake_view", False):
            return UsageRecord.objects.none()
        return UsageRecord.objects.select_related("key", "user", "channel").visible_to(self.request.user)


class UsageDailyViewSet(viewsets.ReadOnlyModelViewSet[UsageDaily]):
    """Per-day aggregates (kept when raw records are pruned), one row per key and day: scoped as the
    records are (a team's totals with everyone's usage: `/api/usage/summary/`)."""

    request: AuthenticatedRequest
    serializer_class = UsageDailySerializer
    filterset_class = UsageDailyFilterSet
    ordering_fields = ["day", "total_tokens", "requests"]

    def get_queryset(self) -> OwnedQuerySet[UsageDaily]:
        if getattr(self, "swagger_fake_view", False):
            return UsageDaily.objects.none()
        return UsageDaily.objects.visible_to(self.request.user)


class UsageSummaryViewSet(viewsets.ViewSet):
    """Totals grouped by user, team, key, model or channel over the last `days` days (default 30) up
    to `until` (default today), or from `since` to `until`, each with its cached prompt tokens,
    `cache_hit_ratio` (cached / prompt tokens, null without any), `cost` (exact decimal string in
    `currency`) and `unpriced_requests` (no price: not 0). A value it cannot read is a 400 naming it."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "group_by",
                OpenApiTypes.STR,
                enum=list(GROUPS),
                default="model",
                description="`channel` for admins only.",
            ),
            OpenApiParameter(
                "days", OpenApiTypes.INT, default=DEFAULT_DAYS, description=f"From 1 to {MAX_DAYS}; not with `since`."
            ),
            OpenApiParameter("since", OpenApiTypes.DATE, description="First day (UTC, YYYY-MM-DD), inclusive."),
            OpenApiParameter(
                "until", OpenApiTypes.DATE, description="Last day (UTC, YYYY-MM-DD), inclusive; default today."
            ),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def list(self, request: AuthenticatedRequest) -> Response:
        groups = [g for g in GROUPS if g != "channel" or is_admin(request.user)]
        query = UsageQueryForm(request.query_params, groups=groups, default_group="model")
        if not query.is_valid():
            errors = query.errors.get_json_data()
            raise serializers.ValidationError({name: [e["message"] for e in found] for name, found in errors.items()})
        since, until = query.period
        rows = usage_totals(request.user, query.group, since, until)
        for row in rows:
            for name in ("cost_text", "unnamed", "hidden"):
                # the page's; a script reads `group`'s "(none)", "(deleted key)", "(keys you cannot see)"
                row.pop(name, None)
        return Response(
            {"group_by": query.group, "since": since, "until": until, "currency": currency(), "results": rows}
        )
