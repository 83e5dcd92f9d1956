from django.urls import path

from . import views

urlpatterns = [
    path("usage/", views.MyUsageView.as_view(), name="usage"),
    path("usage/all/", views.AdminUsageView.as_view(), name="usage_admin"),
]
