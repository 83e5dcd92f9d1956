from django.urls import path

from . import views

urlpatterns = [
    path("usage/", views.MyUsageView.as_view(), name="usage"),
    path("usage/all/", views.AdminUsageView.as_view(), name="usage_admin"),
    path("usage/requests/", views.RequestListView.as_view(), name="usage_requests"),
    path("usage/requests/<int:pk>/", views.RequestDetailView.as_view(), name="usage_request_detail"),
]
