"""Web URLs for deployments, launch jobs and host actions (admins only)."""

from django.urls import path

from . import deploy_views as v

urlpatterns = [
    path("deployments/", v.deployment_list, name="deployment_list"),
    path("hosts/<int:host_pk>/deployments/new/", v.deployment_create, name="deployment_create"),
    path("deployments/<int:pk>/", v.deployment_detail, name="deployment_detail"),
    path("deployments/<int:pk>/edit/", v.deployment_edit, name="deployment_edit"),
    path("deployments/<int:pk>/delete/", v.deployment_delete, name="deployment_delete"),
    path("deployments/<int:pk>/fit/", v.deployment_fit, name="deployment_fit"),
    path("deployments/<int:pk>/<str:action>/", v.deployment_action, name="deployment_action"),
    path("jobs/<int:pk>/", v.job_detail, name="job_detail"),
    path("jobs/<int:pk>/progress/", v.job_progress, name="job_progress"),
    path("hosts/<int:pk>/gpus/", v.host_gpus, name="host_gpus"),
    path("hosts/<int:pk>/refresh/", v.host_refresh, name="host_refresh"),
    path("hosts/<int:pk>/confirm-key/", v.host_confirm_key, name="host_confirm_key"),
]
