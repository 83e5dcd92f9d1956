"""REST API throttles. The client address DRF sees is REMOTE_ADDR, which portal.asgi has already
resolved from trusted proxies only (settings.PORTAL_TRUSTED_PROXIES), hence NUM_PROXIES = 0.

Their history lives in the Redis cache; when Redis does not answer they **fail open** (the request
is not throttled) for the reasons written in `portal.faults`."""

from __future__ import annotations

from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle

from portal.faults import FailOpen

_open = FailOpen("REST API throttle")


class FailOpenThrottle(SimpleRateThrottle):
    """A throttle that lets the request through when its Redis history cannot be read or written."""

    def allow_request(self, request, view):
        return _open.call(lambda: super(FailOpenThrottle, self).allow_request(request, view), True)


class TokenRateThrottle(FailOpenThrottle):
    """Per API token when the request has one, else per logged-in user (a session)."""

    scope = "token"

    def get_cache_key(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return None  # AnonThrottle's
        auth = request.auth
        ident = f"token-{auth.pk}" if getattr(auth, "pk", None) is not None else f"user-{request.user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class AnonThrottle(FailOpenThrottle, AnonRateThrottle):
    """Per address for requests without credentials."""
