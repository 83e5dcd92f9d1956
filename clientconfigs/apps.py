from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ClientConfigsConfig(AppConfig):
    name = "clientconfigs"
    verbose_name = "Client configs"

    def ready(self) -> None:
        from portal import audit, dashboard

        from .models import DownloadToken

        audit.name_type(DownloadToken)  # its installer bundle downloaded
        dashboard.register_step(
            50, "connect", _("Connect a tool (the developer opens Connect)"), _connected, "connect", _("Open Connect")
        )


def _connected() -> bool:
    """A developer's tool is connected once a config was downloaded or a key has been used."""
    from keys.models import Key

    from .models import ConfigDownload

    return ConfigDownload.objects.exists() or Key.objects.filter(last_used_at__isnull=False).exists()
