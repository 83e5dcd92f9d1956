"""Serializers of the request-log API: the switch (admin-set) and the stored payloads (read-only)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from keys.models import PayloadLogging, RequestPayload
from portal.api.serializers import ModelSerializer


class PayloadLoggingSerializer(ModelSerializer[PayloadLogging]):
    """Request logging for one key, user or team: on with a retention in days, or explicitly off."""

    class Meta:
        model = PayloadLogging
        fields = ["id", "key", "user", "team", "enabled", "retention_days", "created", "updated"]
        read_only_fields = ["created", "updated"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        targets = [attrs.get(f, getattr(self.instance, f) if self.instance else None) for f in ("key", "user", "team")]
        if sum(t is not None for t in targets) != 1:
            raise serializers.ValidationError({"key": [_("Set one of key, user or team.")]})
        return attrs


class RequestPayloadSerializer(ModelSerializer[RequestPayload]):
    """A stored request without its bodies (listing them reads nothing that is audited)."""

    key_name = serializers.CharField(source="key.name", default=None, read_only=True, allow_null=True)
    username = serializers.CharField(source="user.username", default=None, read_only=True, allow_null=True)

    class Meta:
        model = RequestPayload
        fields = [
            "id",
            "created",
            "expires_at",
            "request_id",
            "key",
            "key_name",
            "user",
            "username",
            "model",
            "surface",
            "stream",
            "status",
            "http_status",
            "request_bytes",
            "response_bytes",
            "truncated",
            "redactions",
        ]
        read_only_fields = fields


class RequestPayloadDetailSerializer(RequestPayloadSerializer):
    """With the redacted bodies as text; the view audit-logs every such read."""

    request_body = serializers.SerializerMethodField()
    response_body = serializers.SerializerMethodField()

    class Meta(RequestPayloadSerializer.Meta):
        fields = [*RequestPayloadSerializer.Meta.fields, "request_body", "response_body"]
        read_only_fields = fields

    def get_request_body(self, obj: RequestPayload) -> str:
        return str(self.context["bodies"]["request"])

    def get_response_body(self, obj: RequestPayload) -> str:
        return str(self.context["bodies"]["response"])
