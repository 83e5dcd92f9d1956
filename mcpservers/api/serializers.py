"""MCP server serializers. A server's credentials are write-only: omit to keep, "" or null to clear."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from portal.api.serializers import ModelSerializer, drf_error, translated

from ..models import McpCall, McpGrant, McpServer, McpTool
from ..services import EDITABLE_FIELDS, SECRET_FIELDS, save_server


def _secret(help_text: Any) -> serializers.CharField:
    return serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        allow_null=True,
        max_length=8000,
        style={"input_type": "password"},
        help_text=help_text,
    )


class McpServerSerializer(ModelSerializer):
    """An MCP server of the team, reached through the gateway at `/mcp/<name>`. Its credentials
    (`bearer_token`, `headers`, `oauth_client_secret`) are write-only and shown as `has_…`."""

    bearer_token = _secret(_("Sent upstream as Authorization: Bearer; write-only."))
    headers = _secret(_('Extra headers sent upstream, a JSON object as text ({"X-Api-Key": "…"}); write-only.'))
    oauth_client_secret = _secret(_("OAuth client secret (client-credentials grant); write-only."))
    has_bearer_token = serializers.SerializerMethodField()
    status_message = translated("status_message")
    has_headers = serializers.SerializerMethodField()
    has_oauth_client_secret = serializers.SerializerMethodField()
    tools: serializers.SlugRelatedField[McpTool] = serializers.SlugRelatedField(
        slug_field="name", many=True, read_only=True
    )

    class Meta:
        model = McpServer
        fields = [
            "id",
            *EDITABLE_FIELDS,
            "has_bearer_token",
            "has_headers",
            "has_oauth_client_secret",
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "last_checked",
            "last_error",
            "last_duration_ms",
            "tools",
            "created",
            "updated",
        ]
        read_only_fields = [
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "last_checked",
            "last_error",
            "last_duration_ms",
            "created",
            "updated",
        ]

    def get_has_bearer_token(self, obj: McpServer) -> bool:
        return bool(obj.bearer_token)

    def get_has_headers(self, obj: McpServer) -> bool:
        return bool(obj.headers)

    def get_has_oauth_client_secret(self, obj: McpServer) -> bool:
        return bool(obj.oauth_client_secret)

    def _save(self, server: McpServer, data: dict[str, Any]) -> McpServer:
        secrets = {}
        for name in SECRET_FIELDS:
            if name in data:
                secrets[name] = data.pop(name) or ""
        for name, value in data.items():
            setattr(server, name, value)
        try:
            return save_server(server, secrets=secrets)
        except DjangoValidationError as exc:
            raise drf_error(exc) from None

    def create(self, validated_data: dict[str, Any]) -> McpServer:
        return self._save(McpServer(), validated_data)

    def update(self, instance: McpServer, validated_data: dict[str, Any]) -> McpServer:
        return self._save(instance, validated_data)


class McpToolSerializer(ModelSerializer):
    """A tool as the server's last tools/list described it; only `enabled` can be changed."""

    class Meta:
        model = McpTool
        fields = ["id", "server", "name", "description", "input_schema", "enabled", "last_seen"]
        read_only_fields = ["server", "name", "description", "input_schema", "last_seen"]


class McpGrantSerializer(ModelSerializer):
    """One allowlist entry: exactly one of key, user, team; `tool` null means every tool of the server."""

    class Meta:
        model = McpGrant
        fields = ["id", "server", "tool", "key", "user", "team", "created"]
        read_only_fields = ["created"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        grant = McpGrant(**attrs)
        try:
            grant.full_clean()
        except DjangoValidationError as exc:
            if "__all__" in getattr(exc, "error_dict", {}):
                raise serializers.ValidationError(
                    {"non_field_errors": [_("Give exactly one of key, user or team, once per tool.")]}
                ) from None
            raise drf_error(exc) from None
        return attrs


class McpCallSerializer(ModelSerializer):
    """One tool call made through the gateway: who called which tool of which server, with what outcome."""

    class Meta:
        model = McpCall
        fields = [
            "id",
            "created",
            "server",
            "server_slug",
            "tool",
            "key",
            "user",
            "team",
            "status",
            "duration_ms",
            "error",
            "error_code",
            "error_params",
            "arguments",
        ]
        read_only_fields = fields
