"""Download serializers: the access token is write-only (responses say `has_token`)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from hosts.downloads.models import ModelDownload
from hosts.models import Host
from portal.api.serializers import ModelSerializer, transitions_field, translated


class DownloadSerializer(ModelSerializer[ModelDownload]):
    """A weight download to a host. POST creates it, or joins the active one for the same
    (host, source, repo, revision, pattern): then the answer is 200 with `joined: true`."""

    host = serializers.PrimaryKeyRelatedField(queryset=Host.objects.all())
    token = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=500,
        style={"input_type": "password"},
        help_text=_("Access token for private or gated repositories; write-only, stored encrypted."),
    )
    has_token = serializers.SerializerMethodField()
    percent = serializers.IntegerField(read_only=True)
    message = translated()
    transitions = transitions_field()
    joined = serializers.SerializerMethodField(help_text=_("True when this request joined a running download."))

    class Meta:
        model = ModelDownload
        fields = [
            "id",
            "host",
            "source",
            "repo_id",
            "revision",
            "pattern",
            "endpoint",
            "token",
            "has_token",
            "install_tool",
            "state",
            "message",
            "message_code",
            "message_params",
            "transitions",
            "commit",
            "local_path",
            "tool",
            "files",
            "total_bytes",
            "done_bytes",
            "percent",
            "rate_bps",
            "eta_seconds",
            "restarts",
            "log_tail",
            "joined",
            "created",
            "updated",
            "finished",
        ]
        read_only_fields = [
            "state",
            "message",
            "message_code",
            "message_params",
            "transitions",
            "commit",
            "local_path",
            "tool",
            "files",
            "total_bytes",
            "done_bytes",
            "rate_bps",
            "eta_seconds",
            "restarts",
            "log_tail",
            "created",
            "updated",
            "finished",
        ]
        # The active-job constraint is the service's business (a duplicate joins, it is no error).
        validators: list[Any] = []

    def get_has_token(self, obj: ModelDownload) -> bool:
        return bool(obj.token)

    def get_joined(self, obj: ModelDownload) -> bool:
        return bool(self.context.get("joined"))
