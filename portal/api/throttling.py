"""REST API throttles. The client address DRF sees is REMOTE_ADDR, which portal.asgi has already
resolved from trusted proxies only (settings.PORTAL_TRUSTED_PROXIES), hence NUM_PROXIES = 0.

Their history lives in the Redis cache; when Redis does not answer they **fail open** (the request
is not throttled) for the reasons written in `portal.faults`."""

from __future__ import annotations

from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle

from portal.faults import FailOpen

_open = FailOpen("REST API throttle")
_open_failed = FailOpen("failed API-token throttle")


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


class FailedTokenThrottle(SimpleRateThrottle):
    """Failed API-token authentications per address (`PORTAL_API_FAILED_AUTH_RATE`). Only failures
    count; past the rate every token from that address is answered 429 before it is checked, so
    guessing tokens costs the guesser time, not the owner of a good one elsewhere.

    It fails open like the others: a token is 256 random bits, so what this throttle saves is load,
    and failing closed would refuse every script (an admin's revoke included) while Redis is away."""

    scope = "failed_token"
    num_requests: int  # set from the rate by SimpleRateThrottle.__init__
    duration: int

    def get_cache_key(self, request, view=None):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def wait_before(self, request) -> float | None:
        """Seconds this address must wait before a token is checked, or None (also when Redis
        does not answer)."""
        return _open_failed.call(lambda: self._wait_before(request), None)

    def _wait_before(self, request) -> float | None:
        self.key = self.get_cache_key(request)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        return self.wait() if len(self.history) >= self.num_requests else None

    def failed(self, request) -> None:
        def record() -> None:
            self._wait_before(request)
            self.throttle_success()

        _open_failed.call(record, None)
