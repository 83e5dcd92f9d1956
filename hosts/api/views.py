"""REST API for GPU hosts (admins only)."""

from __future__ import annotations

from rest_framework import viewsets

from hosts.filters import HostFilterSet
from hosts.models import Host
from portal.api.permissions import IsAdmin

from .serializers import HostSerializer


class HostViewSet(viewsets.ModelViewSet):
    queryset = Host.objects.prefetch_related("gpus")
    serializer_class = HostSerializer
    permission_classes = [IsAdmin]
    filterset_class = HostFilterSet
    search_fields = ["name", "address", "username", "notes"]
    ordering_fields = ["name", "address", "status", "last_checked", "created"]
