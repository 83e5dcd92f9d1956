"""ASGI entry point: `/v1` and the other gateway paths go to the fast gateway app, which does not
cross Django's middleware stack (nor do /healthz and /readyz); everything else (UI, REST API) goes to Django.

In front of both, uvicorn's ProxyHeadersMiddleware with settings.PORTAL_TRUSTED_PROXIES: the
client address (and scheme) come from X-Forwarded-For/-Proto only when the peer is a trusted proxy,
and then it is the right-most address that is not one. Doing it here, not with uvicorn's
`--forwarded-allow-ips`, makes the one setting hold however the app is served (uvicorn runs with
`--no-proxy-headers`)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

from django.core.asgi import get_asgi_application
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from portal.hot import hot

django_app = get_asgi_application()

from gateway.asgi import build_application  # noqa: E402
from portal.body_deadline import BodyDeadline  # noqa: E402


class TrustedProxies:
    """`app` behind the trusted-proxy rule; nothing is trusted when the list is empty. The list is
    read per request (a tuple compare), so a changed setting holds at once (tests switch it)."""

    def __init__(self, app) -> None:
        self.app = app
        self._for: tuple[str, ...] | None = None
        self._middleware = app

    async def __call__(self, scope, receive, send) -> None:
        trusted = tuple(hot.PORTAL_TRUSTED_PROXIES)
        if trusted != self._for:
            self._middleware = ProxyHeadersMiddleware(self.app, trusted_hosts=list(trusted) or [""])
            self._for = trusted
        await self._middleware(scope, receive, send)


application = TrustedProxies(BodyDeadline(build_application(django_app)))
