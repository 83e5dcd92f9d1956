"""Serializers for deployments, launch jobs and the fit estimate."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from hosts.choices import Backend
from hosts.models import Deployment, DeploymentNode, Host, LaunchJob
from portal.api.serializers import BooleanField, ListRelatedField, ModelSerializer, transitions_field, translated

from .. import services


def field_errors(exc: DjangoValidationError) -> ValidationError:
    if hasattr(exc, "error_dict"):
        return ValidationError(exc.message_dict)
    return ValidationError({"non_field_errors": exc.messages})


class LaunchJobSerializer(ModelSerializer[LaunchJob]):
    """A supervised job on a deployment (launch, stop, restart, adopt) with its state's history."""

    deployment_name = serializers.CharField(source="deployment.name", read_only=True)
    message = translated()
    transitions = transitions_field()

    class Meta:
        model = LaunchJob
        fields = [
            "id",
            "deployment",
            "deployment_name",
            "action",
            "state",
            "message",
            "message_code",
            "message_params",
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


class DeploymentNodeSerializer(ModelSerializer[DeploymentNode]):
    """One node of a multi-node deployment: its host, role and Ray process as last seen."""

    host_name = serializers.CharField(source="host.name", read_only=True)
    message = translated()

    class Meta:
        model = DeploymentNode
        fields = [
            "host",
            "host_name",
            "role",
            "ray_pid",
            "ray_state",
            "message",
            "message_code",
            "message_params",
            "last_checked",
        ]
        read_only_fields = fields


class DeploymentSerializer(ModelSerializer[Deployment]):
    """A model served on a host. The upstream API key is generated and never returned."""

    host = serializers.PrimaryKeyRelatedField(queryset=Host.objects.all())
    gpu_indices = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=255), max_length=64)
    options = serializers.DictField(required=False, help_text=_("Typed backend options; see the backend."))
    extra_args = serializers.ListField(
        child=serializers.CharField(max_length=200, trim_whitespace=False), required=False, max_length=40
    )
    command_preview = serializers.SerializerMethodField()
    status_message = translated("status_message")
    nodes = DeploymentNodeSerializer(many=True, read_only=True)
    worker_hosts = ListRelatedField(
        child_relation=serializers.PrimaryKeyRelatedField(queryset=Host.objects.all()),
        required=False,
        help_text=_("Further nodes (vLLM over Ray)."),
    )

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
            "worker_hosts",
            "network_interface",
            "ray_port",
            "nodes",
            "fit_override",
            "auto_restart",
            "max_restarts_per_hour",
            "on_demand",
            "idle_ttl",
            "pin_host",
            "cold_start_budget",
            "next_restart_at",
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "pid",
            "context_window",
            "channel",
            "last_fit",
            "last_allocation",
            "command_preview",
            "created",
            "updated",
        ]
        read_only_fields = [
            "nodes",
            "next_restart_at",
            "status",
            "status_message",
            "status_message_code",
            "status_message_params",
            "pid",
            "context_window",
            "channel",
            "last_fit",
            "last_allocation",
            "created",
            "updated",
        ]
        validators: list[Any] = []  # host+port clashes are reported on `port` by services.clean_deployment

    def get_command_preview(self, obj: Deployment) -> str:
        return services.command_preview(obj)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        instance = self.instance
        merged: dict[str, Any] = {
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
                "network_interface",
                "ray_port",
            )
        }
        if "worker_hosts" in attrs:
            merged["worker_hosts"] = attrs["worker_hosts"]
        else:
            merged["worker_hosts"] = list(instance.worker_hosts.all()) if instance else []
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
                worker_hosts=merged["worker_hosts"],
                network_interface=merged["network_interface"] or "",
                ray_port=merged["ray_port"] or 6379,
            )
        except DjangoValidationError as exc:
            raise field_errors(exc) from None
        attrs.update(cleaned)
        return attrs

    def create(self, validated_data: dict[str, Any]) -> Deployment:
        validated_data["upstream_api_key"] = services.generate_upstream_key()
        validated_data["created_by"] = self.context["request"].user
        return super().create(validated_data)

    def save(self, **kwargs: Any) -> Deployment:
        deployment: Deployment = super().save(**kwargs)
        if deployment.on_demand:  # listed while stopped (hosts/ondemand/)
            services.list_on_demand_model(deployment)
        return deployment


class GPUSpecSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField(min_value=0, default=0)
    total_mib = serializers.IntegerField(min_value=1, max_value=10_000_000)
    free_mib = serializers.IntegerField(min_value=0, max_value=10_000_000)


class ArchitectureSerializer(serializers.Serializer[Any]):
    params_b = serializers.FloatField(min_value=0.001, max_value=10_000)
    layers = serializers.IntegerField(min_value=1, max_value=1000)
    heads = serializers.IntegerField(min_value=1, max_value=1024)
    kv_heads = serializers.IntegerField(min_value=1, max_value=1024)
    head_dim = serializers.IntegerField(min_value=1, max_value=4096)
    vocab = serializers.IntegerField(min_value=1, max_value=10_000_000, default=32000)
    max_context = serializers.IntegerField(min_value=1, max_value=100_000_000, default=131072)


class FitSpecSerializer(serializers.Serializer[Any]):
    """The model by its `config_json` (a config.json, as an object or its text), by its files on
    `host` (`read_from_host`), by an explicit `architecture`, or by `model` name (presets); the GPUs
    as `gpus`, or `host` + `gpu_indices` as last seen. `gpus: []` with llama.cpp means CPU only
    (then `ram_mib`, or the host's RAM when read from the host)."""

    backend = serializers.ChoiceField(choices=Backend.choices)
    model = serializers.CharField(max_length=500, required=False, allow_blank=True)
    config_json = serializers.JSONField(required=False, help_text=_("The model's config.json (object or text)."))
    architecture = ArchitectureSerializer(required=False)
    options = serializers.DictField(required=False)
    host = serializers.PrimaryKeyRelatedField(queryset=Host.objects.all(), required=False)
    gpu_indices = serializers.ListField(child=serializers.IntegerField(min_value=0), required=False)
    gpus = GPUSpecSerializer(many=True, required=False)
    ram_mib = serializers.IntegerField(min_value=0, max_value=1_000_000_000, required=False)
    read_from_host = BooleanField(default=False)

    def validate_config_json(self, value: Any) -> Any:
        if len(str(value)) > 200_000:
            raise ValidationError(_("A config.json of at most 200 kB."))
        if not isinstance(value, dict | str):
            raise ValidationError(_("A config.json object, or its text."))
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not any(attrs.get(k) for k in ("architecture", "model", "config_json")):
            raise ValidationError(
                {"model": [_("Give a model name (matched against presets), its config.json or an architecture.")]}
            )
        if "gpus" not in attrs and not attrs.get("host"):
            raise ValidationError({"gpus": [_("Give the GPUs, or a host and its GPU indices.")]})
        return attrs
