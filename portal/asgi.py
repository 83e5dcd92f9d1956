"""ASGI entry point: `/v1` and the other gateway paths go to the fast gateway app, which does not
cross Django's middleware stack; everything else (UI, REST API, /healthz) goes to Django."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

from django.core.asgi import get_asgi_application

django_app = get_asgi_application()

from gateway.asgi import build_application  # noqa: E402

application = build_application(django_app)
