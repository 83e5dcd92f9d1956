"""REST API for usage: records and daily aggregates (read-only, scoped: a developer sees their own,
a team lead also their team's, an admin everyone's) and totals grouped by user, team, key, model or
channel."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.response import Response

from channels.prices import currency
from keys.models import UsageDaily, UsageRecord
from keys.usage.filters import UsageDailyFilterSet, UsageRecordFilterSet
from keys.usage.services import GROUPS, grouped_totals, today
from portal.api.pagination import CappedCountPagination
from portal.permissions import is_admin

from .serializers import UsageDailySerializer, UsageRecordSerializer

if TYPE_CHECKING:
    from keys.models import OwnedQuerySet
    from portal.permissions import AuthenticatedRequest


class UsageRecordViewSet(viewsets.ReadOnlyModelViewSet[UsageRecord]):
    """One record per gateway request. Developers see their own; admins see all."""

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
    """Per-day aggregates (kept when raw records are pruned)."""

    request: AuthenticatedRequest
    serializer_class = UsageDailySerializer
    filterset_class = UsageDailyFilterSet
    ordering_fields = ["day", "total_tokens", "requests"]

    def get_queryset(self) -> OwnedQuerySet[UsageDaily]:
        if getattr(self, "swagger_fake_view", False):
            return UsageDaily.objects.none()
        return UsageDaily.objects.visible_to(self.request.user)


class UsageSummaryViewSet(viewsets.ViewSet):
    """Totals grouped by user, team, key, model or channel over the last `days` days (default 30),
    each with its cached prompt tokens, `cache_hit_ratio` (cached / prompt tokens, null without
    any), `cost` (exact decimal string in `currency`) and `unpriced_requests` (no price: not 0)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("group_by", OpenApiTypes.STR, enum=list(GROUPS), default="model"),
            OpenApiParameter("days", OpenApiTypes.INT, default=30),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def list(self, request: AuthenticatedRequest) -> Response:
        group_by = request.query_params.get("group_by", "model")
        if group_by not in GROUPS:
            raise serializers.ValidationError({"group_by": [f"Choose one of: {', '.join(GROUPS)}."]})
        if group_by == "channel" and not is_admin(request.user):
            raise serializers.ValidationError(
                {"group_by": ["Channels are shown to admins only; group by model or key."]}
            )
        try:
            days = int(request.query_params.get("days", 30))
        except ValueError:
            raise serializers.ValidationError({"days": [_("A whole number of days.")]}) from None
        if not 1 <= days <= 366:
            raise serializers.ValidationError({"days": [_("Between 1 and 366.")]})
        until = today()
        since = until - dt.timedelta(days=days - 1)
        rows = grouped_totals(UsageDaily.objects.visible_to(request.user), group_by, since, until)
        for row in rows:
            row.pop("cost_text", None)
            row.pop("unnamed", None)  # the page's; a script reads `group`'s "(none)" / "(deleted key)"
        return Response({"group_by": group_by, "since": since, "until": until, "currency": currency(), "results": rows})
