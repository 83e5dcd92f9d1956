from django.urls import path

from . import views

urlpatterns = [
    path("hosts/", views.HostListView.as_view(), name="host_list"),
    path("hosts/new/", views.HostCreateView.as_view(), name="host_create"),
    path("hosts/<int:pk>/", views.HostDetailView.as_view(), name="host_detail"),
    path("hosts/<int:pk>/edit/", views.HostUpdateView.as_view(), name="host_edit"),
    path("hosts/<int:pk>/delete/", views.HostDeleteView.as_view(), name="host_delete"),
]
