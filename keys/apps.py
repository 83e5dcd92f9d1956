from django.apps import AppConfig


class KeysConfig(AppConfig):
    name = "keys"
    verbose_name = "Keys"

    def ready(self) -> None:
        from portal import audit

        from .models import Key

        audit.register(Key, ignore={"last_used_at"})
