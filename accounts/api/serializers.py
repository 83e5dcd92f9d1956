"""Serializers for users, the caller's profile, personal API tokens and the audit log."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from channels.models import Model
from portal import i18n
from portal.api.serializers import (
    LIMIT_FIELDS,
    BooleanField,
    IdOrNameRelatedField,
    LimitFields,
    ListRelatedField,
    ModelSerializer,
    drf_error,
)

from .. import services
from ..choices import Role
from ..models import ApiToken, AuditLog, Team, User

# --- users ---------------------------------------------------------------------------------------


class UserSerializer(LimitFields, ModelSerializer[User]):
    """Admins manage users. The password is write-only and create-only (use `reset-password` later);
    limits are the ceiling for the user's keys and apply to all of them together."""

    generated_password: str | None = None  # set by create() when the portal chose the password

    password = serializers.CharField(
        write_only=True,
        required=False,
        max_length=128,
        style={"input_type": "password"},
        help_text=_("Only on create; omitted: a password is generated and returned once."),
    )
    allowed_models = ListRelatedField(
        child_relation=serializers.SlugRelatedField(slug_field="name", queryset=Model.objects.all()),
        required=False,
        help_text=_("Model names this user may use; empty: every enabled model."),
    )
    key_defaults = serializers.DictField(
        child=serializers.IntegerField(min_value=1, max_value=10**12, allow_null=True),
        required=False,
        help_text='Limits pre-filled on the user\'s new keys, e.g. {"tokens_per_day": 200000}.',
    )
    is_admin = BooleanField(read_only=True)
    team = IdOrNameRelatedField(
        queryset=Team.objects.all(), required=False, allow_null=True, help_text=_("Team id or name; null: no team.")
    )

    class Meta:
        model = User
        fields = [
            "id",
            "username",
            "email",
            "first_name",
            "last_name",
            "role",
            "team",
            "is_active",
            "is_admin",
            "date_joined",
            "last_login",
            *LIMIT_FIELDS,
            "admin_ceilings",
            "key_defaults",
            "allowed_models",
            "password",
        ]
        read_only_fields = ["is_active", "date_joined", "last_login", "admin_ceilings"]

    def validate_key_defaults(self, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(LIMIT_FIELDS))
        if unknown:
            raise serializers.ValidationError(
                _("Unknown limit(s): %(unknown)s. Known: %(known)s.")
                % {"unknown": i18n.listing(unknown)[:200], "known": i18n.listing(LIMIT_FIELDS)}
            )
        return {k: v for k, v in value.items() if v is not None}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        request = self.context.get("request")
        errors: dict[str, list[str]] = {}
        if self.instance is not None:
            if "password" in attrs:
                errors["password"] = ["Use the reset-password action to change a password."]
            try:
                services.check_role_change(
                    self.instance, attrs.get("role", self.instance.role), actor=request.user if request else None
                )
            except DjangoValidationError as exc:
                errors.update(exc.message_dict)
        elif attrs.get("password"):
            candidate = User(username=attrs.get("username", ""), email=attrs.get("email", ""))
            try:
                validate_password(attrs["password"], user=candidate)
            except DjangoValidationError as exc:
                errors["password"] = exc.messages
        defaults = attrs.get("key_defaults")
        if defaults:
            for name, value in defaults.items():
                ceiling = attrs[name] if name in attrs else getattr(self.instance, name, None)
                if ceiling is not None and value > ceiling:
                    errors.setdefault("key_defaults", []).append(
                        _("%(name)s default %(value)s exceeds this user's limit of %(ceiling)s.")
                        % {"name": name, "value": f"{value:,}", "ceiling": f"{ceiling:,}"}
                    )
        if errors:
            raise serializers.ValidationError(errors)
        limits = {f: attrs[f] for f in LIMIT_FIELDS if f in attrs}
        if request is not None and (limits or "team" in attrs):
            member = self.instance or User()
            # Moving a user checks the limits they keep against the new team too (not recorded as
            # set by this admin: only limits given here are).
            checked = {**{f: getattr(member, f) for f in LIMIT_FIELDS}, **limits} if "team" in attrs else limits
            try:
                cleaned = services.validate_member_limits(
                    member, editor=request.user, limits=checked, team=attrs.get("team", ...), changed=limits
                )
            except DjangoValidationError as exc:
                raise drf_error(exc) from None
            if limits:
                attrs.update(cleaned)
        return attrs

    @transaction.atomic
    def create(self, validated_data: dict[str, Any]) -> User:
        models = validated_data.pop("allowed_models", None)
        password = validated_data.pop("password", None)
        validated_data.setdefault("role", Role.DEVELOPER)
        user, plain = services.create_user(password=password, **validated_data)
        if models:
            user.allowed_models.set(models)
        self.generated_password = None if password else plain  # shown once, in the create answer
        return user

    @transaction.atomic
    def update(self, instance: User, validated_data: dict[str, Any]) -> User:
        if validated_data.get("role") == Role.DEVELOPER and instance.is_superuser:
            # User.save() keeps superusers admin; demoting must drop the superuser flag too.
            instance.is_superuser = False
            instance.is_staff = False
        return super().update(instance, validated_data)


# --- teams ---------------------------------------------------------------------------------------


class TeamSerializer(LimitFields, ModelSerializer[Team]):
    """A team: its limits are a ceiling over all its members together (admins set them; members'
    and keys' own limits can only be lower). Members are assigned on the user (`team`)."""

    allowed_models = ListRelatedField(
        child_relation=serializers.SlugRelatedField(slug_field="name", queryset=Model.objects.all()),
        required=False,
        help_text=_("Model names the team's members may use; empty: every enabled model."),
    )
    members: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", many=True, read_only=True, help_text=_("Usernames of the team's members.")
    )
    leads = serializers.SerializerMethodField(help_text=_("Usernames of the team's leads."))

    class Meta:
        model = Team
        fields = [
            "id",
            "name",
            "description",
            *LIMIT_FIELDS,
            "allowed_models",
            "members",
            "leads",
            "created",
            "updated",
        ]
        read_only_fields = ["created", "updated"]

    def get_leads(self, obj: Team) -> list[str]:
        return sorted(m.username for m in obj.members.all() if m.role == Role.TEAM_LEAD and m.is_active)

    def validate_name(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError(_("Enter a name."))
        return value


class MemberSerializer(LimitFields, ModelSerializer[User]):
    """A team member as the team's lead manages them: their limits (within the team's, and never
    above what an admin set on them) and their keys (under /api/keys/)."""

    class Meta:
        model = User
        fields = ["id", "username", "role", "is_active", *LIMIT_FIELDS, "admin_ceilings"]
        read_only_fields = ["username", "role", "is_active", "admin_ceilings"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        limits = {f: attrs[f] for f in LIMIT_FIELDS if f in attrs}
        assert self.instance is not None  # a member's limits are only ever updated
        try:
            cleaned = services.validate_member_limits(self.instance, editor=self.context["request"].user, limits=limits)
        except DjangoValidationError as exc:
            raise drf_error(exc) from None
        return cleaned

    def update(self, instance: User, validated_data: dict[str, Any]) -> User:
        services.save_member_limits(instance, validated_data)
        return instance


class UserCreatedSerializer(UserSerializer):
    password = serializers.CharField(
        read_only=True, allow_null=True, help_text=_("The generated password, shown once (null if you gave one).")
    )


class ResetPasswordSerializer(serializers.Serializer[Any]):
    revoke_access = BooleanField(
        default=True, help_text=_("Also revoke the user's API tokens and end their sessions (the default).")
    )


class PasswordSerializer(serializers.Serializer[Any]):
    password = serializers.CharField(read_only=True, help_text=_("The new password, shown once."))


class ReactivateSerializer(serializers.Serializer[Any]):
    restore_keys = BooleanField(
        default=False, help_text=_("Keep the user's old keys working; by default they are revoked.")
    )


class UnlockSerializer(serializers.Serializer[Any]):
    cleared = serializers.IntegerField(read_only=True, help_text=_("Failed login attempts cleared."))


class MeSerializer(ModelSerializer[User]):
    """The caller's own profile: role, limits, key defaults and the models they may use."""

    is_admin = BooleanField(read_only=True)
    # Plain text in the schema: an empty address is allowed, which the "email" format refuses.
    email = serializers.CharField(read_only=True, help_text=_("Empty when none is set."))
    key_defaults = serializers.DictField(child=serializers.IntegerField(allow_null=True), read_only=True)
    models = serializers.SerializerMethodField(help_text=_("Names of the models you may use."))

    class Meta:
        model = User
        fields = [
            "id",
            "username",
            "email",
            "first_name",
            "last_name",
            "role",
            "is_admin",
            *LIMIT_FIELDS,
            "key_defaults",
            "models",
        ]
        read_only_fields = fields

    def get_models(self, obj: User) -> list[str]:
        return list(Model.objects.usable_by(obj).order_by("name").values_list("name", flat=True))


# --- personal API tokens -------------------------------------------------------------------------


class ApiTokenSerializer(ModelSerializer[ApiToken]):
    """A personal API token. The plaintext appears once, as `token` in the create response."""

    masked = serializers.SerializerMethodField()
    active = BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "last_four",
            "masked",
            "active",
            "created",
            "last_used_at",
            "expires_at",
            "revoked_at",
        ]
        read_only_fields = ["prefix", "last_four", "created", "last_used_at", "revoked_at"]
        validators: list[Any] = []  # the conditional unique name is checked in validate_name with a clear message

    def get_masked(self, obj: ApiToken) -> str:
        return f"{obj.prefix}…{obj.last_four}"

    def validate_name(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError(_("Enter a name."))
        user = self.context["request"].user
        if ApiToken.objects.not_revoked().filter(user=user, name=value).exists():
            raise serializers.ValidationError(_("You already have an active token with this name."))
        return value

    def validate_expires_at(self, value: datetime.datetime | None) -> datetime.datetime | None:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError(_("The expiry must be in the future."))
        return value


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text=_("The token, shown once: `Authorization: Token <token>`."))

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


# --- audit log -----------------------------------------------------------------------------------


class AuditLogSerializer(ModelSerializer[AuditLog]):
    """Who changed what and when; secrets appear only as "changed" or "set"."""

    changes = serializers.JSONField(read_only=True, help_text='Field: [old, new]; secrets only as "changed"/"set".')

    class Meta:
        model = AuditLog
        fields = [
            "id",
            "created",
            "actor",
            "actor_name",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "changes",
            "message",
            "message_code",
            "message_params",
            "ip_address",
        ]
        read_only_fields = fields
