from django.urls import include, path

from . import views

urlpatterns = [
    path("keys/", views.MyKeyListView.as_view(), name="key_list"),
    path("keys/all/", views.AllKeyListView.as_view(), name="key_all"),
    path("keys/new/", views.KeyEditView.as_view(), name="key_create"),
    path("keys/<int:pk>/", views.KeyDetailView.as_view(), name="key_detail"),
    path("keys/<int:pk>/edit/", views.KeyEditView.as_view(), name="key_edit"),
    path("keys/<int:pk>/revoke/", views.KeyRevokeView.as_view(), name="key_revoke"),
    path("keys/<int:pk>/rotate/", views.KeyRotateView.as_view(), name="key_rotate"),
    path("", include("keys.budgets.urls")),
    path("", include("keys.usage.urls")),
    path("", include("keys.payloads.urls")),
    path("", include("keys.playground.urls")),
]
