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
        from axes.signals import user_locked_out

        user_locked_out.connect(_audit_lockout, dispatch_uid="accounts-audit-lockout")


def _audit_lockout(sender, request=None, username=None, ip_address=None, **kwargs) -> None:
    """An audit entry each time django-axes locks a login out (the password is never recorded)."""
    from django.conf import settings

    from portal import audit
    from portal.choices import AuditAction

    from .models import User

    person = User.objects.filter(username=username).first() if username else None
    audit.record(
        AuditAction.ACTION,
        person,
        object_type="" if person else "login",
        message=f"login locked out after {settings.AXES_FAILURE_LIMIT} failed attempts "
        f"(username {str(username or '')[:60]!r}, from {ip_address or 'an unknown address'})",
        actor=None,
    )


def _recent_changes(user) -> dict:
    from .models import AuditLog

    return {"recent_audit": AuditLog.objects.select_related("actor")[:10]} if user.is_admin else {}
