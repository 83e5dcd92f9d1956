"""REST API for channel health: status summary, probe history, Check now, alert targets, schedule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, cast

from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from channels.health import alerts, history, schedule, services
from channels.models import AlertDelivery, AlertTarget, Channel, ProbeResult, StatusChange
from portal import i18n
from portal.api.filters import bool_param
from portal.permissions import IsAdmin

from .serializers import (
    AlertDeliverySerializer,
    AlertTargetSerializer,
    ChannelHealthSerializer,
    CheckResultSerializer,
    HealthSeriesSerializer,
    HealthSummarySerializer,
    ProbeResultSerializer,
    ScheduleSerializer,
    StatusChangeSerializer,
)

_Row = TypeVar("_Row")


class HealthChannelViewSet(mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet[Channel]):
    """Per-channel health (`/api/health/channels/`): status, latest TTFT, 24 h error ratio."""

    permission_classes = [IsAdmin]
    serializer_class = ChannelHealthSerializer
    queryset = Channel.objects.all()
    filterset_fields = ["status", "kind", "enabled"]
    search_fields = ["name"]
    ordering_fields = ["name", "status", "last_ttft_ms", "last_checked"]
    http_method_names = ["get", "patch", "post", "head", "options"]

    def paginate_queryset(self, queryset: QuerySet[Channel, _Row] | Sequence[_Row]) -> list[_Row] | None:
        page = super().paginate_queryset(queryset)
        if page is not None:
            history.attach_health(cast("list[Channel]", page))  # two queries for the whole page, not two per channel
        return page

    @extend_schema(responses=ProbeResultSerializer(many=True), parameters=[OpenApiParameter("ok", bool)])
    @action(detail=True, methods=["get"])
    def probes(self, request: Request, pk: str | None = None) -> Response:
        """Probe history of one channel, newest first (raw rows kept PORTAL_PROBE_RETENTION_DAYS)."""
        channel = self.get_object()
        qs = ProbeResult.objects.filter(channel=channel)
        ok = bool_param(request, "ok")
        if ok is not None:
            qs = qs.filter(ok=ok)
        # The paginator itself: paginate_queryset() would attach channel health to probe rows.
        assert self.paginator is not None  # DEFAULT_PAGINATION_CLASS is set
        page = self.paginator.paginate_queryset(qs, request, view=self)
        return self.get_paginated_response(ProbeResultSerializer(page, many=True).data)

    @extend_schema(request=None, responses=CheckResultSerializer)
    @action(detail=True, methods=["post"])
    def check(self, request: Request, pk: str | None = None) -> Response:
        """Probe this channel now and return the result (also clears credentials_rejected if the key works)."""
        channel = self.get_object()
        done = services.check_channel(channel.pk)
        if done is None:
            return Response({"detail": _("The channel is disabled; enable it to check it.")}, status=409)
        channel.refresh_from_db()
        return Response(
            {
                "channel": ChannelHealthSerializer(channel).data,
                "previous_status": done.old_status,
                "probe": ProbeResultSerializer(done.result).data if done.result else None,
            }
        )

    @extend_schema(
        parameters=[OpenApiParameter("range", str, enum=list(history.RANGES))], responses=HealthSeriesSerializer
    )
    @action(detail=True, methods=["get"])
    def series(self, request: Request, pk: str | None = None) -> Response:
        """Hourly p50/p95 TTFT and error ratio over 24 h or 7 d (chart data)."""
        range_ = request.query_params.get("range", "24h")
        if range_ not in history.RANGES:
            choices = i18n.listing(history.RANGES)
            return Response({"range": [_("Choose one of: %(choices)s.") % {"choices": choices}]}, status=400)
        return Response(history.series(self.get_object(), range_))

    @extend_schema(responses=HealthSummarySerializer)
    @action(detail=False, methods=["get"])
    def summary(self, request: Request) -> Response:
        """Counts by status, the slowest channels and recent status changes."""
        d = history.dashboard(limit=10)
        return Response(
            {
                "by_status": {s["status"]: s["count"] for s in d["health_by_status"]},
                "total_enabled": d["health_total"],
                "last_checked": d["health_last_round"],
                "failed_probes_24h": d["health_failing_24h"],
                "attention": [
                    {"id": c.pk, "name": c.name, "status": c.status, "message": c.status_message_text}
                    for c in d["health_attention"]
                ],
                "slowest": [{"id": c.pk, "name": c.name, "last_ttft_ms": c.last_ttft_ms} for c in d["health_slowest"]],
                "recent_changes": StatusChangeSerializer(d["health_changes"], many=True).data,
            }
        )


class StatusChangeViewSet(viewsets.ReadOnlyModelViewSet[StatusChange]):
    permission_classes = [IsAdmin]
    serializer_class = StatusChangeSerializer
    queryset = StatusChange.objects.select_related("channel")
    filterset_fields = ["channel", "to_status", "from_status"]


class AlertTargetViewSet(viewsets.ModelViewSet[AlertTarget]):
    permission_classes = [IsAdmin]
    serializer_class = AlertTargetSerializer
    queryset = AlertTarget.objects.all()
    filterset_fields = ["enabled"]
    search_fields = ["name"]

    @extend_schema(request=None, responses={200: dict})
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str | None = None) -> Response:
        """Send a test notification to this target."""
        ok, error = alerts.send_test(self.get_object())
        return Response({"ok": ok, "error": error}, status=200 if ok else 502)

    @extend_schema(responses=AlertDeliverySerializer(many=True), parameters=[OpenApiParameter("failed", bool)])
    @action(detail=False, methods=["get"])
    def deliveries(self, request: Request) -> Response:
        """Recent notifications sent (or attempted) to any target."""
        qs = AlertDelivery.objects.select_related("status_change__channel")
        failed = bool_param(request, "failed")
        if failed is not None:
            qs = qs.exclude(ok=True) if failed else qs.filter(ok=True)
        assert self.paginator is not None  # DEFAULT_PAGINATION_CLASS is set
        page = self.paginator.paginate_queryset(qs, request, view=self)
        return self.get_paginated_response(AlertDeliverySerializer(page, many=True).data)


class ProbeScheduleView(APIView):
    """The probe round's django-celery-beat interval (`/api/health/schedule/`); beat reloads it by itself."""

    permission_classes = [IsAdmin]

    @extend_schema(responses=ScheduleSerializer)
    def get(self, request: Request) -> Response:
        return Response(ScheduleSerializer(schedule.get_probe_schedule()).data)

    @extend_schema(request=ScheduleSerializer, responses=ScheduleSerializer)
    def put(self, request: Request) -> Response:
        return self._save(request, partial=False)

    @extend_schema(request=ScheduleSerializer, responses=ScheduleSerializer)
    def patch(self, request: Request) -> Response:
        return self._save(request, partial=True)

    def _save(self, request: Request, partial: bool) -> Response:
        current = schedule.get_probe_schedule()
        ser = ScheduleSerializer(data=request.data, partial=partial)
        ser.is_valid(raise_exception=True)
        data = {**current, **ser.validated_data}
        saved = schedule.set_probe_schedule(interval_seconds=data["interval_seconds"], enabled=data["enabled"])
        return Response(ScheduleSerializer(saved).data, status=status.HTTP_200_OK)
