"""The OpenAPI schema's one addition to drf-spectacular's: every operation may answer 503 with
`{"detail", "code"}` and `Retry-After` when Redis does not answer or the disk is full
(`portal.api.exceptions`), so clients know the shape of that answer."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ServiceUnavailableSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text=_("What went wrong and what to do, for a person."))
    code = serializers.ChoiceField(
        choices=["redis_unavailable", "disk_full"], help_text=_("Stable id of the cause, for a script.")
    )


UNAVAILABLE = OpenApiResponse(
    ServiceUnavailableSerializer,
    description="Redis (cache, task queue) did not answer, or the disk is full; retry after `Retry-After` seconds.",
)


class AutoSchema(SpectacularAutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction == "response" and "503" not in responses:
            responses["503"] = self._get_response_for_code(UNAVAILABLE, "503", direction=direction)
        return responses
