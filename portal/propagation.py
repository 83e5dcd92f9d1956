"""Say so when a change could not be confirmed on every gateway replica at once.

A saved key, user, model, route or channel reaches other gateway processes through a Redis
generation bump (`gateway.signals`). When Redis does not take it, the change still lands: the bump
is retried in the background and replicas drop cached entries after `GATEWAY_KEY_TTL` /
`GATEWAY_CACHE_TTL` anyway. But an admin who revokes a leaked key must not be told "done" as if it
were instant. The gateway app reports the miss here (`unconfirmed()`); this middleware, for the
request that made the change, adds `X-Portal-Propagation: unconfirmed` to the response, a
`propagation` object to a REST API JSON answer, and a warning message to the page.

Ground floor: the gateway app calls in, portal imports no app.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.contrib import messages

_pending: ContextVar[set[str] | None] = ContextVar("portal_propagation", default=None)

HEADER = "X-Portal-Propagation"


def unconfirmed(what: str) -> None:
    """The change to `what` ("keys", "routes") was not confirmed by Redis; no-op outside a request."""
    pending = _pending.get()
    if pending is not None:
        pending.add(what)


def explanation(pending: set[str]) -> str:
    seconds = max(
        float(settings.GATEWAY_KEY_TTL) if "keys" in pending else 0.0,
        float(settings.GATEWAY_CACHE_TTL) if "routes" in pending else 0.0,
    )
    return (
        "Saved, but the gateway replicas could not be told at once (Redis did not answer). "
        f"The portal keeps retrying, and every replica picks the change up within {seconds:g} s anyway."
    )


class PropagationMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        pending: set[str] = set()
        token = _pending.set(pending)
        try:
            response = self.get_response(request)
        finally:
            _pending.reset(token)
        if pending:
            response[HEADER] = "unconfirmed"
            if not request.path.startswith("/api/"):
                messages.warning(request, explanation(pending))
        return response

    def process_template_response(self, request, response):
        # DRF responses are rendered after this hook: the answer's own data can still say so.
        pending = _pending.get()
        data: Any = getattr(response, "data", None)
        if pending and isinstance(data, dict):
            data["propagation"] = {"confirmed": False, "detail": explanation(pending)}
        return response
