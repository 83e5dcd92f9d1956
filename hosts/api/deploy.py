"""REST API for deployments, launch jobs, the fit estimate and host actions (admins only).

/api/deployments/                       list, create
/api/deployments/{id}/                  read, update, delete (when stopped)
/api/deployments/{id}/{launch,stop,restart,adopt}/   POST → the queued job (409 if one is active)
/api/deployments/{id}/fit/              POST → estimate, reading the model's files over SSH
/api/jobs/ and /api/jobs/{id}/          read, with the remote log tail
/api/fit-estimate/                      POST a spec → estimate (nothing is stored)
/api/hosts/{id}/refresh-inventory/      POST → queued ("Refresh now")
/api/hosts/{id}/confirm-host-key/       POST {"fingerprint": …} → pins the key seen last
"""

from __future__ import annotations

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from hosts import fit, services, ssh
from hosts.choices import Backend, DeploymentStatus, JobAction, JobState
from hosts.models import Deployment, Host, LaunchJob
from portal.api.permissions import IsAdmin


def _field_errors(exc: DjangoValidationError) -> ValidationError:
    if hasattr(exc, "error_dict"):
        return ValidationError(exc.message_dict)
    return ValidationError({"non_field_errors": exc.messages})


class LaunchJobSerializer(serializers.ModelSerializer):
    deployment_name = serializers.CharField(source="deployment.name", read_only=True)

    class Meta:
        model = LaunchJob
        fields = [
            "id",
            "deployment",
            "deployment_name",
            "action",
            "state",
            "message",
            "transitions",
            "command",
            "pid",
            "exit_code",
            "log_tail",
            "heartbeat",
            "finished",
            "created",
        ]
        read_only_fields = fields


class DeploymentSerializer(serializers.ModelSerializer):
    """A model served on a host. The upstream API key is generated and never returned."""

    host = serializers.PrimaryKeyRelatedField(queryset=Host.objects.all())
    gpu_indices = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=255), max_length=64)
    options = serializers.DictField(required=False, help_text="Typed backend options; see the backend.")
    extra_args = serializers.ListField(
        child=serializers.CharField(max_length=200, trim_whitespace=False), required=False, max_length=40
    )
    command_preview = serializers.SerializerMethodField()

    class Meta:
        model = Deployment
        fields = [
            "id",
            "name",
            "host",
            "backend",
            "model_path",
            "served_model_name",
            "gpu_indices",
            "port",
            "options",
            "extra_args",
            "fit_override",
            "status",
            "status_message",
            "pid",
            "context_window",
            "channel",
            "last_fit",
            "command_preview",
            "created",
            "updated",
        ]
        read_only_fields = [
            "status",
            "status_message",
            "pid",
            "context_window",
            "channel",
            "last_fit",
            "created",
            "updated",
        ]
        validators: list = []  # host+port clashes are reported on `port` by services.clean_deployment

    def get_command_preview(self, obj: Deployment) -> str:
        return services.command_preview(obj)

    def validate(self, attrs):
        instance = self.instance
        merged = {
            f: attrs.get(f, getattr(instance, f) if instance else None)
            for f in (
                "host",
                "backend",
                "model_path",
                "served_model_name",
                "gpu_indices",
                "port",
                "options",
                "extra_args",
            )
        }
        try:
            cleaned = services.clean_deployment(
                host=merged["host"],
                backend=merged["backend"],
                model_path=merged["model_path"] or "",
                served_model_name=merged["served_model_name"] or "",
                gpu_indices=merged["gpu_indices"] if merged["gpu_indices"] is not None else [],
                port=merged["port"],
                options=merged["options"] or {},
                extra_args=merged["extra_args"] or [],
                instance=instance,
            )
        except DjangoValidationError as exc:
            raise _field_errors(exc) from None
        attrs.update(cleaned)
        return attrs

    def create(self, validated_data):
        validated_data["upstream_api_key"] = services.generate_upstream_key()
        validated_data["created_by"] = self.context["request"].user
        return super().create(validated_data)


class DeploymentFilterSet(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=DeploymentStatus.choices)
    backend = django_filters.ChoiceFilter(choices=Backend.choices)

    class Meta:
        model = Deployment
        fields = ["host", "status", "backend"]


class DeploymentViewSet(viewsets.ModelViewSet):
    queryset = Deployment.objects.select_related("host", "channel")
    serializer_class = DeploymentSerializer
    permission_classes = [IsAdmin]
    filterset_class = DeploymentFilterSet
    search_fields = ["name", "model_path", "served_model_name"]
    ordering_fields = ["name", "port", "status", "created"]

    def perform_update(self, serializer) -> None:
        if serializer.instance.status not in (DeploymentStatus.STOPPED, DeploymentStatus.FAILED):
            raise ValidationError({"status": ["Stop the deployment before changing it."]})
        serializer.save()

    def perform_destroy(self, instance: Deployment) -> None:
        if instance.status not in (DeploymentStatus.STOPPED, DeploymentStatus.FAILED):
            raise ValidationError({"status": ["Stop the deployment before deleting it."]})
        instance.delete()

    def _job(self, request, pk, action_name: str) -> Response:
        deployment = self.get_object()
        try:
            job = services.request_job(deployment, action_name, user=request.user)
        except services.JobConflict as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(LaunchJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: LaunchJobSerializer})
    @action(detail=True, methods=["post"])
    def launch(self, request, pk=None):
        return self._job(request, pk, JobAction.LAUNCH)

    @extend_schema(request=None, responses={202: LaunchJobSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        return self._job(request, pk, JobAction.STOP)

    @extend_schema(request=None, responses={202: LaunchJobSerializer})
    @action(detail=True, methods=["post"])
    def restart(self, request, pk=None):
        return self._job(request, pk, JobAction.RESTART)

    @extend_schema(request=None, responses={202: LaunchJobSerializer})
    @action(detail=True, methods=["post"])
    def adopt(self, request, pk=None):
        return self._job(request, pk, JobAction.ADOPT)

    @extend_schema(request=None, responses={200: dict})
    @action(detail=True, methods=["post"])
    def fit(self, request, pk=None):
        """Estimate VRAM, reading config.json / GGUF metadata on the host (presets when unreachable)."""
        deployment = self.get_object()
        try:
            with ssh.connect(deployment.host) as remote:
                result = services.check_fit(deployment, remote)
        except ssh.SSHError as exc:
            result = services.check_fit(deployment)
            result.setdefault("notes", []).append(f"Host not read: {exc.message}")
        return Response(result)


class LaunchJobFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)

    class Meta:
        model = LaunchJob
        fields = ["deployment", "state", "action"]


class LaunchJobViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = LaunchJob.objects.select_related("deployment")
    serializer_class = LaunchJobSerializer
    permission_classes = [IsAdmin]
    filterset_class = LaunchJobFilterSet
    ordering_fields = ["created", "state"]


class GPUSpecSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, default=0)
    total_mib = serializers.IntegerField(min_value=1, max_value=10_000_000)
    free_mib = serializers.IntegerField(min_value=0, max_value=10_000_000)


class ArchitectureSerializer(serializers.Serializer):
    params_b = serializers.FloatField(min_value=0.001, max_value=10_000)
    layers = serializers.IntegerField(min_value=1, max_value=1000)
    heads = serializers.IntegerField(min_value=1, max_value=1024)
    kv_heads = serializers.IntegerField(min_value=1, max_value=1024)
    head_dim = serializers.IntegerField(min_value=1, max_value=4096)
    vocab = serializers.IntegerField(min_value=1, max_value=10_000_000, default=32000)
    max_context = serializers.IntegerField(min_value=1, max_value=100_000_000, default=131072)


class FitSpecSerializer(serializers.Serializer):
    """Either `host` + `gpu_indices` (GPUs as last seen) or explicit `gpus`; the model by `model`
    name (presets) or an explicit `architecture`."""

    backend = serializers.ChoiceField(choices=Backend.choices)
    model = serializers.CharField(max_length=500, required=False, allow_blank=True)
    architecture = ArchitectureSerializer(required=False)
    options = serializers.DictField(required=False)
    host = serializers.PrimaryKeyRelatedField(queryset=Host.objects.all(), required=False)
    gpu_indices = serializers.ListField(child=serializers.IntegerField(min_value=0), required=False)
    gpus = GPUSpecSerializer(many=True, required=False)

    def validate(self, attrs):
        if not attrs.get("architecture") and not attrs.get("model"):
            raise ValidationError({"model": ["Give a model name (matched against presets) or an architecture."]})
        if not attrs.get("gpus") and not attrs.get("host"):
            raise ValidationError({"gpus": ["Give the GPUs, or a host and its GPU indices."]})
        return attrs


class FitEstimateViewSet(viewsets.GenericViewSet):
    permission_classes = [IsAdmin]
    serializer_class = FitSpecSerializer

    @extend_schema(request=FitSpecSerializer, responses={200: dict})
    def create(self, request):
        spec = FitSpecSerializer(data=request.data)
        spec.is_valid(raise_exception=True)
        data = spec.validated_data
        from hosts import backends

        impl = backends.get(data["backend"])
        try:
            options = impl.clean_options(
                data.get("options") or {}, max(len(data.get("gpu_indices") or data.get("gpus") or []), 1)
            )
        except DjangoValidationError as exc:
            raise _field_errors(exc) from None
        if data.get("architecture"):
            arch = fit.Architecture(**data["architecture"], source="given")
        else:
            arch = fit.preset_for(data["model"])
            if arch is None:
                raise ValidationError({"model": [f"No preset matches {data['model']!r}; give an architecture."]})
        if data["backend"] == "llamacpp" and data.get("model"):
            arch.quant = fit.quant_from_name(data["model"])
        if data.get("gpus"):
            gpus = [fit.GPUMemory(**g) for g in data["gpus"]]
        else:
            rows = data["host"].gpus.filter(index__in=data.get("gpu_indices") or [])
            gpus = [fit.GPUMemory(g.index, g.memory_total_mib or 0, g.memory_free_mib or 0) for g in rows]
        estimate = fit.estimate(
            fit.FitRequest(arch=arch, backend=data["backend"], gpus=gpus, **impl.fit_params(options))
        )
        return Response(estimate.as_dict())


class HostActionsViewSet(viewsets.GenericViewSet):
    """Actions on hosts; the host resource itself lives in hosts/api/views.py."""

    queryset = Host.objects.all()
    permission_classes = [IsAdmin]
    serializer_class = serializers.Serializer

    @extend_schema(request=None, responses={202: dict})
    @action(detail=True, methods=["post"], url_path="refresh-inventory")
    def refresh_inventory(self, request, pk=None):
        from hosts.tasks import refresh_inventory

        host = self.get_object()
        refresh_inventory.delay(host.pk)
        return Response({"detail": f"Inventory refresh of {host} queued."}, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=dict, responses={200: dict})
    @action(detail=True, methods=["post"], url_path="confirm-host-key")
    def confirm_host_key(self, request, pk=None):
        host = self.get_object()
        fingerprint = str(request.data.get("fingerprint", "")).strip()
        try:
            services.confirm_host_key(host, fingerprint)
        except DjangoValidationError as exc:
            raise ValidationError({"fingerprint": exc.messages}) from None
        return Response({"host_key_fingerprint": host.host_key_fingerprint, "status": host.status})
