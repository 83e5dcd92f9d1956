from django.urls import path

from . import usage_views

urlpatterns = [
    path("usage/", usage_views.MyUsageView.as_view(), name="usage"),
    path("usage/all/", usage_views.AdminUsageView.as_view(), name="usage_admin"),
]
