from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChannelsConfig(AppConfig):
    name = "channels"
    label = "channels"
    verbose_name = "Channels"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from portal import audit, dashboard

        # The probe, aggregate and prune tasks: created by migration 0001 and again after every
        # migrate or flush (a flushed test database, a restore), like the other apps' schedules.
        post_migrate.connect(_ensure_schedule, sender=self, dispatch_uid="channels-default-schedule")

        from .models import AliasTarget, Channel, Model, ModelRoute, RoutePrice

        audit.register(
            Channel,
            ignore={
                "status",
                "status_message",
                "status_changed",
                "consecutive_failures",
                "consecutive_successes",
                "last_ttft_ms",
                "last_active_probe",
                "alerted_status",
                "alerted_at",
            },
        )
        from django.db.models.signals import pre_save

        from .health.signals import reset_status_on_edit

        pre_save.connect(reset_status_on_edit, sender=Channel, dispatch_uid="channels_health_reset_on_edit")
        audit.register(Model)
        audit.register(ModelRoute, ignore={"discovered_context_window", "discovered_at", "unlisted_upstream_id"})
        audit.register(AliasTarget)
        audit.register(RoutePrice)
        dashboard.register_stat(20, _("Channels"), Channel.objects.count, "channel_list")
        dashboard.register_stat(30, _("Models"), Model.objects.served().count, "model_list")
        dashboard.register_step(
            10, "source", _("Add a channel or a GPU host"), Channel.objects.exists, "channel_create", _("Add a channel")
        )
        dashboard.register_step(20, "model", _("Add a model"), Model.objects.exists, "model_create", _("Add a model"))
        from .health.history import attention

        dashboard.register_attention(attention)
        dashboard.register_context(lambda user: {"my_models": Model.objects.usable_by(user)})
        from portal.metrics import register_collector

        from .metrics import ChannelCollector

        register_collector(ChannelCollector())


def _ensure_schedule(**kwargs: object) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from .health.schedule import ensure_default_schedule

    ensure_default_schedule(IntervalSchedule, PeriodicTask)
