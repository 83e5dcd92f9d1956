"""The OpenAPI schema's additions to drf-spectacular's: every operation may answer 503 with
`{"detail", "code"}` and `Retry-After` when Redis does not answer or the disk is full
(`portal.api.exceptions`), so clients know the shape of that answer; and our own base classes'
docstrings, written for this code's readers, are not an API object's description."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import get_lib_doc_excludes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import AllowAny


def doc_excludes() -> list[type]:
    """drf-spectacular describes a class without a docstring by its nearest base's; stop at ours
    as at DRF's (`GET_LIB_DOC_EXCLUDES`)."""
    from .serializers import ModelSerializer

    return [*get_lib_doc_excludes(), ModelSerializer]


class ServiceUnavailableSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text=_("What went wrong and what to do, for a person."))
    code = serializers.ChoiceField(
        choices=["redis_unavailable", "disk_full"], help_text=_("Stable id of the cause, for a script.")
    )


UNAVAILABLE = OpenApiResponse(
    ServiceUnavailableSerializer,
    description="Redis (cache, task queue) did not answer, or the disk is full; retry after `Retry-After` seconds.",
)


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text=_("What went wrong, for a person."))


class FieldErrorsSerializer(serializers.Serializer):
    """A 400's body: each field with its messages, `non_field_errors` for the request as a whole."""

    non_field_errors = serializers.ListField(child=serializers.CharField(), required=False)


ERRORS = {
    "400": OpenApiResponse(
        FieldErrorsSerializer,
        description="The request is not valid: each field's or query parameter's messages under its name "
        "(nested like the request), or `detail` when the body could not be read.",
    ),
    "401": OpenApiResponse(ErrorSerializer, description="No token, or a token that is not valid (any more)."),
    "403": OpenApiResponse(ErrorSerializer, description="This token's user may not do this."),
    "404": OpenApiResponse(ErrorSerializer, description="No such object, or not one this user may see."),
    "409": OpenApiResponse(ErrorSerializer, description="Still used by other objects: `detail` names them."),
    "429": OpenApiResponse(ErrorSerializer, description="Too many requests; retry after `Retry-After` seconds."),
}


class AutoSchema(SpectacularAutoSchema):
    def _get_response_bodies(self, direction="response"):
        """drf-spectacular's, plus the errors every operation may answer (they were not documented):
        400 where a body or a query is read, 401/403 where a token is needed, 404 on an object's path,
        409 on a delete, 429 and 503 everywhere."""
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        method = self.method.upper()
        codes = ["429"]
        if method != "DELETE":
            codes.append("400")
        if not self._is_public():
            codes += ["401", "403"]
        if "{" in self.path:
            codes.append("404")
        if method == "DELETE":
            codes.append("409")
        for code in codes:
            if code not in responses:
                responses[code] = self._get_response_for_code(ERRORS[code], code, direction=direction)
        if "503" not in responses:
            responses["503"] = self._get_response_for_code(UNAVAILABLE, "503", direction=direction)
        return responses

    def _is_public(self) -> bool:
        return any(isinstance(p, AllowAny) for p in self.view.get_permissions())
