"""Serializers for users, the caller's profile, personal API tokens and the audit log, plus the
small helpers every app's API shares (error conversion, id-or-name references, secrets-once)."""

from __future__ import annotations

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from channels.models import Model
from portal import services
from portal.choices import Role
from portal.models import LIMIT_VALIDATORS, ApiToken, AuditLog, Limits, User

LIMIT_FIELDS = list(Limits.LIMIT_FIELDS)


def drf_error(exc: DjangoValidationError) -> serializers.ValidationError:
    """A Django ValidationError raised by a shared service, as DRF field errors."""
    if hasattr(exc, "error_dict"):
        return serializers.ValidationError({field: [str(m) for m in msgs] for field, msgs in exc.message_dict.items()})
    return serializers.ValidationError({"non_field_errors": exc.messages})


def is_admin(request) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_admin)


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string"}], "description": "Id or name."})
class IdOrNameRelatedField(serializers.RelatedField):
    """Accepts an object's id or its unique name (scripts know names); represents it by id."""

    default_error_messages = {
        "does_not_exist": 'No {model} with id or name "{value}".',
        "incorrect_type": "Give an id (integer) or a name (string), not {data_type}.",
    }

    def to_internal_value(self, data):
        queryset = self.get_queryset()
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("incorrect_type", data_type=type(data).__name__)
        if isinstance(data, str) and ("\x00" in data or len(data) > 200):
            # PostgreSQL refuses NUL in text even in a WHERE clause; no name is that long anyway.
            self.fail("does_not_exist", model=queryset.model._meta.verbose_name, value=data[:100].replace("\x00", ""))
        try:
            if isinstance(data, int) or (isinstance(data, str) and data.isdigit()):
                found = queryset.filter(pk=int(data)).first()
                if found is not None:
                    return found
            return queryset.get(name=str(data))
        except (ObjectDoesNotExist, ValueError, OverflowError):
            self.fail("does_not_exist", model=queryset.model._meta.verbose_name, value=str(data)[:100])

    def to_representation(self, value):
        return value.pk


def limit_field() -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, allow_null=True, validators=LIMIT_VALIDATORS, help_text="Blank/null: unlimited."
    )


# --- users ---------------------------------------------------------------------------------------


class UserSerializer(serializers.ModelSerializer):
    """Admins manage users. The password is write-only and create-only (use `reset-password` later);
    limits are the ceiling for the user's keys and apply to all of them together."""

    password = serializers.CharField(
        write_only=True,
        required=False,
        max_length=128,
        style={"input_type": "password"},
        help_text="Only on create; omitted: a password is generated and returned once.",
    )
    allowed_models = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Model.objects.all(),
        many=True,
        required=False,
        help_text="Model names this user may use; empty: every enabled model.",
    )
    key_defaults = serializers.DictField(
        child=serializers.IntegerField(min_value=1, max_value=10**12, allow_null=True),
        required=False,
        help_text='Limits pre-filled on the user\'s new keys, e.g. {"tokens_per_day": 200000}.',
    )
    is_admin = serializers.BooleanField(read_only=True)
    requests_per_minute = limit_field()
    tokens_per_minute = limit_field()
    tokens_per_day = limit_field()
    tokens_per_month = limit_field()
    max_parallel_requests = limit_field()

    class Meta:
        model = User
        fields = [
            "id",
            "username",
            "email",
            "first_name",
            "last_name",
            "role",
            "is_active",
            "is_admin",
            "date_joined",
            "last_login",
            *LIMIT_FIELDS,
            "key_defaults",
            "allowed_models",
            "password",
        ]
        read_only_fields = ["is_active", "date_joined", "last_login"]

    def validate_key_defaults(self, value: dict) -> dict:
        unknown = sorted(set(value) - set(LIMIT_FIELDS))
        if unknown:
            raise serializers.ValidationError(
                f"Unknown limit(s): {', '.join(unknown)[:200]}. Known: {', '.join(LIMIT_FIELDS)}."
            )
        return {k: v for k, v in value.items() if v is not None}

    def validate(self, attrs: dict) -> dict:
        request = self.context.get("request")
        errors: dict[str, list[str]] = {}
        if self.instance is not None:
            if "password" in attrs:
                errors["password"] = ["Use the reset-password action to change a password."]
            if (
                request is not None
                and self.instance.pk == request.user.pk
                and attrs.get("role", self.instance.role) != Role.ADMIN
            ):
                errors["role"] = ["You cannot remove your own admin role; ask another admin."]
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
                        f"{name} default {value:,} exceeds this user's limit of {ceiling:,}."
                    )
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    @transaction.atomic
    def create(self, validated_data: dict) -> User:
        models = validated_data.pop("allowed_models", None)
        password = validated_data.pop("password", None)
        validated_data.setdefault("role", Role.DEVELOPER)
        user, plain = services.create_user(password=password, **validated_data)
        if models:
            user.allowed_models.set(models)
        if not password:
            user.generated_password = plain
        return user

    @transaction.atomic
    def update(self, instance: User, validated_data: dict) -> User:
        if validated_data.get("role") == Role.DEVELOPER and instance.is_superuser:
            # User.save() keeps superusers admin; demoting must drop the superuser flag too.
            instance.is_superuser = False
            instance.is_staff = False
        return super().update(instance, validated_data)


class UserCreatedSerializer(UserSerializer):
    password = serializers.CharField(
        read_only=True, required=False, help_text="The generated password, shown once (absent if you gave one)."
    )


class PasswordSerializer(serializers.Serializer):
    password = serializers.CharField(read_only=True, help_text="The new password, shown once.")


class MeSerializer(serializers.ModelSerializer):
    """The caller's own profile: role, limits, key defaults and the models they may use."""

    is_admin = serializers.BooleanField(read_only=True)
    key_defaults = serializers.DictField(child=serializers.IntegerField(allow_null=True), read_only=True)
    models = serializers.SerializerMethodField(help_text="Names of the models you may use.")

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


class ApiTokenSerializer(serializers.ModelSerializer):
    """A personal API token. The plaintext appears once, as `token` in the create response."""

    masked = serializers.SerializerMethodField()
    active = serializers.BooleanField(source="is_active", read_only=True)

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
        validators: list = []  # the conditional unique name is checked in validate_name with a clear message

    def get_masked(self, obj: ApiToken) -> str:
        return f"{obj.prefix}…{obj.last_four}"

    def validate_name(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError("Enter a name.")
        user = self.context["request"].user
        if ApiToken.objects.filter(user=user, name=value, revoked_at__isnull=True).exists():
            raise serializers.ValidationError("You already have an active token with this name.")
        return value

    def validate_expires_at(self, value):
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("The expiry must be in the future.")
        return value


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The token, shown once: `Authorization: Token <token>`.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


# --- audit log -----------------------------------------------------------------------------------


class AuditLogSerializer(serializers.ModelSerializer):
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
            "ip_address",
        ]
        read_only_fields = fields
