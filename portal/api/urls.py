"""One API under /api/: each app (and each owner within an app) contributes a SimpleRouter."""

from django.urls import include, path

urlpatterns = [
    path("", include("portal.api.app_urls")),
    path("", include("hosts.api.urls")),
    path("", include("hosts.api.deploy_urls")),
    path("", include("channels.api.urls")),
    path("", include("keys.api.urls")),
    path("", include("clientconfigs.api.urls")),
]
