"""User management workflows shared by the web UI, the REST API and `portal up`."""

from __future__ import annotations

import datetime
import ipaddress
import math
import os
import secrets
from collections.abc import Iterable
from types import EllipsisType
from typing import Any, TextIO

from axes.models import AccessAttempt
from axes.utils import reset as axes_reset
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models import Max, Q, QuerySet, Sum
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import audit
from portal.choices import AuditAction
from portal.i18n import Message

from .choices import Role
from .models import ApiToken, Team, User, lead_managed
from .signals import left_lead, user_reactivated


def generate_password() -> str:
    return secrets.token_urlsafe(12)


@transaction.atomic
def reset_password(user: User, *, actor: User | None = None, revoke_access: bool = True) -> str:
    """Set a new random password and return it (shown once to the admin). Whoever held the old
    one may have made tokens or kept a session: both end here unless `revoke_access` is False."""
    password = generate_password()
    user.set_password(password)
    user.save(update_fields=["password"])
    ended = end_access(user) if revoke_access else KEPT_ACCESS
    audit.record(
        AuditAction.ACTION, user, message=Message(gettext_noop("password reset; %(access)s"), access=ended), actor=actor
    )
    return password


@transaction.atomic
def password_changed(user: User, *, current_session: str | None, revoke_access: bool = True) -> None:
    """After `user` changed their own password: end their other sessions and revoke their API
    tokens when they asked to (the default), and say which in the audit log."""
    ended = end_access(user, keep_session=current_session) if revoke_access else KEPT_ACCESS
    audit.record(
        AuditAction.ACTION,
        user,
        message=Message(gettext_noop("password changed; %(access)s"), access=ended),
        actor=user,
    )


def check_set_active(user: User, active: bool, *, actor: User | None = None) -> None:
    """Raise ValidationError when `actor` may not make this change: nobody deactivates their own
    account (an admin would lock themselves out, perhaps the last admin). The page asks before it
    shows its confirmation; `set_active` asks again, so the page, the API and a command agree."""
    from django.core.exceptions import ValidationError

    if not active and actor is not None and actor.pk == user.pk:
        raise ValidationError(_("You cannot deactivate your own account; ask another admin."), code="self")


def check_role_change(user: User, role: str, *, actor: User | None = None) -> None:
    """Raise ValidationError when `actor` may not give `user` this role: nobody removes their own
    admin role (the last admin could lock everyone out). The page and the API both ask here."""
    from django.core.exceptions import ValidationError

    if actor is not None and user.pk is not None and actor.pk == user.pk and role != Role.ADMIN:
        raise ValidationError({"role": _("You cannot remove your own admin role; ask another admin.")}, code="self")


@transaction.atomic
def set_active(user: User, active: bool, *, restore_keys: bool = False, actor: User | None = None) -> None:
    """Deactivate or reactivate (never one's own account: `check_set_active`).

    Deactivating ends the user's sessions and revokes their API tokens; their keys stop working
    (Key.is_active checks the owner). Reactivating brings nothing back silently: the keys app
    revokes the old keys unless the admin chose `restore_keys`; tokens stay revoked."""
    check_set_active(user, active, actor=actor)
    if user.is_active == active:
        return
    user.is_active = active
    user.save(update_fields=["is_active"])
    if not active:
        ended = end_access(user)
        audit.record(
            AuditAction.ACTION,
            user,
            message=Message(gettext_noop("deactivated; %(access)s"), access=ended),
            actor=actor,
        )
    else:
        user_reactivated.send(sender=type(user), user=user, restore_keys=restore_keys, actor=actor)
        kept = Message(gettext_noop("old keys restored") if restore_keys else gettext_noop("old keys revoked"))
        audit.record(
            AuditAction.ACTION, user, message=Message(gettext_noop("reactivated; %(keys)s"), keys=kept), actor=actor
        )


def end_sessions(user: User, *, keep: str | None = None) -> int:
    """Delete every session logged in as `user` (database sessions) but `keep`; returns how many."""
    mine = [
        s.pk
        for s in Session.objects.filter(expire_date__gt=timezone.now()).exclude(pk=keep or "").iterator()
        if str(s.get_decoded().get(SESSION_KEY)) == str(user.pk)
    ]
    Session.objects.filter(pk__in=mine).delete()
    return len(mine)


def end_access(user: User, *, keep_session: str | None = None) -> Message:
    """End `user`'s sessions (but `keep_session`) and revoke their API tokens; says what it did
    (for the audit log)."""
    sessions = end_sessions(user, keep=keep_session)
    tokens = ApiToken.objects.filter(user=user).not_revoked().update(revoked_at=timezone.now())
    return Message(
        gettext_noop("%(sessions)s session(s) ended, %(tokens)s API token(s) revoked"), sessions=sessions, tokens=tokens
    )


# What a password reset or change without `revoke_access` says it left alone.
KEPT_ACCESS = Message(gettext_noop("API tokens and sessions kept"))


def unlock_login(user: User, *, actor: User | None = None) -> int:
    """Clear django-axes' failed logins for `user`'s username; returns how many were cleared."""
    cleared = int(axes_reset(username=user.get_username()))
    unlocked = Message(gettext_noop("login unlocked (%(cleared)s failed attempt(s) cleared)"), cleared=cleared)
    audit.record(AuditAction.ACTION, user, message=unlocked, actor=actor)
    return cleared


def _recent_attempts(username: str) -> QuerySet[AccessAttempt]:
    attempts: QuerySet[AccessAttempt] = AccessAttempt.objects.filter(
        username=username, attempt_time__gte=timezone.now() - settings.AXES_COOLOFF_TIME
    )
    return attempts


def is_locked_out(user: User) -> bool:
    """Whether django-axes blocks logging in as `user` from some address (failed attempts, summed
    per address as axes does)."""
    per_address = _recent_attempts(user.get_username()).values("ip_address").annotate(n=Sum("failures_since_start"))
    return bool(per_address.filter(n__gte=settings.AXES_FAILURE_LIMIT).exists())


def is_trusted_address(address: str | None) -> bool:
    """Whether `address` is one of PORTAL_LOGIN_TRUSTED_ADDRESSES (never slowed down)."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    return any(ip in net for net in settings.PORTAL_LOGIN_TRUSTED_ADDRESSES)


def login_delay(username: str) -> int:
    """Seconds before `username` may try a password again, from anywhere but a trusted address.

    Past AXES_FAILURE_LIMIT failures (every address together, within the cool-off) each next
    attempt waits 1, 2, 4 … seconds (up to PORTAL_LOGIN_MAX_DELAY_SECONDS) after the last failure:
    a slower rate, never a lock, so failures from elsewhere cannot keep the owner out."""
    return _delay(_recent_attempts(username), settings.AXES_FAILURE_LIMIT)


def address_delay(ip: str | None) -> int:
    """Seconds before the address `ip` may try a password again, for any username: the same
    slowing down past PORTAL_LOGIN_ADDRESS_FAILURE_LIMIT failures from it (one address trying many
    usernames), never a lock that would keep everyone behind one office NAT out."""
    if not ip:
        return 0
    recent = AccessAttempt.objects.filter(ip_address=ip, attempt_time__gte=timezone.now() - settings.AXES_COOLOFF_TIME)
    return _delay(recent, settings.PORTAL_LOGIN_ADDRESS_FAILURE_LIMIT)


def _delay(attempts: QuerySet[AccessAttempt], limit: int) -> int:
    recent = attempts.aggregate(n=Sum("failures_since_start"), last=Max("attempt_time"))
    over = (recent["n"] or 0) - limit
    if over < 0 or recent["last"] is None:
        return 0
    delay = min(2 ** min(over, 30), settings.PORTAL_LOGIN_MAX_DELAY_SECONDS)
    left = delay - (timezone.now() - recent["last"]).total_seconds()
    return int(max(0, math.ceil(left)))


def set_language(user: User, code: str) -> None:
    """Save the language of `user`'s pages ("": the browser's); an unknown code is refused."""
    if code and code not in dict(settings.LANGUAGES):
        raise ValueError(f"unsupported language: {code!r}")
    user.language = code
    user.save(update_fields=["language"])


def create_user(
    *, username: str, role: str, email: str = "", password: str | None = None, **fields: Any
) -> tuple[User, str]:
    """Create a user; returns (user, password) — the password is generated when not given."""
    plain = password or generate_password()
    user = User.objects.create_user(username=username, email=email, password=plain, role=role, **fields)
    return user, plain


def ensure_first_admin(stdout: TextIO) -> None:
    """Create `admin` when no admin exists. Password from PORTAL_ADMIN_PASSWORD or printed once."""
    if User.objects.filter(Q(role=Role.ADMIN) | Q(is_superuser=True)).exists():
        return
    password = os.environ.get("PORTAL_ADMIN_PASSWORD")
    generated = not password
    if generated:
        password = generate_password()
    User.objects.create_user(username="admin", password=password, role=Role.ADMIN, is_staff=True, is_superuser=True)
    if generated:
        stdout.write(
            "\n  Created the first admin.\n"
            f"    username: admin\n    password: {password}\n"
            "  (shown once; set PORTAL_ADMIN_PASSWORD to choose it, change it under Account)\n"
        )
    else:
        stdout.write("  Created the first admin: username admin, password from PORTAL_ADMIN_PASSWORD.\n")
    stdout.flush()


# --- personal API tokens: shown once, stored as a keyed hash ----------------------------------


def issue_token(*, user: User, name: str, expires_at: datetime.datetime | None = None) -> tuple[ApiToken, str]:
    stored, plaintext = ApiToken.mint()
    token = ApiToken.objects.create(user=user, name=name, expires_at=expires_at, **stored)
    return token, plaintext


def verify_token(presented: str) -> ApiToken | None:
    token = ApiToken.find(presented, ApiToken.objects.select_related("user"))
    if token is None or not token.is_active or not token.user.is_active:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


def revoke_token(token: ApiToken) -> None:
    token.revoke()


# --- teams: a ceiling over their members; team leads manage members within it ------------------


def may_manage(editor: User, member: User) -> bool:
    """Admins manage everyone; a team lead themselves and the developers of the team they lead."""
    if editor.is_admin:
        return True
    if editor.led_team_id is None or member.team_id != editor.led_team_id:
        return False
    return member.pk == editor.pk or member.is_lead_managed


# What a user's save may change that decides which team's leads manage them.
_MANAGING_FIELDS = {"team", "team_id", "role", "is_superuser"}


def note_managing_team(sender: type[User], instance: User, raw: bool = False, **kwargs: Any) -> None:
    """Before a user's save (pre_save, every path: the user page, the API, single sign-on): remember
    the team whose leads managed them, for `announce_left_lead`."""
    fields = kwargs.get("update_fields")
    if raw or instance.pk is None or (fields is not None and not _MANAGING_FIELDS.intersection(fields)):
        return
    before = User.objects.filter(pk=instance.pk).only("team_id", "role", "is_superuser").first()
    instance.__dict__["_managing_team_before"] = before.managing_team_id if before is not None else None


def announce_left_lead(sender: type[User], instance: User, raw: bool = False, **kwargs: Any) -> None:
    """After a user's save: `left_lead` when they left the team whose leads managed them."""
    before = instance.__dict__.pop("_managing_team_before", None)
    if raw or before is None or before == instance.managing_team_id:
        return
    left_lead.send(sender=sender, user=instance, team=Team.objects.filter(pk=before).first())


def own_limit_bounds(editor: User | None, owner: User, limited: Any) -> dict[str, int]:
    """The most a team lead may set each limit of `limited` (themselves or a key of theirs) to,
    when `editor` is that lead and `owner`: what an admin recorded as its ceiling, else the value it
    has now. A lead manages others within what an admin allowed; their own limits are an admin's to
    raise or remove, so they may only lower them (a limit without a value they may set, which lowers
    it). Empty for anyone else. The one rule the member limits and the key settings both apply."""
    if editor is None or editor.is_admin or not editor.is_team_lead or editor.pk != owner.pk:
        return {}
    recorded = limited.admin_ceilings or {}
    bounds = {name: recorded.get(name, getattr(limited, name)) for name in limited.LIMIT_FIELDS}
    return {name: int(bound) for name, bound in bounds.items() if bound is not None}


def own_limit_error(limit: int, *, cleared: bool) -> str:
    """Why a team lead may not raise (`cleared`: remove) a limit of their own (`own_limit_bounds`)."""
    if cleared:
        return _("Only an admin can remove your own limit of %(limit)s; you can lower it.") % {"limit": f"{limit:,}"}
    return _("Only an admin can raise your own limit above %(limit)s; you can lower it.") % {"limit": f"{limit:,}"}


def managed_members(team: Team, editor: User) -> QuerySet[User]:
    """The members of `team` that `editor` manages (`may_manage` as a filter)."""
    members = team.members.all()
    if editor.is_admin:
        return members
    return members.filter(lead_managed() | Q(pk=editor.pk))


def validate_member_limits(
    member: User,
    *,
    editor: User,
    limits: dict[str, Any],
    team: Team | EllipsisType | None = ...,
    changed: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Check limits for `member` as `editor` sets them; return cleaned values or raise
    ValidationError with field errors. Used by the user form and serializer (admins) and the team
    member form and API (team leads), so the rules are one. `team`: the team the member is being
    put in, when that changes in the same edit; `changed`: the names this edit sets (a form posts
    every limit; only those changed become an admin's ceiling), default all of `limits`.

    Limits have an owner, as on keys: what an admin sets on a user becomes their ceiling
    (`cleaned["admin_ceilings"]`); a team lead may lower such a limit, never raise or clear it, and
    may only lower their own (`own_limit_bounds`). A member's limit never exceeds their team's (the
    team's limits are set by admins only)."""
    from django.core.exceptions import ValidationError

    errors: dict[str, list[str]] = {}
    cleaned: dict[str, Any] = {}
    by_admin = editor.is_admin
    ceilings = dict(member.admin_ceilings or {})
    chosen: Team | None = member.team if isinstance(team, EllipsisType) else team
    own = own_limit_bounds(editor, member, member)
    for name, value in limits.items():
        locked = None if by_admin else ceilings.get(name)
        own_bound = None if locked is not None else own.get(name)
        if value in (None, ""):
            if locked is not None:
                errors.setdefault(name, []).append(
                    _("An admin set this limit to %(limit)s; you can lower it but not remove it.")
                    % {"limit": f"{locked:,}"}
                )
            elif own_bound is not None:
                errors.setdefault(name, []).append(own_limit_error(own_bound, cleared=True))
            cleaned[name] = None
            continue
        number = int(value)
        team_limit = getattr(chosen, name, None) if chosen is not None else None
        if chosen is not None and team_limit is not None and number > team_limit:
            errors.setdefault(name, []).append(
                _("Cannot exceed the team %(team)s's limit of %(limit)s.")
                % {"team": chosen.name, "limit": f"{team_limit:,}"}
            )
        if locked is not None and number > locked:
            errors.setdefault(name, []).append(
                _("An admin set this limit to %(limit)s; you can lower it but not raise it.") % {"limit": f"{locked:,}"}
            )
        elif own_bound is not None and number > own_bound:
            errors.setdefault(name, []).append(own_limit_error(own_bound, cleared=False))
        cleaned[name] = number
    if by_admin:
        for name in limits if changed is None else [n for n in limits if n in changed]:
            if cleaned.get(name) is None:
                ceilings.pop(name, None)
            else:
                ceilings[name] = cleaned[name]
        cleaned["admin_ceilings"] = ceilings
    if errors:
        raise ValidationError(errors)
    return cleaned


def save_member_limits(member: User, cleaned: dict[str, Any]) -> None:
    """Store what `validate_member_limits` returned (audited by the model signals)."""
    for name, value in cleaned.items():
        setattr(member, name, value)
    member.save(update_fields=list(cleaned))
