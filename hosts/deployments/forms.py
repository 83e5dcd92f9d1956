"""The deployment form: the same validation as the API (`services.clean_deployment`), as form errors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from portal import i18n
from portal.forms import ModelMultipleChoiceField

from .. import backends
from ..choices import Backend
from ..models import Deployment, Host
from . import services

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    from accounts.models import User


class _FieldArgs(TypedDict):
    label: StrOrPromise
    required: bool
    help_text: StrOrPromise


def _int_bound(bound: float | None) -> int | None:
    """An int option's bound (declared as ints; `Option.min`/`max` are typed for float options too)."""
    return None if bound is None else int(bound)


def _option_field(opt: backends.Option) -> forms.Field:
    common: _FieldArgs = {"label": opt.label, "required": False, "help_text": opt.help}
    if opt.type is bool:
        return forms.BooleanField(initial=bool(opt.default), **common)
    if opt.type is int:
        return forms.IntegerField(
            initial=opt.default, min_value=_int_bound(opt.min), max_value=_int_bound(opt.max), **common
        )
    if opt.type is float:
        return forms.FloatField(initial=opt.default, min_value=opt.min, max_value=opt.max, step_size=None, **common)
    if not opt.choices:
        return forms.CharField(initial=opt.default, max_length=64, **common)
    return forms.ChoiceField(initial=opt.default, choices=[(c, c or _("none")) for c in opt.choices], **common)


def _worker_label(host: Host) -> str:
    gpus = [g for g in host.gpus.all() if not g.stale]
    return ngettext("%(name)s (%(address)s, %(count)s GPU)", "%(name)s (%(address)s, %(count)s GPUs)", len(gpus)) % {
        "name": host.name,
        "address": host.address,
        "count": len(gpus),
    }


class DeploymentForm(forms.Form):
    """Backend options are `<backend>__<option>` fields; only the chosen backend's are used."""

    name = forms.CharField(
        label=_("Name"), max_length=63, help_text=_("Lowercase letters, digits and dashes; names a folder on the host.")
    )
    backend = forms.ChoiceField(label=_("Backend"), choices=Backend.choices)
    model_path = forms.CharField(
        label=_("Model path"),
        max_length=500,
        help_text=_("vLLM: Hugging Face id or folder on the host. llama.cpp: the .gguf file's path."),
    )
    served_model_name = forms.CharField(
        label=_("Served model name"), max_length=128, help_text=_("The public model name in the gateway.")
    )
    gpu_indices = forms.TypedMultipleChoiceField(
        coerce=int, widget=forms.CheckboxSelectMultiple, required=False, label=_("GPUs")
    )
    port = forms.IntegerField(label=_("Port"), min_value=1024, max_value=65535)
    extra_args = forms.CharField(
        label=_("Extra arguments"),
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text=_("Further arguments, one token per line (e.g. --trust-remote-code)."),
    )
    worker_hosts = ModelMultipleChoiceField(
        queryset=Host.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label=_("Worker hosts"),
        help_text=_(
            "vLLM only. Further hosts joined to this one over Ray, each on the same GPU indices: tensor "
            "parallel within a node, pipeline parallel across nodes."
        ),
    )
    network_interface = forms.CharField(
        max_length=40,
        required=False,
        label=_("Network interface"),
        help_text=_("The interface the nodes reach each other on (NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME)."),
        widget=forms.TextInput(attrs={"list": "network-interfaces", "autocomplete": "off"}),
    )
    ray_port = forms.IntegerField(
        min_value=1024,
        max_value=65535,
        initial=6379,
        required=False,
        label=_("Ray port"),
        help_text=_("The port of the Ray head on this host; the workers connect to it."),
    )
    fit_override = forms.BooleanField(required=False, label=_("Launch even if the VRAM estimate says it does not fit"))
    auto_restart = forms.BooleanField(
        required=False,
        initial=True,
        label=_("Restart automatically when it crashes"),
        help_text=_("The supervisor checks every running deployment every 20 s and restarts a crashed server."),
    )
    max_restarts_per_hour = forms.IntegerField(
        min_value=1,
        max_value=60,
        initial=3,
        required=False,
        label=_("Automatic restarts per hour"),
        help_text=_("After this many restarts within an hour it stops retrying and shows a crash loop."),
    )
    # Models on demand (hosts/ondemand/): its own fieldset on the page.
    on_demand = forms.BooleanField(
        required=False,
        label=_("On demand"),
        help_text=_("Listed while stopped; the first request starts it on a host with room, and it stops when idle."),
    )
    idle_ttl = forms.IntegerField(
        min_value=30,
        max_value=7 * 86400,
        initial=900,
        required=False,
        label=_("Idle time to live (seconds)"),
        help_text=_("Stopped after this many seconds without a request."),
    )
    pin_host = forms.BooleanField(
        required=False,
        label=_("Pin to this host"),
        help_text=_("Start it only here; otherwise the placement chooses the host by free GPU memory."),
    )
    cold_start_budget = forms.IntegerField(
        min_value=5,
        max_value=3600,
        initial=120,
        required=False,
        label=_("Cold-start budget (seconds)"),
        help_text=_("How long a request waits for it to start before it is answered 503 with Retry-After."),
    )
    ON_DEMAND_FIELDS = ("on_demand", "idle_ttl", "pin_host", "cold_start_budget")

    def __init__(self, *args: Any, host: Host, instance: Deployment | None = None, **kwargs: Any) -> None:
        if instance is not None and "initial" not in kwargs:
            initial = {
                "name": instance.name,
                "backend": instance.backend,
                "model_path": instance.model_path,
                "served_model_name": instance.served_model_name,
                "gpu_indices": instance.gpu_indices,
                "port": instance.port,
                "extra_args": "\n".join(instance.extra_args),
                "fit_override": instance.fit_override,
                "auto_restart": instance.auto_restart,
                "max_restarts_per_hour": instance.max_restarts_per_hour,
                "worker_hosts": [h.pk for h in instance.worker_hosts.all()],
                "network_interface": instance.network_interface,
                "ray_port": instance.ray_port,
                **{name: getattr(instance, name) for name in self.ON_DEMAND_FIELDS},
            }
            for key, value in instance.options.items():
                initial[f"{instance.backend}__{key}"] = value
            kwargs["initial"] = initial
        super().__init__(*args, **kwargs)
        self.host, self.instance = host, instance
        gpu_field = self.fields["gpu_indices"]
        assert isinstance(gpu_field, forms.TypedMultipleChoiceField)  # declared above; narrows `Field`
        gpu_field.choices = [
            (
                g.index,
                _("#%(index)s %(name)s (%(free)s of %(total)s GiB free)")
                % {
                    "index": g.index,
                    "name": g.name,
                    "free": f"{(g.memory_free_mib or 0) / 1024:.1f}",
                    "total": f"{(g.memory_total_mib or 0) / 1024:.1f}",
                },
            )
            for g in host.gpus.all()
            if not g.stale
        ]
        stale = [str(g.index) for g in host.gpus.all() if g.stale]
        if stale:
            gpu_field.help_text = _(
                "GPU %(indices)s not offered: the last inventory failed, so their figures are old. "
                "Refresh the host's inventory."
            ) % {"indices": i18n.listing(stale)}
        workers_field = self.fields["worker_hosts"]
        assert isinstance(workers_field, forms.ModelMultipleChoiceField)
        # Any host validates, so a head posted as its own worker gets the service's clear error;
        # only the others are offered.
        workers_field.queryset = Host.objects.order_by("name")
        workers_field.widget.choices = [
            (h.pk, _worker_label(h)) for h in Host.objects.order_by("name").prefetch_related("gpus") if h.pk != host.pk
        ]
        for kind, impl in backends.REGISTRY.items():
            for opt in impl.options:
                self.fields[f"{kind}__{opt.name}"] = _option_field(opt)
        self.cleaned_spec: dict[str, Any] = {}

    def on_demand_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.ON_DEMAND_FIELDS]

    def option_fields(self, kind: str) -> list[forms.BoundField]:
        return [self[f"{kind}__{o.name}"] for o in backends.get(kind).options]

    def backend_fieldsets(self) -> list[tuple[str, str, list[forms.BoundField]]]:
        return [(kind, impl.label, self.option_fields(kind)) for kind, impl in backends.REGISTRY.items()]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data  # what Form.clean() returns; its stub says it may be None
        backend = data.get("backend")
        if not backend or self.errors:
            return data
        impl = backends.get(backend)
        options = {o.name: data.get(f"{backend}__{o.name}") for o in impl.options}
        options = {k: v for k, v in options.items() if v not in (None, "")}
        extra = [line.strip() for line in (data.get("extra_args") or "").splitlines() if line.strip()]
        try:
            self.cleaned_spec = services.clean_deployment(
                host=self.host,
                backend=backend,
                model_path=data.get("model_path", ""),
                served_model_name=data.get("served_model_name", ""),
                gpu_indices=list(data.get("gpu_indices") or []),
                port=data.get("port"),
                options=options,
                extra_args=extra,
                instance=self.instance,
                worker_hosts=list(data.get("worker_hosts") or []),
                network_interface=(data.get("network_interface") or "").strip(),
                ray_port=data.get("ray_port") or 6379,
            )
        except ValidationError as exc:
            for key, messages in exc.message_dict.items():
                field = f"{backend}__{key.removeprefix('options.')}" if key.startswith("options.") else key
                if field == "tensor_parallel_size":
                    field = f"{backend}__tensor_parallel_size"
                self.add_error(field if field in self.fields else None, messages)
        name_clash = Deployment.objects.filter(name=data.get("name"))
        if self.instance is not None:
            name_clash = name_clash.exclude(pk=self.instance.pk)
        if name_clash.exists():
            self.add_error("name", _("A deployment with this name exists."))
        return data

    def save(self, user: User) -> Deployment:
        spec = dict(self.cleaned_spec)
        return services.save_deployment(
            host=self.host,
            name=self.cleaned_data["name"],
            fit_override=self.cleaned_data["fit_override"],
            auto_restart=self.cleaned_data["auto_restart"],
            max_restarts_per_hour=self.cleaned_data.get("max_restarts_per_hour") or 3,
            on_demand=self.cleaned_data.get("on_demand", False),
            idle_ttl=self.cleaned_data.get("idle_ttl") or 900,
            pin_host=self.cleaned_data.get("pin_host", False),
            cold_start_budget=self.cleaned_data.get("cold_start_budget") or 120,
            user=user,
            instance=self.instance,
            **spec,
        )

    def preview_deployment(self) -> Deployment:
        """An unsaved deployment for the command preview and fit check."""
        d = Deployment(host=self.host, name=self.cleaned_data["name"], upstream_api_key="preview-key")
        for key, value in self.cleaned_spec.items():
            if key != "worker_hosts":  # a relation: an unsaved deployment cannot hold it
                setattr(d, key, value)
        d.unsaved_workers = list(self.cleaned_spec.get("worker_hosts") or [])  # read by multinode.workers
        return d

    def interface_choices(self) -> list[dict[str, Any]]:
        """The head host's interfaces as its last inventory saw them (offered in a datalist)."""
        return [i for i in self.host.network_interfaces if isinstance(i, dict) and i.get("name")]
