from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

from portal.i18n import Message

if TYPE_CHECKING:
    from django.http import HttpRequest

    from .models import User


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from portal import audit, dashboard

        from .models import ApiToken, AuditLog, Team, User

        def store(entry: dict[str, Any]) -> None:
            AuditLog.objects.create(**entry)

        audit.set_sink(store)
        audit.register(User, ignore={"last_login"})
        audit.register(Team)
        # Who minted or revoked a script's credential matters; the hash shows only as "set".
        audit.register(ApiToken, ignore={"last_used_at"})
        from django.db.models.signals import post_save, pre_save

        from .services import announce_left_lead, note_managing_team

        pre_save.connect(note_managing_team, sender=User, dispatch_uid="accounts-note-managing-team")
        post_save.connect(announce_left_lead, sender=User, dispatch_uid="accounts-announce-left-lead")
        dashboard.register_stat(40, _("Users"), User.objects.filter(is_active=True).count, "user_list")
        dashboard.register_step(
            30, "developer", _("Add a developer"), _has_developer, "user_create", _("Add a developer")
        )
        dashboard.register_context(_recent_changes)
        from axes.signals import user_locked_out

        user_locked_out.connect(_audit_lockout, dispatch_uid="accounts-audit-lockout")
        from channels.services import register_model_holders

        register_model_holders(_people_limited_to)  # deleting that model must not open them to all


def _people_limited_to(model: Any) -> list[str]:
    """Users (active or not: they can be reactivated) and teams whose allowed models are `model` alone."""
    from django.db.models import Count

    from .models import Team, User

    users = User.objects.filter(pk__in=User.allowed_models.through.objects.filter(model=model).values("user_id"))
    teams = Team.objects.filter(pk__in=Team.allowed_models.through.objects.filter(model=model).values("team_id"))
    users = users.annotate(n=Count("allowed_models")).filter(n=1).order_by("username")
    teams = teams.annotate(n=Count("allowed_models")).filter(n=1).order_by("name")
    return [_("user %(name)s") % {"name": u.username} for u in users] + [
        _("team %(name)s") % {"name": t.name} for t in teams
    ]


def _has_developer() -> bool:
    from .choices import Role
    from .models import User

    return User.objects.filter(is_active=True).exclude(role=Role.ADMIN).exists()


def _audit_lockout(
    sender: object,
    request: HttpRequest | None = None,
    username: str | None = None,
    ip_address: str | None = None,
    **kwargs: Any,
) -> None:
    """An audit entry when django-axes locks a login out (never the password). axes signals every
    refused attempt while locked too; those add nothing, so one entry per cool-off is written."""
    from django.conf import settings
    from django.utils import timezone

    from portal import audit
    from portal.choices import AuditAction

    from .models import AuditLog, User

    name = Message(gettext_noop("username %(username)s"), username=repr(str(username or "")[:60]))
    where = Message(gettext_noop("from %(address)s"), address=ip_address) if ip_address else UNKNOWN_ADDRESS
    who = Message(gettext_noop("%(name)s, %(where)s"), name=name, where=where)
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    seen = (name if username else who).english  # one entry per locked username (or per address without one)
    if AuditLog.objects.filter(created__gte=since, message__startswith="login locked out", message__contains=seen):
        return
    person = User.objects.filter(username=username).first() if username else None
    audit.record(
        AuditAction.ACTION,
        person,
        object_type="" if person else "login",
        message=Message(
            gettext_noop("login locked out after %(limit)s failed attempts (%(who)s)"),
            limit=settings.AXES_FAILURE_LIMIT,
            who=who,
        ),
        actor=None,
    )


UNKNOWN_ADDRESS = Message(gettext_noop("from an unknown address"))


def _recent_changes(user: User) -> dict[str, Any]:
    from .models import AuditLog

    return {"recent_audit": AuditLog.objects.select_related("actor")[:10]} if user.is_admin else {}
