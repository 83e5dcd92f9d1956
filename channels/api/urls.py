"""The channels API router: channels and models, and the health sub-feature's viewsets."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from channels.health.api import views as health

from . import views

router = SimpleRouter()
router.register("channels", views.ChannelViewSet, basename="channel")
router.register("models", views.ModelViewSet, basename="model")
router.register("aliases", views.AliasViewSet, basename="alias")
router.register("prices", views.RoutePriceViewSet, basename="price")
router.register("health/channels", health.HealthChannelViewSet, basename="health-channel")
router.register("health/status-changes", health.StatusChangeViewSet, basename="health-status-change")
router.register("health/alert-targets", health.AlertTargetViewSet, basename="health-alert-target")

urlpatterns = [
    path("health/schedule/", health.ProbeScheduleView.as_view(), name="health-schedule"),
    *router.urls,
]
