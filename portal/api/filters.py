"""The filter backend that runs before the others on every API list (`DEFAULT_FILTER_BACKENDS`)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework.exceptions import ValidationError
from rest_framework.filters import BaseFilterBackend
from rest_framework.settings import api_settings

NUL_MESSAGE = _("Null characters are not allowed.")


class NullCharacterFilter(BaseFilterBackend):
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
