"""REST API for deployments, launch jobs and the fit estimate (admins only).

/api/deployments/                       list, create
/api/deployments/{id}/                  read, update, delete (when stopped)
/api/deployments/{id}/{launch,stop,restart,adopt}/   POST → the queued job (409 if one is active)
/api/deployments/{id}/forget/           POST → failed without SSH, out of supervision and routing, so it
                                        and its host can be deleted; 409 unless SSH to the host fails
/api/deployments/{id}/fit/              POST → estimate, reading the model's files over SSH
/api/jobs/ and /api/jobs/{id}/          read, with the remote log tail
/api/fit-estimate/                      POST a spec → estimate (nothing is stored)

The host actions (/api/hosts/{id}/refresh-inventory/, /confirm-host-key/) are on the host
resource, hosts/api/views.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext_noop
from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from hosts.api.serializers import DetailSerializer
from hosts.choices import JobAction
from hosts.deployments import jobs
from hosts.models import Deployment, LaunchJob
from hosts.remote import ssh
from portal.i18n import Message
from portal.permissions import IsAdmin

from .. import services
from ..filters import DeploymentFilterSet, LaunchJobFilterSet
from .serializers import DeploymentSerializer, FitSpecSerializer, LaunchJobSerializer, field_errors

if TYPE_CHECKING:
    from rest_framework.serializers import BaseSerializer

    from portal.permissions import AuthenticatedRequest


class DeploymentViewSet(viewsets.ModelViewSet[Deployment]):
    queryset = Deployment.objects.select_related("host", "channel")
    serializer_class = DeploymentSerializer
    permission_classes = [IsAdmin]
    filterset_class = DeploymentFilterSet
    search_fields = ["name", "model_path", "served_model_name"]
    ordering_fields = ["name", "port", "status", "created"]

    def perform_update(self, serializer: BaseSerializer[Deployment]) -> None:
        try:
            services.check_changeable(self.get_object())
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        serializer.save()

    def perform_destroy(self, instance: Deployment) -> None:
        try:
            services.delete_deployment(instance)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None

    def _job(self, request: AuthenticatedRequest, pk: str | None, action_name: str) -> Response:
        deployment = self.get_object()
        try:
            job = jobs.request_job(deployment, action_name, user=request.user)
        except jobs.JobConflict as exc:
            return Response({"detail": str(exc.text)}, status=status.HTTP_409_CONFLICT)
        return Response(LaunchJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: LaunchJobSerializer})
    @action(detail=True, methods=["post"])
    def launch(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        return self._job(request, pk, JobAction.LAUNCH)

    @extend_schema(request=None, responses={202: LaunchJobSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        return self._job(request, pk, JobAction.STOP)

    @extend_schema(request=None, responses={202: LaunchJobSerializer})
    @action(detail=True, methods=["post"])
    def restart(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        return self._job(request, pk, JobAction.RESTART)

    @extend_schema(request=None, responses={202: LaunchJobSerializer})
    @action(detail=True, methods=["post"])
    def adopt(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        return self._job(request, pk, JobAction.ADOPT)

    @extend_schema(request=None, responses={200: DeploymentSerializer, 409: DetailSerializer})
    @action(detail=True, methods=["post"])
    def forget(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """Let go of a server whose host no longer answers over SSH, without stopping it (it may still
        be running there and using its GPUs): the deployment becomes failed, leaves supervision, and its
        channel is disabled (out of routing); it and its host can then be deleted. 409 when it has no
        server up, a job is running, or SSH to the host works (stop it instead)."""
        deployment = self.get_object()
        try:
            services.forget_deployment(deployment, user=request.user)
        except DjangoValidationError as exc:
            return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_409_CONFLICT)
        return Response(self.get_serializer(deployment).data)

    @extend_schema(request=None, responses={200: dict})
    @action(detail=True, methods=["post"])
    def fit(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """Estimate VRAM, reading config.json / GGUF metadata on the host (presets when unreachable)."""
        deployment = self.get_object()
        try:
            with ssh.connect(deployment.host) as remote:
                result = services.check_fit(deployment, remote)
        except ssh.SSHError as exc:
            result = services.check_fit(deployment)
            services.add_fit_note(result, Message(gettext_noop("Host not read: %(error)s"), error=exc.text))
        return Response(result)


class LaunchJobViewSet(viewsets.ReadOnlyModelViewSet[LaunchJob]):
    queryset = LaunchJob.objects.select_related("deployment")
    serializer_class = LaunchJobSerializer
    permission_classes = [IsAdmin]
    filterset_class = LaunchJobFilterSet
    ordering_fields = ["created", "state"]


class FitEstimateViewSet(viewsets.GenericViewSet[Any]):
    permission_classes = [IsAdmin]
    serializer_class = FitSpecSerializer

    @extend_schema(request=FitSpecSerializer, responses={200: dict})
    def create(self, request: AuthenticatedRequest) -> Response:
        """The estimate for a spec (nothing is stored): what the deploy form's live preview calls."""
        spec = FitSpecSerializer(data=request.data)
        spec.is_valid(raise_exception=True)
        data = spec.validated_data
        try:
            estimate = services.estimate_for_spec(
                backend=data["backend"],
                options=data.get("options") or {},
                model=data.get("model") or "",
                config=data.get("config_json"),
                architecture=data.get("architecture"),
                host=data.get("host"),
                gpu_indices=data.get("gpu_indices"),
                gpus=data.get("gpus"),
                ram_mib=data.get("ram_mib"),
                read_from_host=data.get("read_from_host", False),
            )
        except DjangoValidationError as exc:
            raise field_errors(exc) from None
        return Response(estimate)
