from typing import Any

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from portal import audit, dashboard

        from .models import ApiToken, AuditLog, User

        def store(entry: dict[str, Any]) -> None:
            AuditLog.objects.create(**entry)

        audit.set_sink(store)
        audit.register(User, ignore={"last_login"})
        # Who minted or revoked a script's credential matters; the hash shows only as "set".
        audit.register(ApiToken, ignore={"last_used_at"})
        dashboard.register_stat(40, "Users", User.objects.filter(is_active=True).count, "user_list")
        dashboard.register_context(_recent_changes)


def _recent_changes(user) -> dict:
    from .models import AuditLog

    return {"recent_audit": AuditLog.objects.select_related("actor")[:10]} if user.is_admin else {}
