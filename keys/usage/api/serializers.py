"""Serializers of the usage API (read-only)."""

from __future__ import annotations

from rest_framework import serializers

from keys.models import UsageDaily, UsageRecord


class UsageRecordSerializer(serializers.ModelSerializer[UsageRecord]):
    key_name = serializers.CharField(source="key.name", default=None, read_only=True)
    username = serializers.CharField(source="user.username", default=None, read_only=True)
    channel_name = serializers.CharField(source="channel.name", default=None, read_only=True)

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
        ]
        read_only_fields = fields


class UsageDailySerializer(serializers.ModelSerializer[UsageDaily]):
    class Meta:
        model = UsageDaily
        fields = [
            "id",
            "day",
            "user",
            "key",
            "model",
            "channel",
            "requests",
            "errors",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "estimated_requests",
        ]
        read_only_fields = fields
