"""Channel and model serializers. A channel's API key is write-only; a model's routes are nested."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from channels.choices import ChannelKind
from channels.models import Channel, Model, ModelRoute, RoutePrice, validate_api_key
from channels.prices import currency
from channels.services import (
    MAX_ALIAS_TARGETS,
    clean_base_url,
    cold_windows,
    replace_routes,
    reset_status_after_edit,
    save_alias,
    set_route_price,
    suggest_locality,
)
from portal.api.serializers import BooleanField, IdOrNameRelatedField, ModelSerializer, is_admin, translated
from portal.fields import secret_problem, undecryptable

MAX_API_KEY_CHARS = 4096


class ChannelSerializer(ModelSerializer):
    """An upstream. `base_url` is stored canonical (ending in /v1); `base_url_notes` says what was
    changed in the URL you sent. `api_key` is write-only (null or "" clears it, omit it to keep it)."""

    status_message = translated("status_message")

    base_url = serializers.CharField(
        max_length=2000, help_text=_("Any form (with or without /v1, trailing slash, query); stored canonical.")
    )
    base_url_notes = serializers.SerializerMethodField(
        help_text=_("What normalisation changed in the base_url you sent (create/update responses; else empty).")
    )
    api_key = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        allow_null=True,
        max_length=MAX_API_KEY_CHARS,
        style={"input_type": "password"},
        help_text=_("Sent upstream by the gateway; write-only."),
    )
    has_api_key = serializers.SerializerMethodField()
    secret_problem = serializers.SerializerMethodField(
        help_text=_("Empty, or why the stored API key cannot be used and what to do (this row only).")
    )
    models: serializers.SlugRelatedField[Model] = serializers.SlugRelatedField(
        slug_field="name", many=True, read_only=True, help_text=_("Public models routed to this channel.")
    )

    class Meta:
        model = Channel
        fields = [
            "id",
            "name",
            "kind",
            "base_url",
            "base_url_notes",
            "locality",
            "api_key",
            "has_api_key",
            "secret_problem",
            "priority",
            "weight",
            "enabled",
            "speaks_messages",
            "speaks_responses",
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "status_changed",
            "last_checked",
            "notes",
            "models",
            "created",
            "updated",
        ]
        read_only_fields = [
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "status_changed",
            "last_checked",
            "created",
            "updated",
        ]

    def get_base_url_notes(self, obj: Channel) -> list[str]:
        return list(getattr(self, "_base_url_notes", []))

    def get_has_api_key(self, obj: Channel) -> bool:
        return bool(obj.api_key) or bool(undecryptable(obj))

    def get_secret_problem(self, obj: Channel) -> str:
        return secret_problem(obj)

    def validate_base_url(self, value: str) -> str:
        try:
            canonical, notes = clean_base_url(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict.get("base_url", exc.messages)) from None
        self._base_url_notes = notes
        return canonical

    def validate_api_key(self, value: str | None) -> str:
        value = (value or "").strip()
        if any(c.isspace() for c in value):
            raise serializers.ValidationError(_("An API key cannot contain spaces or line breaks."))
        try:
            validate_api_key(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None
        return value

    def validate(self, attrs: dict) -> dict:
        kind = attrs.get("kind", getattr(self.instance, "kind", ChannelKind.OPENAI))
        if kind == ChannelKind.ANTHROPIC:
            attrs["speaks_messages"] = True  # the Anthropic API is the Messages API
        if self.instance is None and "locality" not in attrs and "base_url" in attrs:
            attrs["locality"] = suggest_locality(attrs["base_url"])  # omitted: follow the address
        return attrs

    def update(self, instance: Channel, validated_data: dict) -> Channel:
        previous_base_url, previous_api_key = instance.base_url, instance.api_key
        for name, value in validated_data.items():
            setattr(instance, name, value)
        reset_status_after_edit(instance, previous_base_url=previous_base_url, previous_api_key=previous_api_key)
        instance.save()
        return instance


class ModelRouteSerializer(ModelSerializer):
    """One channel serving the model: the id the upstream knows it by, and its limits as configured
    and as the server reports them (the effective window is what clients get)."""

    channel = IdOrNameRelatedField(queryset=Channel.objects.all(), help_text=_("Channel id or name."))
    channel_name = serializers.CharField(source="channel.name", read_only=True)
    upstream_id = serializers.CharField(read_only=True, help_text=_("upstream_model, or the public name if blank."))
    upstream_unlisted = serializers.BooleanField(
        read_only=True,
        help_text=_(
            "True when the model server (vLLM, or llama.cpp serving several models) did not list upstream_id "
            "at its last check: requests for it fail there. Fix upstream_model, or start the server with that name."
        ),
    )
    effective_context_window = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = ModelRoute
        fields = [
            "id",
            "channel",
            "channel_name",
            "upstream_model",
            "upstream_id",
            "upstream_unlisted",
            "context_window",
            "max_output_tokens",
            "discovered_context_window",
            "effective_context_window",
            "enabled",
        ]
        read_only_fields = ["discovered_context_window"]

    def to_internal_value(self, data: Any) -> Any:
        # `upstream_id` is what a GET shows, so a script writes it back: sent alone it would be dropped
        # silently (read-only) and the route would ask the upstream for the public name instead.
        # Sent with `upstream_model` (a GET's body sent back), `upstream_model` is the one that counts.
        if isinstance(data, dict) and "upstream_id" in data and "upstream_model" not in data:
            raise serializers.ValidationError(
                {"upstream_id": [_("Read-only: the id the upstream is asked for is set as upstream_model.")]}
            )
        return super().to_internal_value(data)


def response_cold_windows(serializer: serializers.Field) -> dict[str, int]:
    """`cold_windows()` once per response: a list's items share their root serializer's."""
    root = serializer.root
    if not hasattr(root, "_cold_windows"):
        root._cold_windows = cold_windows()  # type: ignore[attr-defined]
    return root._cold_windows  # type: ignore[attr-defined]


class PublicModelSerializer(ModelSerializer):
    """A public model name and the channels serving it. Sending `routes` replaces the whole set,
    matched by channel: a channel that stays keeps its route, with its prices and discovered context
    window; omit `routes` to keep them all. A route left out that has prices is deleted with its
    price history only when `remove_priced_routes` is true (else 400)."""

    routes = ModelRouteSerializer(many=True, required=False, help_text=_("Admins only."))
    remove_priced_routes = BooleanField(
        write_only=True,
        required=False,
        default=False,
        help_text=_(
            "True: routes left out of `routes` are removed even when they have prices, with their price history."
        ),
    )
    context_window = serializers.SerializerMethodField(
        help_text=_(
            "Smallest effective context window over the enabled routes; for a stopped on-demand model, "
            "the window its server starts with."
        )
    )
    max_output_tokens = serializers.SerializerMethodField(help_text=_("Smallest max output over the enabled routes."))

    class Meta:
        model = Model
        fields = [
            "id",
            "name",
            "display_name",
            "description",
            "enabled",
            "kind",
            "balance",
            "context_window",
            "max_output_tokens",
            "routes",
            "remove_priced_routes",
            "created",
            "updated",
        ]

    def _limits(self, obj: Model) -> tuple[int | None, int | None]:
        return obj.limits_over(obj.routes.all(), cold=response_cold_windows(self))  # the prefetched routes

    def get_context_window(self, obj: Model) -> int | None:
        return self._limits(obj)[0]

    def get_max_output_tokens(self, obj: Model) -> int | None:
        return self._limits(obj)[1]

    def to_representation(self, instance: Model) -> dict:
        data = super().to_representation(instance)
        if not is_admin(self.context.get("request")):
            data.pop("routes", None)  # which upstream serves a model is the operators' business
        return data

    def validate_routes(self, routes: list[dict]) -> list[dict]:
        seen: set[int] = set()
        for route in routes:
            if "channel" not in route:  # a PATCH is partial down to its nested routes, but a route is not
                raise serializers.ValidationError(_("Each route needs its channel (an id or a name)."))
            if route["channel"].pk in seen:
                raise serializers.ValidationError(
                    _("Channel %(channel)s is listed twice.") % {"channel": route["channel"].name}
                )
            seen.add(route["channel"].pk)
        return routes

    @transaction.atomic
    def create(self, validated_data: dict) -> Model:
        routes = validated_data.pop("routes", [])
        remove_priced = validated_data.pop("remove_priced_routes", False)
        model = Model.objects.create(**validated_data)
        self._save_routes(model, routes, remove_priced)
        return model

    @transaction.atomic
    def update(self, instance: Model, validated_data: dict) -> Model:
        routes = validated_data.pop("routes", None)
        remove_priced = validated_data.pop("remove_priced_routes", False)
        instance = super().update(instance, validated_data)
        if routes is not None:
            self._save_routes(instance, routes, remove_priced)
        return instance

    def _save_routes(self, model: Model, routes: list[dict], remove_priced: bool) -> None:
        try:
            replace_routes(model, routes, remove_priced=remove_priced)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None


class AliasSerializer(ModelSerializer):
    """An alias (virtual model): a public name whose requests go to `targets`, model names tried
    in order (the first whose window holds the request and that answers). `context_window` is the
    largest a target serves; `local_only` keeps its requests on local channels."""

    targets = serializers.ListField(
        source="target_names",
        child=serializers.CharField(max_length=128),
        min_length=1,
        max_length=MAX_ALIAS_TARGETS,
        help_text=_("Public model names (not aliases), in the order to try them."),
    )
    context_window = serializers.SerializerMethodField(help_text=_("The largest context window a target serves."))
    max_output_tokens = serializers.SerializerMethodField(help_text=_("The largest max output a target allows."))

    class Meta:
        model = Model
        fields = [
            "id",
            "name",
            "display_name",
            "description",
            "enabled",
            "local_only",
            "targets",
            "context_window",
            "max_output_tokens",
            "created",
            "updated",
        ]
        validators: list = []  # name uniqueness is save_alias's, as a field error

    def _limits(self, obj: Model) -> tuple[int | None, int | None]:
        if getattr(self, "_limits_of", (None,))[0] != obj.pk:  # asked twice per alias: once each field
            self._limits_of = (obj.pk, obj.effective_limits(cold=response_cold_windows(self)))
        return self._limits_of[1]

    def get_context_window(self, obj: Model) -> int | None:
        return self._limits(obj)[0]

    def get_max_output_tokens(self, obj: Model) -> int | None:
        return self._limits(obj)[1]

    def _save(self, alias: Model | None, data: dict) -> Model:
        current = (
            {
                "name": alias.name,
                "display_name": alias.display_name,
                "description": alias.description,
                "enabled": alias.enabled,
                "local_only": alias.local_only,
                "targets": alias.target_names,
            }
            if alias is not None
            else {}
        )
        if "target_names" in data:
            data = {**data, "targets": data.pop("target_names")}
        merged = {**current, **data}
        try:
            return save_alias(
                alias=alias,
                name=merged.get("name", ""),
                targets=merged.get("targets", []),
                display_name=merged.get("display_name", ""),
                description=merged.get("description", ""),
                enabled=merged.get("enabled", True),
                local_only=merged.get("local_only", False),
            )
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None

    def create(self, validated_data: dict) -> Model:
        return self._save(None, validated_data)

    def update(self, instance: Model, validated_data: dict) -> Model:
        return self._save(instance, validated_data)


class RoutePriceSerializer(ModelSerializer):
    """A route's price per million tokens in the portal's currency, from `effective_from` (default:
    now). Rows are added, never edited: past usage keeps the price it was made at."""

    model = serializers.CharField(source="route.model.name", read_only=True)
    channel = serializers.CharField(source="route.channel.name", read_only=True)
    currency = serializers.SerializerMethodField()

    class Meta:
        model = RoutePrice
        fields = [
            "id",
            "route",
            "model",
            "channel",
            "effective_from",
            "input",
            "cached_input",
            "cache_write",
            "output",
            "currency",
            "source",
            "note",
            "created",
        ]
        read_only_fields = ["id", "model", "channel", "currency", "source", "note", "created"]
        extra_kwargs = {"effective_from": {"required": False}}
        validators: list = []  # the unique (route, start) is the service's check, with a field error

    def get_currency(self, price: RoutePrice) -> str:
        return currency()

    def create(self, validated_data):
        try:
            return set_route_price(
                validated_data["route"],
                input=validated_data["input"],
                output=validated_data["output"],
                cached_input=validated_data.get("cached_input"),
                cache_write=validated_data.get("cache_write"),
                effective_from=validated_data.get("effective_from"),
            )
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
