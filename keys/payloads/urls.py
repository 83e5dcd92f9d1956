from django.urls import path

from . import views

urlpatterns = [
    path("usage/request-logs/", views.RequestLogListView.as_view(), name="request_log_list"),
    path("usage/request-logs/<int:pk>/", views.RequestLogDetailView.as_view(), name="request_log_detail"),
    path(
        "usage/request-logs/logging/<int:pk>/delete/",
        views.PayloadLoggingDeleteView.as_view(),
        name="payload_logging_delete",
    ),
]
