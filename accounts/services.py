"""User management workflows shared by the web UI, the REST API and `portal up`."""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal import audit
from portal.choices import AuditAction

from .choices import Role
from .models import ApiToken


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


def ensure_first_admin(stdout) -> None:
    """Create `admin` when no admin exists. Password from PORTAL_ADMIN_PASSWORD or printed once."""
    User = get_user_model()
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


def issue_token(*, user, name: str, expires_at=None) -> tuple[ApiToken, str]:
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
