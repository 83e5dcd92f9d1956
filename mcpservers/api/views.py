"""REST API for MCP servers, their tools and grants (admins), and the MCP call records (admins)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.permissions import IsAdmin

from ..filters import McpCallFilterSet, McpGrantFilterSet, McpServerFilterSet, McpToolFilterSet
from ..models import McpCall, McpGrant, McpServer, McpTool
from ..services import check_server
from .serializers import McpCallSerializer, McpGrantSerializer, McpServerSerializer, McpToolSerializer


class McpServerViewSet(viewsets.ModelViewSet):
    queryset = McpServer.objects.prefetch_related("tools")
    serializer_class = McpServerSerializer
    permission_classes = [IsAdmin]
    filterset_class = McpServerFilterSet
    search_fields = ["name", "slug", "url"]
    ordering_fields = ["name", "slug", "status", "enabled", "last_checked", "created"]

    @extend_schema(request=None, responses={200: McpServerSerializer})
    @action(detail=True, methods=["post"])
    def check(self, request: Request, pk: str | None = None) -> Response:
        """Run the health check now: list the server's tools upstream and refresh them."""
        server = check_server(self.get_object().pk)
        return Response(self.get_serializer(server).data)


class McpToolViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin, viewsets.GenericViewSet
):
    """Tools come from the health check; admins enable or disable them (PATCH `enabled`)."""

    queryset = McpTool.objects.select_related("server")
    serializer_class = McpToolSerializer
    permission_classes = [IsAdmin]
    filterset_class = McpToolFilterSet
    ordering_fields = ["name", "enabled", "last_seen"]


class McpGrantViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """The allowlist: who (a key, a user or a team) may call which tool, or every tool, of a server."""

    queryset = McpGrant.objects.all()
    serializer_class = McpGrantSerializer
    permission_classes = [IsAdmin]
    filterset_class = McpGrantFilterSet
    ordering_fields = ["created"]


class McpCallViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Every tool call through the gateway, newest first."""

    queryset = McpCall.objects.all()
    serializer_class = McpCallSerializer
    permission_classes = [IsAdmin]
    filterset_class = McpCallFilterSet
    ordering_fields = ["created", "duration_ms"]
