from django.urls import path

from . import views

urlpatterns = [
    path("connect/", views.connect, name="connect"),
    path("connect/install.sh", views.install_sh, name="connect_install_sh"),
    path("connect/install.ps1", views.install_ps1, name="connect_install_ps1"),
    path("connect/<str:client>/files/<int:index>/", views.download, name="connect_download"),
]
