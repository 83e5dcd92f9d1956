"""drf-spectacular extensions: document the personal API token header in the OpenAPI schema."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drf_spectacular.extensions import OpenApiAuthenticationExtension

if TYPE_CHECKING:
    from drf_spectacular.openapi import AutoSchema


class ApiTokenAuthenticationScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # its __init_subclass__ has no types
    target_class = "accounts.api.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token gpt-…` — a personal API token from /api/tokens/ or the account page.",
        }
