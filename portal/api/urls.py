"""One API under /api/: each app (and each owner within an app) contributes a SimpleRouter."""

from django.urls import include, path

from .views import ApiRootView

urlpatterns = [
    path("", ApiRootView.as_view(), name="api-root"),
    path("", include("accounts.api.urls")),
    path("", include("hosts.api.urls")),
    path("", include("channels.api.urls")),
    path("", include("keys.api.urls")),
    path("", include("mcpservers.api.urls")),
    path("", include("clientconfigs.api.urls")),
]
