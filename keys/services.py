"""Issuing, verifying, revoking and rotating developer keys."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from channels.models import Model

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


def validate_key_settings(
    owner: User,
    *,
    limits: dict[str, Any] | None = None,
    allowed_models: Iterable[Model] | None = None,
    ip_allowlist: str | Iterable[object] | None = None,
    expires_at: datetime.datetime | None = None,
) -> dict[str, Any]:
    """Check a key's settings against its owner; return cleaned values or raise ValidationError
    with field errors. Used by both the key form and the key serializer, so the rules are one."""
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, Any] = {}
    for name, value in (limits or {}).items():
        if value in (None, ""):
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
        cleaned[name] = number
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
