"""REST API for GPU hosts (admins only).

/api/hosts/ and /api/hosts/{id}/        list, create, read, update, delete (409 while used or downloading)
/api/hosts/{id}/refresh-inventory/      POST → queued ("Refresh now")
/api/hosts/{id}/confirm-host-key/       POST {"fingerprint": …} → pins the key seen last
/api/hosts/{id}/models/                 GET the model folders on its disk, over SSH (`_not_reached`)
/api/hosts/{id}/models/{name}/          DELETE one (409 while a download writes into it or a deployment serves from it)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from hosts import services, tasks
from hosts.choices import HostStatus
from hosts.downloads import services as downloads
from hosts.filters import HostFilterSet
from hosts.models import Host
from hosts.remote import ssh
from portal.permissions import IsAdmin

from .serializers import (
    ConfirmHostKeySerializer,
    DetailSerializer,
    HostKeyConfirmedSerializer,
    HostSerializer,
    ModelOnDiskSerializer,
)

if TYPE_CHECKING:
    from portal.permissions import AuthenticatedRequest


class HostViewSet(viewsets.ModelViewSet[Host]):
    queryset = Host.objects.prefetch_related("gpus")
    serializer_class = HostSerializer
    permission_classes = [IsAdmin]
    filterset_class = HostFilterSet
    search_fields = ["name", "address", "username", "notes"]
    ordering_fields = ["name", "address", "status", "last_checked", "created"]

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """409 while a download to the host runs (or deployments use it: ProtectedError)."""
        try:
            services.delete_host(self.get_object())
        except DjangoValidationError as exc:
            return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={202: DetailSerializer})
    @action(detail=True, methods=["post"], url_path="refresh-inventory")
    def refresh_inventory(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        host = self.get_object()
        tasks.refresh_inventory.delay(host.pk)
        return Response(
            {"detail": _("Inventory refresh of %(host)s queued.") % {"host": host}}, status=status.HTTP_202_ACCEPTED
        )

    @extend_schema(request=ConfirmHostKeySerializer, responses={200: HostKeyConfirmedSerializer})
    @action(detail=True, methods=["post"], url_path="confirm-host-key")
    def confirm_host_key(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        host = self.get_object()
        body = ConfirmHostKeySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        fingerprint = body.validated_data["fingerprint"].strip()
        try:
            services.confirm_host_key(host, fingerprint)
        except DjangoValidationError as exc:
            raise ValidationError({"fingerprint": exc.messages}) from None
        return Response({"host_key_fingerprint": host.host_key_fingerprint, "status": host.status})

    @extend_schema(
        request=None, responses={200: ModelOnDiskSerializer(many=True), 409: DetailSerializer, 502: DetailSerializer}
    )
    @action(detail=True, methods=["get"], url_path="models", pagination_class=None, filterset_class=None)
    def models(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """The model folders in the host's download folder, as the host page's "Models on disk" lists them."""
        host = self.get_object()
        try:
            rows = downloads.models_on_disk(host)
        except ssh.SSHError as exc:
            return _not_reached(exc)
        return Response(ModelOnDiskSerializer(rows, many=True).data)

    @extend_schema(
        request=None, responses={204: None, 400: DetailSerializer, 409: DetailSerializer, 502: DetailSerializer}
    )
    @action(detail=True, methods=["delete"], url_path=r"models/(?P<name>[^/]+)")
    def delete_model(self, request: AuthenticatedRequest, pk: str | None = None, name: str = "") -> Response:
        """Delete one model folder from the host's disk, as its page's Delete does."""
        host = self.get_object()
        try:
            downloads.delete_model(host, name, user=request.user)
        except DjangoValidationError as exc:
            return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_400_BAD_REQUEST)
        except downloads.DownloadConflict as exc:
            return Response({"detail": exc.message}, status=status.HTTP_409_CONFLICT)
        except ssh.SSHError as exc:
            return _not_reached(exc)
        except downloads.DownloadFailed as exc:
            return Response({"detail": exc.message}, status=status.HTTP_502_BAD_GATEWAY)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _not_reached(exc: ssh.SSHError) -> Response:
    """What a host not reached over SSH answers: 409 when its record must change first (no key
    stored, a refused login, a host key to confirm or that changed: `exc.status`), 502 when it did
    not answer (down, refused, timed out). The detail says which and what to do."""
    code = status.HTTP_502_BAD_GATEWAY if exc.status == HostStatus.UNREACHABLE else status.HTTP_409_CONFLICT
    return Response({"detail": exc.message}, status=code)
