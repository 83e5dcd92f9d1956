from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from portal.api.serializers import BooleanField

from ..models import KeyMode


class RenderQuerySerializer(serializers.Serializer[Any]):
    key = serializers.IntegerField(required=False, help_text=_("List only the models this key of yours may use."))
    model = serializers.CharField(required=False, allow_blank=True, max_length=128, help_text=_("Default model."))


REPLACE_HELP = "Replace the active key minted before for this client and machine (it stops 10 minutes later)."


class MintSerializer(serializers.Serializer[Any]):
    machine = serializers.CharField(required=False, allow_blank=True, max_length=40, help_text=_("e.g. laptop"))
    model = serializers.CharField(required=False, allow_blank=True, max_length=128)
    replace = BooleanField(default=True, help_text=REPLACE_HELP)


class DownloadTokenSerializer(serializers.Serializer[Any]):
    key_mode = serializers.ChoiceField(choices=KeyMode.choices, default=KeyMode.PLACEHOLDER)
    key = serializers.IntegerField(required=False, help_text=_("Placeholder mode: scope the models to this key."))
    machine = serializers.CharField(required=False, allow_blank=True, max_length=40)
    model = serializers.CharField(required=False, allow_blank=True, max_length=128)
    replace = BooleanField(default=True, help_text=REPLACE_HELP)


class RedeemSerializer(serializers.Serializer[Any]):
    token = serializers.CharField(max_length=100)


class ClientSummarySerializer(serializers.Serializer[Any]):
    """One supported client (schema of the client list)."""

    slug = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label
    env_indirection = BooleanField(help_text=_("The config reads the key from an environment variable."))
