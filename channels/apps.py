from django.apps import AppConfig


class ChannelsConfig(AppConfig):
    name = "channels"
    label = "channels"
    verbose_name = "Channels"

    def ready(self) -> None:
        from portal import audit

        from .models import Channel, Model, ModelRoute

        audit.register(Channel, ignore={"status", "status_message", "status_changed"})
        audit.register(Model)
        audit.register(ModelRoute, ignore={"discovered_context_window", "discovered_at"})
