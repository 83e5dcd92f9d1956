"""Web URLs of the hosts app: host pages and their GPU panel, the GPU-hours showback, then
deployments and launch jobs."""

from django.urls import include, path

from . import views
from .showback.views import ShowbackView

urlpatterns = [
    path("hosts/", views.HostListView.as_view(), name="host_list"),
    path("hosts/new/", views.HostEditView.as_view(), name="host_create"),
    path("hosts/<int:pk>/", views.HostDetailView.as_view(), name="host_detail"),
    path("hosts/<int:pk>/edit/", views.HostEditView.as_view(), name="host_edit"),
    path("hosts/<int:pk>/delete/", views.HostDeleteView.as_view(), name="host_delete"),
    path("hosts/<int:pk>/gpus/", views.host_gpus, name="host_gpus"),
    path("hosts/<int:pk>/refresh/", views.host_refresh, name="host_refresh"),
    path("hosts/<int:pk>/confirm-key/", views.host_confirm_key, name="host_confirm_key"),
    path("gpu-hours/", ShowbackView.as_view(), name="gpu_showback"),
    path("", include("hosts.deployments.urls")),
    path("", include("hosts.downloads.urls")),
]
