from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from . import audit
        from .models import ApiToken, User

        audit.register(User, ignore={"last_login"})
        # Who minted or revoked a script's credential matters; the hash shows only as "set".
        audit.register(ApiToken, ignore={"last_used_at"})
