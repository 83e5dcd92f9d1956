"""Personal API tokens for scripts (REST API). Shown once, stored as a keyed hash."""

from __future__ import annotations

from django.utils import timezone

from .models import ApiToken

TOKEN_PREFIX = ApiToken.PREFIX


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
