"""Web URLs of weight downloads (admins only); included by hosts/urls.py."""

from django.urls import path

from . import views as v

urlpatterns = [
    path("hosts/<int:host_pk>/downloads/new/", v.download_create, name="download_create"),
    path("hosts/<int:host_pk>/models/", v.models_on_disk, name="host_models"),
    path("hosts/<int:host_pk>/models/<str:name>/delete/", v.model_delete, name="host_model_delete"),
    path("downloads/", v.download_list, name="download_list"),
    path("downloads/<int:pk>/", v.download_detail, name="download_detail"),
    path("downloads/<int:pk>/progress/", v.download_progress, name="download_progress"),
    path("downloads/<int:pk>/cancel/", v.download_cancel, name="download_cancel"),
    path("downloads/<int:pk>/forget-token/", v.download_forget_token, name="download_forget_token"),
]
