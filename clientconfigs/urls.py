from django.urls import path

from . import views

app_name = "clientconfigs"

urlpatterns = [
    path("connect/", views.connect, name="connect"),
    path("connect/install.sh", views.install_sh, name="install-sh"),
    path("connect/install.ps1", views.install_ps1, name="install-ps1"),
    path("connect/<str:client>/files/<int:index>/", views.download, name="download"),
]
