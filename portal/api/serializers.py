"""Small helpers every app's API shares: error conversion, id-or-name references, limit fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.utils import html

from portal import permissions
from portal.models import LIMIT_VALIDATORS, Limits

LIMIT_FIELDS = list(Limits.LIMIT_FIELDS)

_MT = TypeVar("_MT", bound=models.Model)
CSRF_FIELD = "csrfmiddlewaretoken"  # what Django's {% csrf_token %} puts in a page's form


class BooleanField(serializers.BooleanField):
    """A boolean a form-encoded or multipart body leaves out is left out, as in JSON: its default
    (the model's, on create) applies, or "required". DRF reads every such body as an HTML form, where
    a missing checkbox means false: `curl -d name=x` made a disabled channel and a PUT disabled it.
    A body that is one (the browsable API's forms carry Django's CSRF field) keeps that reading, so
    unticking a box there still says false."""

    default_empty_html = empty

    def get_value(self, dictionary: Any) -> Any:
        if (
            html.is_html_input(dictionary)
            and self.field_name not in dictionary
            and CSRF_FIELD in dictionary
            and not getattr(self.root, "partial", False)
        ):
            return False
        return super().get_value(dictionary)


class ModelSerializer(serializers.ModelSerializer[_MT]):
    """Every app's model serializer: DRF's, with the model's booleans read as `BooleanField`."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.BooleanField: BooleanField,
    }


def drf_error(exc: DjangoValidationError) -> serializers.ValidationError:
    """A Django ValidationError raised by a shared service, as DRF field errors."""
    if hasattr(exc, "error_dict"):
        return serializers.ValidationError({field: [str(m) for m in msgs] for field, msgs in exc.message_dict.items()})
    return serializers.ValidationError({"non_field_errors": exc.messages})


def is_admin(request) -> bool:
    return permissions.is_admin(getattr(request, "user", None))


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string"}], "description": "Id or name."})
class IdOrNameRelatedField(serializers.RelatedField):
    """Accepts an object's id or its unique name (scripts know names); represents it by id. A
    string is a name first: a channel named "1" is that channel, never the one whose id is 1 (a
    string of digits is an id only when no object has it as its name)."""

    default_error_messages = {
        "does_not_exist": _('No {model} with id or name "{value}".'),
        "incorrect_type": _("Give an id (integer) or a name (string), not {data_type}."),
    }

    def to_internal_value(self, data):
        queryset = self.get_queryset()
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("incorrect_type", data_type=type(data).__name__)
        if isinstance(data, str) and ("\x00" in data or len(data) > 200):
            # PostgreSQL refuses NUL in text even in a WHERE clause; no name is that long anyway.
            self.fail("does_not_exist", model=queryset.model._meta.verbose_name, value=data[:100].replace("\x00", ""))
        try:
            if isinstance(data, int):
                return queryset.get(pk=data)
            found = queryset.filter(name=data).first()
            if found is None and data.isdigit():
                found = queryset.filter(pk=int(data)).first()
            if found is None:
                raise ObjectDoesNotExist
            return found
        except (ObjectDoesNotExist, ValueError, OverflowError):
            self.fail("does_not_exist", model=queryset.model._meta.verbose_name, value=str(data)[:100])

    def to_representation(self, value):
        return value.pk


class ListRelatedField(serializers.ManyRelatedField):
    """A to-many relation given as a JSON list only (`child_relation`: the related field of one
    item). DRF's own takes any iterable, so an object ({}) passed as an empty list and cleared the
    relation; on a key an empty model list means every model the owner may use."""

    def __init__(self, child_relation: serializers.RelatedField, **kwargs: Any) -> None:
        # The stubs type help_text as str only; the lazy translations every field uses are fine.
        super().__init__(child_relation, **kwargs)

    def to_internal_value(self, data: Any) -> list[Any]:
        if isinstance(data, Mapping):
            self.fail("not_a_list", input_type=type(data).__name__)
        return list(super().to_internal_value(data))


def limit_field() -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, allow_null=True, validators=LIMIT_VALIDATORS, help_text=_("Blank/null: unlimited.")
    )


class LimitFields(serializers.Serializer):
    """The five limits as API fields (null: unlimited), for users' and keys' serializers."""

    requests_per_minute = limit_field()
    tokens_per_minute = limit_field()
    tokens_per_day = limit_field()
    tokens_per_month = limit_field()
    max_parallel_requests = limit_field()


def translated(field: str = "message") -> serializers.CharField:
    """A stored message (`portal.i18n.Message`) rendered in the request's language; list
    `<field>_code` and `<field>_params` next to it, what it is made from."""
    return serializers.CharField(
        source=f"{field}_text",
        read_only=True,
        help_text=_(
            "In the request's language (Accept-Language, else the user's language). Made from the "
            "`_code` (its English text, the gettext msgid; empty: the text is shown as stored) and `_params` fields."
        ),
    )


TRANSITIONS_HELP = _(
    "Each state with its time (`at`), its `label` and `message` in the request's language, and the message's "
    "`message_code` and `message_params` when it has them."
)


def transitions_field() -> serializers.ListField:
    """A job's `transitions` as its `history` (labels and messages in the request's language)."""
    return serializers.ListField(
        source="history", child=serializers.DictField(), read_only=True, help_text=TRANSITIONS_HELP
    )
