"""Host serializers: the SSH private key is write-only and must parse; GPUs are read-only."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from hosts.models import GPU, Host
from portal.api.serializers import ModelSerializer, translated
from portal.fields import secret_problem, undecryptable

MAX_PRIVATE_KEY_CHARS = 16_384


class GPUSerializer(ModelSerializer[GPU]):
    """One GPU of a host, as the host's last inventory reported it."""

    memory_free_mib = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = GPU
        fields = [
            "id",
            "index",
            "uuid",
            "name",
            "memory_total_mib",
            "memory_used_mib",
            "memory_free_mib",
            "utilization_pct",
            "temperature_c",
            "stale",
            "updated",
        ]
        read_only_fields = fields


class HostSerializer(ModelSerializer[Host]):
    """A GPU machine reached over SSH. Send `private_key` to set it (null or "" clears it, omit it
    to keep it); responses only say `has_private_key`. `host_key_fingerprint` is pinned by
    confirming `seen_host_key_fingerprint` (POST /api/hosts/{id}/confirm-host-key/)."""

    private_key = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        allow_null=True,
        trim_whitespace=False,
        max_length=MAX_PRIVATE_KEY_CHARS,
        style={"input_type": "password", "base_template": "textarea.html"},
        help_text=_("Unencrypted OpenSSH or PEM private key; write-only."),
    )
    has_private_key = serializers.SerializerMethodField()
    status_message = translated("status_message")
    secret_problem = serializers.SerializerMethodField(
        help_text=_("Empty, or why the stored private key cannot be used and what to do (this row only).")
    )
    labels = serializers.ListField(
        child=serializers.CharField(max_length=50), required=False, max_length=50, help_text=_("Free-form tags.")
    )
    gpus = GPUSerializer(many=True, read_only=True)

    class Meta:
        model = Host
        fields = [
            "id",
            "name",
            "address",
            "ssh_port",
            "username",
            "private_key",
            "has_private_key",
            "secret_problem",
            "host_key_fingerprint",
            "seen_host_key_fingerprint",
            "labels",
            "gpu_hour_cost",
            "notes",
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "last_checked",
            "driver_version",
            "cuda_version",
            "fit_calibration",
            "gpus",
            "created",
            "updated",
        ]
        read_only_fields = [
            "host_key_fingerprint",
            "seen_host_key_fingerprint",
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "last_checked",
            "driver_version",
            "cuda_version",
            "fit_calibration",
            "created",
            "updated",
        ]

    def get_has_private_key(self, obj: Host) -> bool:
        return bool(obj.private_key) or bool(undecryptable(obj))

    def get_secret_problem(self, obj: Host) -> str:
        return secret_problem(obj)

    def validate_private_key(self, value: str | None) -> str:
        text = (value or "").strip()
        if not text:
            return ""
        import asyncssh  # on use: see hosts.remote.ssh

        try:
            asyncssh.import_private_key(text)
        except Exception:  # asyncssh raises several types; none may reach the client as a 500
            # Never echo the value back: it is a secret even when it is malformed.
            raise serializers.ValidationError(
                _(
                    "Not a usable private key: paste an OpenSSH or PEM private key without a passphrase "
                    "(-----BEGIN OPENSSH PRIVATE KEY----- …); remove a passphrase with ssh-keygen -p."
                )
            ) from None
        return text + "\n"

    def validate_labels(self, value: list[str]) -> list[str]:
        return list(dict.fromkeys(v.strip() for v in value if v.strip()))


class ModelOnDiskSerializer(serializers.Serializer[Any]):
    """One folder of a host's download folder."""

    name = serializers.CharField()
    bytes = serializers.IntegerField(allow_null=True)
    gguf_files = serializers.ListField(child=serializers.CharField())
    has_config = serializers.BooleanField(help_text=_("A config.json is there (a vLLM/SGLang model folder)."))
    busy = serializers.BooleanField(help_text=_("A download is writing into it."))


class ConfirmHostKeySerializer(serializers.Serializer[Any]):
    fingerprint = serializers.CharField(
        max_length=200, help_text=_("The `seen_host_key_fingerprint` you checked, e.g. SHA256:…")
    )


class HostKeyConfirmedSerializer(serializers.Serializer[Any]):
    host_key_fingerprint = serializers.CharField()
    status = serializers.CharField()


class DetailSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()
