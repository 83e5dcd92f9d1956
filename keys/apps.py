from typing import Any

from django.apps import AppConfig


class KeysConfig(AppConfig):
    name = "keys"
    verbose_name = "Keys"

    def ready(self) -> None:
        from portal import audit, dashboard

        from .models import Key

        audit.register(Key, ignore={"last_used_at"})
        dashboard.register_stat(50, "Active keys", _active_keys, "key_all", "?state=active")
        dashboard.register_context(lambda user: {"my_active_keys": _active_keys(owner=user)})
        dashboard.register_section(10, "keys/_dashboard_usage.html", _usage_last_day)


def _usage_last_day(user: Any) -> dict[str, Any]:
    from .usage.services import last_day

    return last_day(user)


def _active_keys(**filters: Any) -> int:
    from .models import Key

    return Key.objects.unexpired().filter(**filters).count()
