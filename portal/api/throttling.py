"""REST API throttles. The client address DRF sees is REMOTE_ADDR, which portal.asgi has already
resolved from trusted proxies only (settings.PORTAL_TRUSTED_PROXIES), hence NUM_PROXIES = 0."""

from __future__ import annotations

from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle


class TokenRateThrottle(SimpleRateThrottle):
    """Per API token when the request has one, else per logged-in user (a session)."""

    scope = "token"

    def get_cache_key(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return None  # AnonThrottle's
        auth = request.auth
        ident = f"token-{auth.pk}" if getattr(auth, "pk", None) is not None else f"user-{request.user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class AnonThrottle(AnonRateThrottle):
    """Per address for requests without credentials."""
