from django.urls import path
from rest_framework.routers import SimpleRouter

from .health import AlertTargetViewSet, HealthChannelViewSet, ProbeScheduleView, StatusChangeViewSet

router = SimpleRouter()
router.register("health/channels", HealthChannelViewSet, basename="health-channel")
router.register("health/status-changes", StatusChangeViewSet, basename="health-status-change")
router.register("health/alert-targets", AlertTargetViewSet, basename="health-alert-target")

urlpatterns = [
    path("health/schedule/", ProbeScheduleView.as_view(), name="health-schedule"),
    *router.urls,
]
