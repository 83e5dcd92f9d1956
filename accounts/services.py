"""User management workflows shared by the web UI, the REST API and `portal up`."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.db import transaction

from portal import audit
from portal.choices import AuditAction


def generate_password() -> str:
    return secrets.token_urlsafe(12)


@transaction.atomic
def reset_password(user, *, actor=None) -> str:
    """Set a new random password and return it (shown once to the admin)."""
    password = generate_password()
    user.set_password(password)
    user.save(update_fields=["password"])
    audit.record(AuditAction.ACTION, user, message="password reset", actor=actor)
    return password


def set_active(user, active: bool) -> None:
    """Deactivate or reactivate. A deactivated user's keys stop working (Key.is_active checks the owner)."""
    if user.is_active != active:
        user.is_active = active
        user.save(update_fields=["is_active"])


def create_user(*, username: str, role: str, email: str = "", password: str | None = None, **fields):
    """Create a user; returns (user, password) — the password is generated when not given."""
    User = get_user_model()
    plain = password or generate_password()
    user = User.objects.create_user(username=username, email=email, password=plain, role=role, **fields)
    return user, plain
