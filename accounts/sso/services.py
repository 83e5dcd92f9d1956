"""From verified OpenID Connect claims to a user: found by the IdP's `sub`, created at the first
login, and given the role the groups claim maps to at every login (a group removed at the IdP
demotes at the next one). Team targets of PORTAL_OIDC_GROUP_MAP set the user's team the same way."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from ..choices import Role
from ..models import Team, User

logger = logging.getLogger(__name__)
NOT_ALLOWED = re.compile(r"[^\w.@+-]")


class SignInRefused(Exception):
    """The IdP vouched for this person, but the portal does not let them in; says why."""


@dataclass
class GroupMapping:
    role: str | None  # None: no mapped group and PORTAL_OIDC_DEFAULT_ROLE=none
    teams: list[str] = field(default_factory=list)


def group_names(claims: Mapping[str, Any]) -> list[str]:
    """The groups claim as a list of names (a single string, a list, or missing)."""
    value = claims.get(settings.PORTAL_OIDC_GROUPS_CLAIM)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable):
        return [str(v) for v in value]
    return []


def map_groups(groups: Iterable[str]) -> GroupMapping:
    """The highest role any of `groups` maps to (admin over team lead over developer), else the default role,
    and the team names they map to, in PORTAL_OIDC_GROUP_MAP's order."""
    rules = settings.PORTAL_OIDC_GROUP_MAP
    mine = set(groups)
    roles = {rule["role"] for group, rule in rules.items() if group in mine and rule["role"]}
    teams = [rule["team"] for group, rule in rules.items() if group in mine and rule["team"]]
    if Role.ADMIN in roles:
        role: str | None = Role.ADMIN
    elif Role.TEAM_LEAD in roles:
        role = Role.TEAM_LEAD
    elif Role.DEVELOPER in roles:
        role = Role.DEVELOPER
    else:
        default = settings.PORTAL_OIDC_DEFAULT_ROLE
        role = None if default == "none" else default
    return GroupMapping(role=role, teams=list(dict.fromkeys(teams)))


def sign_in(claims: Mapping[str, Any]) -> User:
    """The user `claims` (ID token and userinfo, already verified) name, created or updated."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise SignInRefused("The sign-in provider sent no subject (sub) for this account.")
    mapped = map_groups(group_names(claims))
    if mapped.role is None:
        logger.info("single sign-on refused for sub %s: none of its groups is in PORTAL_OIDC_GROUP_MAP", subject)
        raise SignInRefused("Your account is not in a group that may use this portal. Ask an admin to add you to one.")
    with transaction.atomic():
        user = User.objects.select_for_update().filter(oidc_subject=subject).first() or _link_by_email(claims)
        if user is None:
            user = User(username=_free_username(claims, subject))
            user.set_unusable_password()
            logger.info("single sign-on created user %s (sub %s) as %s", user.username, subject, mapped.role)
        changed = _apply(user, claims, subject, mapped.role)
        if changed or user.pk is None:
            user.save()
    _apply_teams(user, mapped.teams)
    return user


def _link_by_email(claims: Mapping[str, Any]) -> User | None:
    """An existing account with the same verified e-mail and no IdP identity yet (a user an admin
    made before single sign-on was on). Never a superuser: that account stays local."""
    email = str(claims.get("email") or "")
    if not email or claims.get("email_verified") is not True:
        return None
    found = list(
        User.objects.select_for_update().filter(email__iexact=email, oidc_subject__isnull=True, is_superuser=False)[:2]
    )
    if len(found) != 1:
        return None
    logger.info("single sign-on linked sub %s to the existing user %s by e-mail", claims.get("sub"), found[0])
    return found[0]


def _free_username(claims: Mapping[str, Any], subject: str) -> str:
    wanted = str(claims.get(settings.PORTAL_OIDC_USERNAME_CLAIM) or "")
    if not wanted:
        wanted = str(claims.get("email") or "").split("@")[0] or subject
    base = NOT_ALLOWED.sub("-", wanted)[:140] or "user"
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _apply(user: User, claims: Mapping[str, Any], subject: str, role: str) -> bool:
    """Set what the IdP is the source of; returns whether anything changed."""
    wanted = {
        "oidc_subject": subject,
        "role": Role.ADMIN if user.is_superuser else role,
        "email": str(claims.get("email") or user.email)[:254],
        "first_name": str(claims.get("given_name") or user.first_name)[:150],
        "last_name": str(claims.get("family_name") or user.last_name)[:150],
    }
    changed = False
    for name, value in wanted.items():
        if getattr(user, name) != value:
            if name == "role" and user.pk is not None:
                logger.info("single sign-on: %s's role is now %s (groups claim)", user.username, value)
            setattr(user, name, value)
            changed = True
    return changed


def _apply_teams(user: User, teams: list[str]) -> None:
    """Team membership from the groups claim, again at every login, when PORTAL_OIDC_GROUP_MAP names
    any team: the first mapped team (created at its first use, with no limits until an admin sets
    them), or no team when none of the person's groups maps to one (a removed group takes them out).
    A map without teams leaves membership to the admins (the user page)."""
    if not any(rule["team"] for rule in settings.PORTAL_OIDC_GROUP_MAP.values()):
        return
    team = None
    if teams:
        team, created = Team.objects.get_or_create(name=teams[0][:100])
        if created:
            logger.info("single sign-on created the team %s (no limits until an admin sets them)", team.name)
        if len(teams) > 1:
            logger.warning(
                "single sign-on: %s's groups map to the teams %s; a user is in one team, so %s",
                user.username,
                ", ".join(teams),
                team.name,
            )
    if user.team_id != (team.pk if team is not None else None):
        logger.info("single sign-on: %s's team is now %s (groups claim)", user.username, team or "none")
        user.team = team
        user.save(update_fields=["team"])
