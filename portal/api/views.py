"""`GET /api/`: where a script starts. The schema, the docs pages and every collection's path, so
that `/api/` answers instead of 404 and a script need not guess the names."""

from __future__ import annotations

from functools import cache

from django.urls import URLPattern, URLResolver, reverse
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

SINGLETONS = {"me", "health-schedule"}  # one object, no list: the caller's account, the probe schedule


@cache
def endpoints() -> dict[str, str]:
    """Every router's list route (and the singletons) under /api/, by its path without the prefix:
    {"channels": "/api/channels/"}."""
    from . import urls

    found: dict[str, str] = {}
    for included in urls.urlpatterns:
        for p in included.url_patterns if isinstance(included, URLResolver) else [included]:
            if isinstance(p, URLPattern) and p.name and (p.name.endswith("-list") or p.name in SINGLETONS):
                path = reverse(p.name)
                found[path.removeprefix("/api/").strip("/")] = path
    return dict(sorted(found.items()))


class ApiRootView(APIView):
    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        return Response(
            {
                "schema": reverse("api-schema"),
                "docs": reverse("api-docs"),
                "redoc": reverse("api-redoc"),
                "authentication": "Authorization: Token <personal API token>",
                "endpoints": endpoints(),
            }
        )
