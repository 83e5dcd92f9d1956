"""One API under /api/: each app contributes a SimpleRouter in `<app>/api/urls.py`."""

from django.urls import include, path

urlpatterns = [
    path("", include("portal.api.app_urls")),
    path("", include("hosts.api.urls")),
    path("", include("channels.api.urls")),
    path("", include("keys.api.urls")),
    path("", include("clientconfigs.api.urls")),
]
