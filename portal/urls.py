from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from . import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("api/", include("portal.api.urls")),
    path("", views.dashboard, name="dashboard"),
    path("", include("accounts.urls")),
    path("", include("hosts.urls")),
    path("", include("channels.urls")),
    path("", include("keys.urls")),
    path("", include("clientconfigs.urls")),
]
