"""REST API for channels (admins) and models (developers read the ones they may use)."""

from __future__ import annotations

from django.db.models import Prefetch
from rest_framework import viewsets

from channels.filters import ChannelFilterSet, ModelFilterSet
from channels.models import AliasTarget, Channel, Model, ModelRoute
from portal.permissions import IsAdmin, IsAdminOrReadOnly

from .serializers import AliasSerializer, ChannelSerializer, PublicModelSerializer


class ChannelViewSet(viewsets.ModelViewSet):
    queryset = Channel.objects.prefetch_related("models")
    serializer_class = ChannelSerializer
    permission_classes = [IsAdmin]
    filterset_class = ChannelFilterSet
    search_fields = ["name", "base_url", "notes"]
    ordering_fields = ["name", "kind", "priority", "weight", "status", "enabled", "last_checked", "created"]


class ModelViewSet(viewsets.ModelViewSet):
    """Public models. Developers list and read only the models they may use; admins manage all."""

    serializer_class = PublicModelSerializer
    permission_classes = [IsAdminOrReadOnly]
    filterset_class = ModelFilterSet
    search_fields = ["name", "display_name", "description"]
    ordering_fields = ["name", "display_name", "enabled", "created"]

    def get_queryset(self):
        routes = Prefetch("routes", queryset=ModelRoute.objects.select_related("channel"))
        if getattr(self, "swagger_fake_view", False):
            return Model.objects.none()
        return Model.objects.served().visible_to(self.request.user).prefetch_related(routes).order_by("name")


class AliasViewSet(viewsets.ModelViewSet):
    """Aliases (virtual models). Developers list and read the ones they may use; admins manage all."""

    serializer_class = AliasSerializer
    permission_classes = [IsAdminOrReadOnly]
    filterset_class = ModelFilterSet
    search_fields = ["name", "display_name", "description"]
    ordering_fields = ["name", "display_name", "enabled", "created"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Model.objects.none()
        targets = Prefetch("targets", queryset=AliasTarget.objects.select_related("target").order_by("position"))
        return Model.objects.aliases().visible_to(self.request.user).prefetch_related(targets).order_by("name")
