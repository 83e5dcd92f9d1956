"""The OpenAPI schema view: drf-spectacular's, with its extensions loaded once, under a lock.

drf-spectacular resolves each extension's target class lazily, on the first schema a process
builds, without a lock: two first requests at once (Swagger and ReDoc opened together after a
restart) raced in `_load_class` (one set `target_class` to None while the other read it) and one
of them answered 500."""

from __future__ import annotations

import threading

from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response

_lock = threading.Lock()
_loaded = False


def load_extensions() -> None:
    """Import drf-spectacular's extensions and resolve every target class (idempotent)."""
    global _loaded
    with _lock:
        if _loaded:
            return
        import drf_spectacular.openapi  # noqa: F401 - registers the contrib extensions
        from drf_spectacular import extensions

        for base in (
            extensions.OpenApiAuthenticationExtension,
            extensions.OpenApiSerializerExtension,
            extensions.OpenApiSerializerFieldExtension,
            extensions.OpenApiViewExtension,
            extensions.OpenApiFilterExtension,
        ):
            for extension in base._registry:
                if isinstance(extension.target_class, str):
                    extension._load_class()
        _loaded = True


class SchemaView(SpectacularAPIView):
    def _get_schema_response(self, request: Request) -> Response:
        if not _loaded:
            load_extensions()
        return super()._get_schema_response(request)
