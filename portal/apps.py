import logging

from django.apps import AppConfig

logger = logging.getLogger("portal")


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from . import startup

        startup.secure_data_dir()
        startup.log_warnings()
        from . import db  # noqa: F401 - connects the query deadline to every new connection
