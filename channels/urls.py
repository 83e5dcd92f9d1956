from django.urls import include, path

from . import views

urlpatterns = [
    path("channels/", views.ChannelListView.as_view(), name="channel_list"),
    path("channels/base-url-preview/", views.BaseURLPreviewView.as_view(), name="channel_base_url_preview"),
    path("channels/new/", views.ChannelEditView.as_view(), name="channel_create"),
    path("channels/<int:pk>/", views.ChannelDetailView.as_view(), name="channel_detail"),
    path("channels/<int:pk>/edit/", views.ChannelEditView.as_view(), name="channel_edit"),
    path("channels/<int:pk>/models/", views.ChannelServedModelsView.as_view(), name="channel_served_models"),
    path("channels/<int:pk>/delete/", views.ChannelDeleteView.as_view(), name="channel_delete"),
    path("models/", views.ModelListView.as_view(), name="model_list"),
    path("models/new/", views.ModelEditView.as_view(), name="model_create"),
    path("models/<int:pk>/", views.ModelDetailView.as_view(), name="model_detail"),
    path("models/<int:pk>/edit/", views.ModelEditView.as_view(), name="model_edit"),
    path("models/<int:pk>/delete/", views.ModelDeleteView.as_view(), name="model_delete"),
    path("models/prices/", views.PriceListView.as_view(), name="price_list"),
    path("models/aliases/", views.AliasListView.as_view(), name="model_alias_list"),
    path("models/aliases/new/", views.AliasEditView.as_view(), name="model_alias_create"),
    path("models/aliases/<int:pk>/", views.AliasDetailView.as_view(), name="model_alias_detail"),
    path("models/aliases/<int:pk>/edit/", views.AliasEditView.as_view(), name="model_alias_edit"),
    path("models/aliases/<int:pk>/delete/", views.AliasDeleteView.as_view(), name="model_alias_delete"),
    path("", include("channels.health.urls")),
]
