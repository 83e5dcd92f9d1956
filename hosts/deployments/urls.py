"""Web URLs for deployments and launch jobs (admins only); included by hosts/urls.py."""

from django.urls import path

from . import views as v

urlpatterns = [
    path("deployments/", v.deployment_list, name="deployment_list"),
    path("hosts/<int:host_pk>/deployments/new/", v.deployment_create, name="deployment_create"),
    path("hosts/<int:host_pk>/deployments/fit/", v.deployment_fit_preview, name="deployment_fit_preview"),
    path("deployments/<int:pk>/", v.deployment_detail, name="deployment_detail"),
    path("deployments/<int:pk>/edit/", v.deployment_edit, name="deployment_edit"),
    path("deployments/<int:pk>/delete/", v.DeploymentDeleteView.as_view(), name="deployment_delete"),
    path("deployments/<int:pk>/fit/", v.deployment_fit, name="deployment_fit"),
    path("deployments/<int:pk>/nodes/<int:node_pk>/log/", v.deployment_node_log, name="deployment_node_log"),
    path("deployments/<int:pk>/forget/", v.DeploymentForgetView.as_view(), name="deployment_forget"),
    path("deployments/<int:pk>/<str:action>/", v.DeploymentActionView.as_view(), name="deployment_action"),
    path("jobs/<int:pk>/", v.job_detail, name="job_detail"),
    path("jobs/<int:pk>/progress/", v.job_progress, name="job_progress"),
]
