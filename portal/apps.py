from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from . import audit
        from .models import User

        audit.register(User, ignore={"last_login"})
