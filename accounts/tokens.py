"""Personal API tokens for scripts (REST API). Shown once, stored as a keyed hash."""

from __future__ import annotations

import hmac
import secrets as pysecrets

from django.utils import timezone

from portal.secrets import keyed_hash

from .models import ApiToken

TOKEN_PREFIX = "gpt-"  # noqa: S105 (a public prefix, not a secret)


def issue_token(*, user, name: str, expires_at=None) -> tuple[ApiToken, str]:
    plaintext = TOKEN_PREFIX + pysecrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=plaintext[: len(TOKEN_PREFIX) + 6],
        last_four=plaintext[-4:],
        token_hash=keyed_hash(plaintext),
        expires_at=expires_at,
    )
    return token, plaintext


def verify_token(presented: str) -> ApiToken | None:
    value = (presented or "").strip()
    if not value.startswith(TOKEN_PREFIX) or len(value) > 200:
        return None
    digest = keyed_hash(value)
    token = ApiToken.objects.select_related("user").filter(token_hash=digest).first()
    if token is None or not hmac.compare_digest(token.token_hash, digest):
        return None
    if not token.is_active or not token.user.is_active:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


def revoke_token(token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at", "updated"])
