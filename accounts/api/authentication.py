from rest_framework import authentication, exceptions

from portal import audit

from ..services import verify_token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token gpt-…` (or `Bearer gpt-…`) with a personal API token."""

    keywords = ("token", "bearer")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").strip()
        if not header:
            return None
        parts = header.split(None, 1)
        if len(parts) != 2 or parts[0].lower() not in self.keywords:
            return None
        token = verify_token(parts[1])
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked API token.")
        audit.set_actor(token.user, request.META.get("REMOTE_ADDR"))
        return (token.user, token)

    def authenticate_header(self, request):
        return "Token"


from . import schema  # noqa: E402, F401  (registers the OpenAPI description of this scheme)
