"""Filter helpers every app's FilterSets share."""

from __future__ import annotations

import datetime
from collections.abc import Mapping

import django_filters
import django_filters.fields
from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _

from . import i18n
from .forms import FIELD_LABELS


def search(
    queryset: QuerySet,
    fields: tuple[str, ...],
    value: str,
    *,
    messages: tuple[str, ...] = (),
    labels: Mapping[str, Mapping[str, object]] | None = None,
) -> QuerySet:
    """Case-insensitive OR over `fields` for the `q` box of a list (NetBox's quick search).
    `messages` names stored-message fields (`portal.i18n.Message`: `<field>` holds the English,
    `<field>_code` the msgid): a row also matches when its message's own sentence, in the reader's
    language, contains the words (a value that is a message itself, "%(access)s", is matched by
    its stored English only). `labels` names fields whose stored value is shown as a label
    (`{"action": {"create": "Created", …}}`, a choice's or a model's name in the reader's
    language): a row also matches when the label it shows contains the words."""
    value = (value or "").strip()
    if not value:
        return queryset
    query = Q()
    for field in (*fields, *messages):
        query |= Q(**{f"{field}__icontains": value})
    codes = i18n.codes_reading(value) if messages else []
    for field in messages if codes else ():
        query |= Q(**{f"{field}_code__in": codes})
    needle = value.casefold()
    for field, shown in (labels or {}).items():
        matching = [stored for stored, label in shown.items() if needle in str(label).casefold()]
        if matching:
            query |= Q(**{f"{field}__in": matching})
    return queryset.filter(query)


class UTCIsoDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 date-time, converted to UTC as it is cleaned: an instant whose UTC falls outside
    the years 1-9999 (`9999-12-31T23:59:59-01:00`) is the field's "Enter a valid date/time.", not
    an OverflowError."""

    def to_python(self, value):
        value = super().to_python(value)
        if isinstance(value, datetime.datetime) and value.tzinfo is not None:
            try:
                value = value.astimezone(datetime.UTC)
            except OverflowError:
                raise ValidationError(self.error_messages["invalid"], code="invalid") from None
        return value


class UTCDateTimeFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 date-time filter whose value is converted to UTC before it reaches the database.

    Python accepts UTC offsets up to ±23:59; PostgreSQL refuses anything beyond ±15:59 (a 500 if
    passed through). The instant is the same either way, so convert rather than refuse."""

    field_class = UTCIsoDateTimeField


TRUE_WORDS = frozenset({"true", "1", "yes"})
FALSE_WORDS = frozenset({"false", "0", "no"})


def read_bool(value: object) -> bool | None:
    """A yes/no filter's value: True or False from the usual spellings (any case), None for no
    choice ("", or "unknown", what Django's Yes/No select sends for its empty choice), else
    ValueError."""
    if value is None or isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    if word in ("", "unknown"):
        return None
    raise ValueError(value)


class BooleanSelect(forms.NullBooleanSelect):
    """Django's Yes/No select, which hands the field the word as sent: Django's own reads a word
    it does not know ("yes", "1", "maybe") as no choice, so `?enabled=1` listed every row. The
    choice is shown selected as a list, like any select's: Django's gives a string, in which the
    "any" choice's "" (`portal.ui`) is found first, so a filtered page showed "any"."""

    def value_from_datadict(self, data, files, name):
        return data.get(name)

    def format_value(self, value):
        try:
            chosen = read_bool(value)
        except ValueError:
            chosen = None
        return [] if chosen is None else ["true" if chosen else "false"]


class NullBooleanField(forms.NullBooleanField):
    widget = BooleanSelect
    default_error_messages = {"invalid": _("Enter true or false (or 1 or 0, yes or no).")}

    def to_python(self, value):
        try:
            return read_bool(value)
        except ValueError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


class BooleanFilter(django_filters.BooleanFilter):
    """A yes/no filter that refuses a value it cannot read (a 400 in the API, the field's error on
    a page) instead of ignoring it and listing every row, which a script took for the filtered list."""

    field_class = NullBooleanField


RANGE_MESSAGE = _("%(end)s must not be before %(start)s.")


class FilterSet(django_filters.FilterSet):
    """A FilterSet whose generated filters carry the translated labels of `portal.forms.FIELD_LABELS`
    (django-filter would label them with the model field's name, which no translation reaches), and
    whose yes/no filters are `BooleanFilter`.

    `ranges` pairs a range's start and end filters: an end before its start is an error on the end
    (a 400 in the API, the field's error on a page), not an empty list a script took for "no usage".
    `clean(form)` adds checks across fields of a subclass's own."""

    ranges: tuple[tuple[str, str], ...] = ()

    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        models.BooleanField: {"filter_class": BooleanFilter},
    }

    @classmethod
    def filter_for_field(cls, field, field_name, lookup_expr=None):
        made = super().filter_for_field(field, field_name, lookup_expr)
        if field_name in FIELD_LABELS:
            made.label = FIELD_LABELS[field_name]
        return made

    def get_form_class(self):
        filterset = self

        class Form(super().get_form_class()):  # type: ignore[misc]
            def clean(self):
                cleaned = super().clean()
                filterset.clean(self)
                return cleaned

        return Form

    def clean(self, form: forms.Form) -> None:
        """Checks across the form's fields, each failure an error added to its field."""
        for start, end in self.ranges:
            first, last = form.cleaned_data.get(start), form.cleaned_data.get(end)
            if first is not None and last is not None and last < first:
                form.add_error(end, RANGE_MESSAGE % {"start": start, "end": end})
