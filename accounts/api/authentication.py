from __future__ import annotations

from typing import TYPE_CHECKING

from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions

from portal import audit
from portal.api.throttling import FailedTokenThrottle

from ..services import verify_token

if TYPE_CHECKING:
    from rest_framework.request import Request

    from ..models import ApiToken, User


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token gpt-…` (or `Bearer gpt-…`) with a personal API token."""

    keywords = ("token", "bearer")

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").strip()
        if not header:
            return None
        parts = header.split(None, 1)
        if len(parts) != 2 or parts[0].lower() not in self.keywords:
            return None
        throttle = FailedTokenThrottle()
        wait = throttle.wait_before(request)
        if wait is not None:
            raise exceptions.Throttled(
                wait=wait, detail=str(_("Too many failed API token authentications from this address."))
            )
        token = verify_token(parts[1])
        if token is None:
            throttle.failed(request)
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked API token."))
        audit.set_actor(token.user, request.META.get("REMOTE_ADDR"))
        return (token.user, token)

    def authenticate_header(self, request: Request) -> str:
        return "Token"


from . import schema  # noqa: E402, F401  (registers the OpenAPI description of this scheme)
