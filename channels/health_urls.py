from django.urls import path

from . import health_views as views

urlpatterns = [
    path("channels/health/", views.health_overview, name="channel-health-overview"),
    path("channels/health/schedule/", views.health_schedule, name="channel-health-schedule"),
    path("channels/health/alerts/", views.alert_targets, name="channel-alert-targets"),
    path("channels/health/alerts/<int:pk>/delete/", views.alert_target_delete, name="channel-alert-target-delete"),
    path("channels/health/alerts/<int:pk>/test/", views.alert_target_test, name="channel-alert-target-test"),
    path("channels/<int:pk>/health/", views.channel_health, name="channel-health"),
    path("channels/<int:pk>/health/series.json", views.channel_health_series, name="channel-health-series"),
    path("channels/<int:pk>/health/check/", views.channel_health_check, name="channel-health-check"),
]
