from typing import Any

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class HostsConfig(AppConfig):
    name = "hosts"
    verbose_name = "GPU hosts"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from portal import audit, dashboard

        from . import tasks  # noqa: F401  (connects the receivers that queue jobs and probes)

        post_migrate.connect(_register_schedule, sender=self, dispatch_uid="hosts-default-schedule")

        from .downloads import tasks as download_tasks  # weight downloads: their tasks, receiver, sweep

        post_migrate.connect(download_tasks.ensure_schedule, sender=self, dispatch_uid="hosts-downloads-schedule")

        from .ondemand import tasks as ondemand_tasks  # models on demand: placement, idle sweep

        post_migrate.connect(ondemand_tasks.ensure_schedule, sender=self, dispatch_uid="hosts-ondemand-schedule")

        from .downloads.models import ModelDownload
        from .models import Deployment, GPUTypeCost, Host

        audit.register(
            Host, ignore={"status", "status_message", "driver_version", "cuda_version", "seen_host_key_fingerprint"}
        )
        # Status, PID and context window are moved by launch jobs; the jobs themselves are the record.
        audit.register(Deployment, ignore={"status", "status_message", "pid", "context_window"})
        audit.register(GPUTypeCost)
        audit.name_type(ModelDownload)  # requested, cancelled, its access token forgotten
        dashboard.register_stat(10, _("Hosts"), Host.objects.count, "host_list")
        dashboard.register_step(
            10, "source", _("Add a channel or a GPU host"), Host.objects.exists, "host_create", _("Add a GPU host")
        )
        from .services import attention

        dashboard.register_attention(attention)
        from portal.metrics import register_collector

        from .metrics import GPUCollector, LaunchJobCollector

        register_collector(LaunchJobCollector())
        register_collector(GPUCollector())
        from .ondemand.metrics import OnDemandCollector

        register_collector(OnDemandCollector())
        from channels.services import register_cold_windows, register_model_states

        from .ondemand.services import cold_windows, model_states

        register_model_states(model_states)  # "on demand · cold" on the models pages
        register_cold_windows(cold_windows)  # a stopped model's window on those pages and in the API


def _register_schedule(**kwargs: Any) -> None:
    """After `migrate`: the default periodic tasks (inventory every 5 min, stale-job sweep)."""
    from .tasks import ensure_schedule

    ensure_schedule()
