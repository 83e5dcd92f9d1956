from django.urls import path

from . import views

urlpatterns = [
    path("channels/health/", views.HealthOverviewView.as_view(), name="channel-health-overview"),
    path("channels/health/schedule/", views.HealthScheduleView.as_view(), name="channel-health-schedule"),
    path("channels/health/alerts/", views.AlertTargetsView.as_view(), name="channel-alert-targets"),
    path(
        "channels/health/alerts/<int:pk>/delete/",
        views.AlertTargetDeleteView.as_view(),
        name="channel-alert-target-delete",
    ),
    path(
        "channels/health/alerts/<int:pk>/test/", views.AlertTargetTestView.as_view(), name="channel-alert-target-test"
    ),
    path("channels/<int:pk>/health/", views.ChannelHealthView.as_view(), name="channel-health"),
    path("channels/<int:pk>/health/series.json", views.ChannelHealthSeriesView.as_view(), name="channel-health-series"),
    path("channels/<int:pk>/health/check/", views.ChannelHealthCheckView.as_view(), name="channel-health-check"),
]
