"""The filter backends of every API list (`DEFAULT_FILTER_BACKENDS`) that differ from DRF's."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import filters
from rest_framework.exceptions import ValidationError
from rest_framework.settings import api_settings

from portal import i18n
from portal.filters import NullBooleanField, read_bool

NUL_MESSAGE = _("Null characters are not allowed.")
UNKNOWN_ORDERING = _("Cannot order by %(field)s. Choose one of: %(choices)s.")


class NullCharacterFilter(filters.BaseFilterBackend):
    """A NUL character in any query parameter is a 400 naming the parameter. DRF's search answered
    one with a bare list (`["Null characters are not allowed."]`, no field), a parameter no filter
    reads passed silently, and PostgreSQL refuses NUL in text wherever one reaches a query."""

    def filter_queryset(self, request, queryset, view):
        errors = {
            name.replace("\x00", "") or api_settings.NON_FIELD_ERRORS_KEY: [NUL_MESSAGE]
            for name, values in request.query_params.lists()
            if "\x00" in name or any("\x00" in value for value in values)
        }
        if errors:
            raise ValidationError(errors)
        return queryset


class OrderingFilter(filters.OrderingFilter):
    """`?ordering=` naming a field the list cannot be ordered by is a 400 on `ordering` listing the
    ones it can. DRF dropped such a field silently and answered the list in its default order."""

    def remove_invalid_fields(self, queryset, fields, view, request):
        valid = [name for name, _label in self.get_valid_fields(queryset, view, {"request": request})]
        terms = [term for term in fields if term]  # `?ordering=name,` has an empty last term
        unknown = next((term for term in terms if term.removeprefix("-") not in valid), None)
        if unknown is not None:
            raise ValidationError(
                {self.ordering_param: [UNKNOWN_ORDERING % {"field": unknown, "choices": i18n.listing(valid)}]}
            )
        return terms


def bool_param(request, name: str) -> bool | None:
    """A yes/no query parameter of an action without a FilterSet, read as `BooleanFilter` reads one:
    a word it cannot read (`?ok=maybe`, `?failed=yes` once) is a 400 on it, not every row."""
    try:
        return read_bool(request.query_params.get(name))
    except ValueError:
        raise ValidationError({name: [NullBooleanField.default_error_messages["invalid"]]}) from None
