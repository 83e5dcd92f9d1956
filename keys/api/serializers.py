"""Key serializers. The plaintext key is never part of a key's representation: the create and
rotate views add it, once, as `key`."""

from __future__ import annotations

import datetime
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from accounts.models import User
from accounts.services import may_manage
from channels.models import Model
from keys.choices import KeyState
from keys.models import Key
from keys.services import MAX_CIDR_ENTRIES, check_editable, issue_key, validate_key_settings
from portal.api.serializers import LIMIT_FIELDS, LimitFields, ListRelatedField, ModelSerializer, drf_error

MAX_GRACE = datetime.timedelta(days=30)


class KeySerializer(LimitFields, ModelSerializer[Key]):
    """A developer key. Only `name` is required; `owner` defaults to the caller (admins may name any
    active user, team leads any member of their team). Limits left out take the owner's key
    defaults; a limit above the owner's own limit or their team's is refused."""

    owner = serializers.PrimaryKeyRelatedField(
        queryset=User.objects.all(),
        required=False,
        help_text=_("User id; default: you. Only admins (and team leads, for their members) may set another."),
    )
    owner_username = serializers.CharField(source="owner.username", read_only=True)
    allowed_models = ListRelatedField(
        child_relation=serializers.SlugRelatedField(slug_field="name", queryset=Model.objects.all()),
        required=False,
        help_text=_("Model names; empty: every model the owner may use."),
    )
    ip_allowlist = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        max_length=MAX_CIDR_ENTRIES,
        help_text=_("CIDR blocks (10.0.0.0/8, 2001:db8::/32, or one address); empty: any address."),
    )
    masked = serializers.CharField(read_only=True)
    state = serializers.ChoiceField(choices=KeyState.choices, read_only=True, help_text=_("Computed now."))

    class Meta:
        model = Key
        fields = [
            "id",
            "name",
            "owner",
            "owner_username",
            "prefix",
            "last_four",
            "masked",
            "state",
            "client",
            "allowed_models",
            "ip_allowlist",
            "expires_at",
            "local_only",
            *LIMIT_FIELDS,
            "admin_ceilings",
            "lead_ceilings",
            "last_used_at",
            "revoked_at",
            "rotated_from",
            "created",
            "updated",
        ]
        read_only_fields = [
            "admin_ceilings",
            "lead_ceilings",
            "prefix",
            "last_four",
            "last_used_at",
            "revoked_at",
            "rotated_from",
            "created",
            "updated",
        ]
        validators: list[Any] = []  # the conditional unique (owner, name) is checked in validate()

    def validate_name(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError(_("Enter a name."))
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        request = self.context["request"]
        key: Key | None = self.instance
        if key is not None:
            try:
                check_editable(key)
            except DjangoValidationError as exc:
                raise drf_error(exc) from None
        owner = attrs.get("owner") or (key.owner if key is not None else request.user)
        if key is not None and owner != key.owner:
            raise serializers.ValidationError({"owner": [_("A key's owner cannot change; create a key for them.")]})
        if owner != request.user and not may_manage(request.user, owner):
            raise serializers.ValidationError(
                {"owner": [_("You can only create keys for yourself (a team lead: for the team's members).")]}
            )
        if not owner.is_active:
            raise serializers.ValidationError(
                {"owner": [_("%(username)s is deactivated.") % {"username": owner.username}]}
            )
        attrs["owner"] = owner

        name = attrs.get("name", key.name if key is not None else "")
        clash = Key.objects.not_revoked().filter(owner=owner, name=name)
        if key is not None:
            clash = clash.exclude(pk=key.pk)
        if clash.exists():
            raise serializers.ValidationError(
                {"name": [_("%(username)s already has an active key with this name.") % {"username": owner.username}]}
            )

        try:
            cleaned = validate_key_settings(
                owner,
                editor=request.user,
                key=key,
                limits={f: attrs[f] for f in LIMIT_FIELDS if f in attrs},
                allowed_models=attrs.get("allowed_models"),
                ip_allowlist=attrs.get("ip_allowlist"),
                expires_at=attrs.get("expires_at", ...),
                local_only=attrs.get("local_only"),
            )
        except DjangoValidationError as exc:
            raise drf_error(exc) from None
        attrs.update(cleaned)
        return attrs

    @transaction.atomic
    def create(self, validated_data: dict[str, Any]) -> Key:
        key, plaintext = issue_key(
            owner=validated_data.pop("owner"),
            name=validated_data.pop("name"),
            allowed_models=validated_data.pop("allowed_models", ()),
            **validated_data,
        )
        key.plaintext = plaintext
        return key

    def update(self, instance: Key, validated_data: dict[str, Any]) -> Key:
        validated_data.pop("owner", None)
        return super().update(instance, validated_data)


class KeyCreatedSerializer(KeySerializer):
    key = serializers.CharField(read_only=True, help_text=_("The key, shown once. Store it now."))

    class Meta(KeySerializer.Meta):
        fields = [*KeySerializer.Meta.fields, "key"]


class RotateSerializer(serializers.Serializer[Any]):
    grace_seconds = serializers.IntegerField(
        min_value=0,
        max_value=int(MAX_GRACE.total_seconds()),
        default=0,
        help_text=_("How long the old key keeps working (0 to 30 days); 0: it stops now."),
    )
