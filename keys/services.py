"""Issuing, verifying, revoking and rotating developer keys."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext

from channels.models import Model
from portal.forms import LIMIT_LABELS

from .models import Key

if TYPE_CHECKING:
    from accounts.models import User


def clean_presented_key(raw: str | None) -> str:
    """Keys pasted with whitespace, a newline or a `Bearer ` prefix still work."""
    value = (raw or "").strip()
    if value.lower().startswith("bearer "):
        value = value[7:].strip()
    return value


@transaction.atomic
def issue_key(*, owner: User, name: str, allowed_models: Iterable[Model] = (), **fields: Any) -> tuple[Key, str]:
    """Create a key and return it with its plaintext, which is never stored."""
    stored, plaintext = Key.mint()
    defaults = {k: v for k, v in (owner.key_defaults or {}).items() if k in Key.LIMIT_FIELDS}
    defaults.update(fields)
    key = Key.objects.create(
        owner=owner,
        name=name,
        **stored,
        **defaults,
    )
    models = list(allowed_models)
    if models:
        key.allowed_models.set(models)
    return key, plaintext


def find_key(presented: str) -> Key | None:
    """The active or inactive key matching `presented`, or None. Constant-time final compare."""
    return Key.find(clean_presented_key(presented), Key.objects.select_related("owner"))


def verify_key(presented: str) -> Key | None:
    """The key if it is usable now (not revoked, not expired, owner active), else None."""
    key = find_key(presented)
    return key if key is not None and key.is_active else None


def revoke_key(key: Key) -> Key:
    key.revoke()
    return key


@transaction.atomic
def rotate_key(key: Key, *, grace: datetime.timedelta | None = None) -> tuple[Key, str]:
    """Issue a replacement with the same settings; the old key stops now or after `grace`."""
    old_name = key.name
    now = timezone.now()
    # The replacement keeps a still-future expiry: rotating must not turn a temporary key permanent.
    keep_expiry = key.expires_at if key.expires_at is not None and key.expires_at > now else None
    # Free the active name for the new key: the old one keeps working under a suffixed name.
    # Unique per key and second, so rotating again within a minute cannot collide.
    suffix = f" (rotated {now:%Y-%m-%d %H:%M:%S} #{key.pk})"
    key.name = old_name[: 100 - len(suffix)] + suffix
    if grace:
        ends = now + grace
        key.expires_at = min(key.expires_at, ends) if key.expires_at else ends
    else:
        key.revoked_at = now
    key.save()
    new, plaintext = issue_key(
        owner=key.owner,
        name=old_name,
        allowed_models=key.allowed_models.all(),
        **key.limits(),
        ip_allowlist=list(key.ip_allowlist),
        expires_at=keep_expiry,
        rotated_from=key,
        client=key.client,
        local_only=key.local_only,
        admin_ceilings=dict(key.admin_ceilings or {}),
    )
    return new, plaintext


# --- validation shared by the web forms and the REST API --------------------------------------

MAX_CIDR_ENTRIES = 50


def normalize_cidrs(entries: str | Iterable[object] | None) -> list[str]:
    """Canonical CIDR strings, or ValueError naming the bad entry."""
    if isinstance(entries, str):
        entries = [e for e in entries.replace(",", "\n").split()]
    result: list[str] = []
    for raw in entries or []:
        text = str(raw).strip()
        if not text:
            continue
        try:
            result.append(str(ipaddress.ip_network(text, strict=False)))
        except ValueError:
            raise ValueError(f"{text!r} is not an IP address or CIDR block (e.g. 10.0.0.0/8).") from None
    if len(result) > MAX_CIDR_ENTRIES:
        raise ValueError(f"At most {MAX_CIDR_ENTRIES} entries.")
    return list(dict.fromkeys(result))


# In `Key.admin_ceilings`: an admin set "Local channels only", so nobody else may clear it.
LOCAL_ONLY_LOCK = "local_only"


def validate_key_settings(
    owner: User,
    *,
    editor: User | None = None,
    key: Key | None = None,
    limits: dict[str, Any] | None = None,
    allowed_models: Iterable[Model] | None = None,
    ip_allowlist: str | Iterable[object] | None = None,
    expires_at: datetime.datetime | None = None,
    local_only: bool | None = None,
) -> dict[str, Any]:
    """Check a key's settings against its owner; return cleaned values or raise ValidationError
    with field errors. Used by both the key form and the key serializer, so the rules are one.

    Limits have an owner: what an admin (`editor`) sets on a key becomes its ceiling
    (`cleaned["admin_ceilings"]`); anyone else editing `key` may lower such a limit, never raise or
    clear it. The owner's own limits and their team's cap every key of theirs. A team lead editing a
    member's key is "anyone else": the admin's ceilings bind them too. "Local channels only" works
    the same way: set by an admin (`admin_ceilings["local_only"]`), only an admin lifts it."""
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, Any] = {}
    by_admin = editor is not None and editor.is_admin
    ceilings: dict[str, int] = dict(key.admin_ceilings or {}) if key is not None else {}
    team = owner.team
    for name, value in (limits or {}).items():
        ceiling_by_admin = None if by_admin else ceilings.get(name)
        if value in (None, ""):
            if ceiling_by_admin is not None:
                errors.setdefault(name, []).append(
                    f"An admin set this limit to {ceiling_by_admin:,}; you can lower it but not remove it."
                )
            cleaned[name] = None
            continue
        try:
            number = int(value)
        except (TypeError, ValueError):
            errors.setdefault(name, []).append("Enter a whole number, or leave blank for unlimited.")
            continue
        if number < 1:
            errors.setdefault(name, []).append("Must be at least 1 (leave blank for unlimited).")
        elif number > 10**12:
            errors.setdefault(name, []).append("That is more than 10^12; leave blank for unlimited.")
        ceiling = getattr(owner, name, None)
        if ceiling is not None and number > ceiling:
            errors.setdefault(name, []).append(f"Cannot exceed the owner's limit of {ceiling:,}.")
        team_ceiling = getattr(team, name, None) if team is not None else None
        if team_ceiling is not None and number > team_ceiling:
            errors.setdefault(name, []).append(f"Cannot exceed the team {team}'s limit of {team_ceiling:,}.")
        if ceiling_by_admin is not None and number > ceiling_by_admin:
            errors.setdefault(name, []).append(
                f"An admin set this limit to {ceiling_by_admin:,}; you can lower it but not raise it."
            )
        cleaned[name] = number
    if by_admin and limits:
        for name in limits:
            if cleaned.get(name) is None:
                ceilings.pop(name, None)
            else:
                ceilings[name] = cleaned[name]
        cleaned["admin_ceilings"] = ceilings
    if local_only is not None:
        if by_admin:
            if local_only:
                ceilings[LOCAL_ONLY_LOCK] = 1
            else:
                ceilings.pop(LOCAL_ONLY_LOCK, None)
            cleaned["admin_ceilings"] = ceilings
        elif not local_only and ceilings.get(LOCAL_ONLY_LOCK):
            errors.setdefault("local_only", []).append(
                "An admin restricted this key to local channels; only an admin can lift it."
            )
        cleaned["local_only"] = local_only
    if allowed_models is not None:
        models = list(allowed_models)
        permitted = set(Model.objects.usable_by(owner).values_list("pk", flat=True))
        refused = sorted(str(m) for m in models if m.pk not in permitted)
        if refused:
            errors.setdefault("allowed_models", []).append(f"{owner.username} may not use: {', '.join(refused)}.")
        cleaned["allowed_models"] = models
    if ip_allowlist is not None:
        try:
            cleaned["ip_allowlist"] = normalize_cidrs(ip_allowlist)
        except ValueError as exc:
            errors.setdefault("ip_allowlist", []).append(str(exc))
    if expires_at is not None:
        if expires_at <= timezone.now():
            errors.setdefault("expires_at", []).append("The expiry must be in the future.")
        cleaned["expires_at"] = expires_at
    if errors:
        raise ValidationError(errors)
    return cleaned


@dataclass(frozen=True)
class EffectiveLimit:
    """One limit of a key as the gateway applies it, and who set the value that binds."""

    name: str
    label: str
    value: int | None  # what binds this key now; None: unlimited
    source: str  # "key" | "user" | "team" | "" (unlimited)
    set_by: str  # who set the binding value, for people: "an admin", "alice", ""
    key_value: int | None
    user_value: int | None
    admin_ceiling: int | None  # the key's own ceiling set by an admin (the owner may only lower it)
    team_value: int | None = None  # the owner's team's, shared by all its members

    @property
    def locked_for_owner(self) -> bool:
        return self.admin_ceiling is not None


def effective_limits(key: Key) -> list[EffectiveLimit]:
    """Each limit of `key`: the key's own value, its owner's (shared by all their keys), their
    team's (shared by all its members), and the smallest, which is what binds this key."""
    ceilings = key.admin_ceilings or {}
    owner = key.owner
    team = owner.team
    user_ceilings = owner.admin_ceilings or {}
    rows = []
    for name, label in LIMIT_LABELS.items():
        own, user = getattr(key, name), getattr(owner, name)
        shared = getattr(team, name) if team is not None else None
        ceiling = ceilings.get(name)
        candidates = [(v, src) for v, src in ((own, "key"), (user, "user"), (shared, "team")) if v is not None]
        if not candidates:
            value, source, set_by = None, "", ""
        else:
            value, source = min(candidates, key=lambda c: c[0])  # ties: the key's own value first
            if source == "team":
                set_by = gettext("an admin")
            elif source == "user":
                set_by = (
                    gettext("a team lead")
                    if team is not None and user_ceilings.get(name) != user
                    else gettext("an admin")
                )
            else:
                set_by = gettext("an admin") if ceiling is not None and own == ceiling else owner.username
        rows.append(EffectiveLimit(name, str(label), value, source, set_by, own, user, ceiling, shared))
    return rows
