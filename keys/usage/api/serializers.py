"""Serializers of the usage API (read-only)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from channels.prices import amount_text
from keys.models import USAGE_COUNTERS, UsageDaily, UsageRecord
from portal.api.serializers import ModelSerializer
from portal.permissions import is_admin


class HidesChannelFromDevelopers(ModelSerializer[Any]):
    """Routes are hidden from developers: their usage names the model and key, the channel (and
    the routing explanation, which names channels) is null."""

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        request = self.context.get("request")
        if not is_admin(getattr(request, "user", None)):
            for name in ("channel", "channel_name", "route_explanation", "route_explanation_text"):
                if name in data:
                    data[name] = None
        return data


class UsageRecordSerializer(HidesChannelFromDevelopers):
    key_name = serializers.CharField(source="key.name", default=None, read_only=True, allow_null=True)
    username = serializers.CharField(source="user.username", default=None, read_only=True, allow_null=True)
    channel_name = serializers.CharField(
        source="channel.name", default=None, read_only=True, allow_null=True, help_text=_("Null for developers.")
    )
    cost = serializers.SerializerMethodField(
        help_text="What the request cost in the portal's currency (exact decimal string); null: its route had no price."
    )
    route_explanation = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        allow_null=True,
        help_text=_("Why the gateway sent it where it did, one short step each, in English. Null for developers."),
    )
    route_explanation_text = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        allow_null=True,
        help_text=_("The same steps in the request's language. Null for developers."),
    )

    class Meta:
        model = UsageRecord
        fields = [
            "id",
            "created",
            "request_id",
            "key",
            "key_name",
            "user",
            "username",
            "team",
            "model",
            "channel",
            "channel_name",
            "surface",
            "stream",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "estimated",
            "status",
            "http_status",
            "error",
            "latency_ms",
            "ttft_ms",
            "cached_tokens",
            "cache_creation_tokens",
            "cost",
            "pricing",
            "route_explanation",
            "route_explanation_text",
        ]
        read_only_fields = fields

    def get_cost(self, record: UsageRecord) -> str | None:
        return None if record.cost_nanos is None else amount_text(record.cost_nanos)


class UsageDailySerializer(HidesChannelFromDevelopers):
    cost = serializers.SerializerMethodField(help_text="Cost of the bucket's priced requests (exact decimal string).")

    def get_cost(self, bucket: UsageDaily) -> str:
        return amount_text(bucket.cost_nanos)

    class Meta:
        model = UsageDaily
        fields = [
            "id",
            "day",
            "user",
            "key",
            "team",
            "model",
            "channel",
            *(c if c != "cost_nanos" else "cost" for c in USAGE_COUNTERS),  # the cost as an exact decimal
        ]
        read_only_fields = fields
