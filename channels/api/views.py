"""REST API for channels (admins) and models (developers read the ones they may use)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from channels.filters import ChannelFilterSet, ModelFilterSet
from channels.models import AliasTarget, Channel, Model, ModelRoute, RoutePrice
from channels.services import delete_model, load_price_catalogue, priced_route_names
from portal import i18n
from portal.permissions import IsAdmin, IsAdminOrReadOnly

from .serializers import AliasSerializer, ChannelSerializer, PublicModelSerializer, RoutePriceSerializer


class ChannelViewSet(viewsets.ModelViewSet):
    queryset = Channel.objects.prefetch_related("models")
    serializer_class = ChannelSerializer
    permission_classes = [IsAdmin]
    filterset_class = ChannelFilterSet
    search_fields = ["name", "base_url", "notes"]
    ordering_fields = ["name", "kind", "priority", "weight", "status", "enabled", "last_checked", "created"]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "remove_priced_routes",
                bool,
                description="Confirms that the channel's routes with prices go, and their price history with them.",
            )
        ]
    )
    def destroy(self, request: Request, *args, **kwargs) -> Response:
        """The channel's routes go with it; a route with prices takes its price history along, so
        that is refused (409 naming the routes) unless `remove_priced_routes=true` confirms it, as
        the models API refuses to drop such a route and the web UI's confirmation says it."""
        channel = self.get_object()
        confirmed = request.query_params.get("remove_priced_routes", "").lower() in ("true", "1")
        priced = priced_route_names(channel.routes.all())
        if priced and not confirmed:
            message = _(
                "The routes %(routes)s have prices: deleting the channel deletes their prices and price "
                "history. Send remove_priced_routes=true to confirm."
            )
            return Response({"detail": message % {"routes": i18n.listing(priced)}}, status=status.HTTP_409_CONFLICT)
        return super().destroy(request, *args, **kwargs)


class DeleteModelMixin:
    """DELETE through `delete_model`: 409 naming who still needs the model (an allow-list left
    empty would allow every model; an alias left without targets would serve none)."""

    def destroy(self, request: Request, *args, **kwargs) -> Response:
        try:
            delete_model(self.get_object())  # type: ignore[attr-defined]
        except ValidationError as exc:
            return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ModelViewSet(DeleteModelMixin, viewsets.ModelViewSet):
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


class AliasViewSet(DeleteModelMixin, viewsets.ModelViewSet):
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


class RoutePriceViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Prices per route (admins). A change is a new row from its `effective_from`; rows are never
    edited or deleted, so the list is the price history."""

    serializer_class = RoutePriceSerializer
    permission_classes = [IsAdmin]
    queryset = RoutePrice.objects.select_related("route__model", "route__channel").order_by("-effective_from", "-id")
    filterset_fields = ["route", "source"]
    ordering_fields = ["effective_from", "created"]

    @extend_schema(request=None, responses={200: RoutePriceSerializer(many=True)})
    @action(detail=False, methods=["post"], url_path="load-catalogue", pagination_class=None)
    def load_catalogue(self, request: Request) -> Response:
        """Price the external routes the starter catalogue knows and that have no price yet."""
        added = load_price_catalogue()
        return Response(RoutePriceSerializer(added, many=True, context=self.get_serializer_context()).data)
