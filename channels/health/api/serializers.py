"""Serializers of the channel health API: probe results, health, status changes, alert targets, schedule."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from channels.choices import AlertKind
from channels.health import history, schedule
from channels.models import AlertDelivery, AlertTarget, Channel, ProbeResult, StatusChange
from portal.api.serializers import BooleanField, ModelSerializer, translated


class StatusField(serializers.CharField):
    """A channel status in output only; plain string so the schema keeps one ChannelStatus enum."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        kwargs.setdefault("help_text", "unknown, healthy, degraded, down or credentials_rejected")
        super().__init__(**kwargs)


@extend_schema_field({"type": "string", "enum": [k.value for k in AlertKind]})
class AlertKindField(serializers.ChoiceField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=AlertKind.choices, **kwargs)


class ProbeResultSerializer(ModelSerializer[ProbeResult]):
    """One health check of a channel (active probe or a window of passive results) and its timings."""

    status_after = StatusField()
    error_message = translated("error_message")

    class Meta:
        model = ProbeResult
        fields = [
            "id",
            "created",
            "source",
            "ok",
            "samples",
            "failures",
            "http_status",
            "error",
            "error_message",
            "error_message_code",
            "error_message_params",
            "model",
            "connect_ms",
            "ttfb_ms",
            "ttft_ms",
            "total_ms",
            "tokens",
            "tokens_per_s",
            "status_after",
        ]


class ChannelHealthSerializer(ModelSerializer[Channel]):
    """A channel's health; only the probe settings are writable."""

    status_message = translated("status_message")

    error_ratio_24h = serializers.SerializerMethodField()
    samples_24h = serializers.SerializerMethodField()

    class Meta:
        model = Channel
        fields = [
            "id",
            "name",
            "kind",
            "enabled",
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "status_changed",
            "last_checked",
            "last_ttft_ms",
            "error_ratio_24h",
            "samples_24h",
            "probe_inference",
            "probe_max_tokens",
            "ttft_degraded_ms",
        ]
        read_only_fields = [
            "id",
            "name",
            "kind",
            "enabled",
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "status_changed",
            "last_checked",
            "last_ttft_ms",
        ]

    def _health(self, obj: Channel) -> history.HealthSummary:
        if not hasattr(obj, "health"):
            history.attach_health([obj])
        return obj.health

    def get_error_ratio_24h(self, obj: Channel) -> float | None:
        ratio = self._health(obj).error_ratio
        return round(ratio, 4) if ratio is not None else None

    def get_samples_24h(self, obj: Channel) -> int:
        return self._health(obj).samples_24h


class CheckResultSerializer(serializers.Serializer[dict[str, Any]]):
    channel = ChannelHealthSerializer()
    previous_status = serializers.CharField()
    probe = ProbeResultSerializer(allow_null=True)


class StatusChangeSerializer(ModelSerializer[StatusChange]):
    """A channel's move from one health status to another, with the reason."""

    channel_name = serializers.CharField(source="channel.name", read_only=True)
    message = translated()
    from_status = StatusField()
    to_status = StatusField()

    class Meta:
        model = StatusChange
        fields = [
            "id",
            "created",
            "channel",
            "channel_name",
            "from_status",
            "to_status",
            "message",
            "message_code",
            "message_params",
        ]


class HealthSeriesSerializer(serializers.Serializer[dict[str, Any]]):
    """Chart data of `series` (schema only: the view returns history.series() as is)."""

    range = serializers.CharField()
    labels = serializers.ListField(child=serializers.DateTimeField())
    ttft_p50_ms = serializers.ListField(child=serializers.FloatField(allow_null=True))
    ttft_p95_ms = serializers.ListField(child=serializers.FloatField(allow_null=True))
    error_ratio = serializers.ListField(child=serializers.FloatField(allow_null=True))


class _AttentionSerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    status = StatusField()
    message = serializers.CharField()


class _SlowestSerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    last_ttft_ms = serializers.FloatField(allow_null=True)


class HealthSummarySerializer(serializers.Serializer[dict[str, Any]]):
    """The health overview of `summary` (schema only)."""

    by_status = serializers.DictField(child=serializers.IntegerField())
    total_enabled = serializers.IntegerField()
    last_checked = serializers.DateTimeField(allow_null=True)
    failed_probes_24h = serializers.IntegerField()
    attention = _AttentionSerializer(many=True)
    slowest = _SlowestSerializer(many=True)
    recent_changes = StatusChangeSerializer(many=True)


class AlertTargetSerializer(ModelSerializer[AlertTarget]):
    """Where status changes are sent: a webhook URL or an email address."""

    kind = AlertKindField(default=AlertKind.WEBHOOK)

    class Meta:
        model = AlertTarget
        fields = ["id", "name", "kind", "url", "email", "enabled", "created", "updated"]
        read_only_fields = ["id", "created", "updated"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        kind = attrs.get("kind", getattr(self.instance, "kind", AlertKind.WEBHOOK))
        url = attrs.get("url", getattr(self.instance, "url", ""))
        email = attrs.get("email", getattr(self.instance, "email", ""))
        if kind == AlertKind.WEBHOOK and not url:
            raise serializers.ValidationError({"url": _("A webhook needs a URL.")})
        if kind == AlertKind.EMAIL and not email:
            raise serializers.ValidationError({"email": _("Enter the address to notify.")})
        return attrs


class AlertDeliverySerializer(ModelSerializer[AlertDelivery]):
    """One attempt to tell an alert target about a status change, and whether it got through."""

    status_change = StatusChangeSerializer()

    class Meta:
        model = AlertDelivery
        fields = ["id", "created", "target", "target_name", "ok", "error", "suppressed", "status_change"]


class ScheduleSerializer(serializers.Serializer[dict[str, Any]]):
    interval_seconds = serializers.IntegerField(min_value=schedule.MIN_INTERVAL, max_value=schedule.MAX_INTERVAL)
    enabled = BooleanField(default=True)
    last_run_at = serializers.DateTimeField(read_only=True, allow_null=True)
