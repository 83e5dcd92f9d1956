"""Authentication backends: OpenID Connect (mozilla-django-oidc's code flow, with the endpoints
from discovery and the ID token's audience and issuer checked) and the local password, which
PORTAL_PASSWORD_LOGIN_ADMINS_ONLY keeps for admins only. django-axes runs before both."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from . import discovery, enabled, services
from .views import callback_url

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser, _User

    from ..models import User

logger = logging.getLogger(__name__)


class PasswordBackend(ModelBackend):
    """Django's username + password, refused to non-admins when password login is admins-only
    (the same "wrong username or password" answer, counted by django-axes like any other)."""

    def user_can_authenticate(self, user: _User | AnonymousUser | None) -> bool:
        if not super().user_can_authenticate(user):
            return False
        return not settings.PORTAL_PASSWORD_LOGIN_ADMINS_ONLY or bool(getattr(user, "is_admin", False))


class OidcBackend(OIDCAuthenticationBackend):  # type: ignore[misc]  # mozilla-django-oidc ships no types
    """The callback's code → tokens → verified claims → `services.sign_in`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Instantiated for every authenticate() call, password logins included: read nothing here.
        self.UserModel = get_user_model()
        self.issuer = ""

    def authenticate(self, request: HttpRequest, **kwargs: Any) -> User | None:
        # Only the callback view passes a nonce; a password login never reaches the provider.
        if request is None or "nonce" not in kwargs or not enabled():
            return None
        try:
            op = discovery.provider()
        except discovery.DiscoveryError as exc:
            logger.warning("single sign-on: discovery failed: %s", exc)
            return None
        self.issuer = op.issuer
        self.OIDC_OP_TOKEN_ENDPOINT = op.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = op.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = op.jwks_uri
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        try:
            user: User | None = super().authenticate(request, **kwargs)
            return user
        except services.SignInRefused as exc:
            request.sso_refusal = str(exc)  # type: ignore[attr-defined]  # read by the callback view
            return None
        except (requests.RequestException, jwt.PyJWTError, SuspiciousOperation, ValueError, KeyError) as exc:
            # A code used twice, a provider that is down, a token that does not verify: the person
            # gets the login page with a message, the log gets why.
            logger.warning("single sign-on failed: %s: %s", type(exc).__name__, exc)
            return None

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        # The redirect URI is the public URL's, never one built from the request's Host header.
        payload["redirect_uri"] = callback_url(self.request)
        token: dict[str, Any] = super().get_token(payload)
        return token

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        if "nonce" in kwargs:  # the ID token (userinfo as a JWT comes without one)
            audience = payload.get("aud")
            audiences = [audience] if isinstance(audience, str) else list(audience or [])
            if self.OIDC_RP_CLIENT_ID not in audiences:
                raise SuspiciousOperation(f"ID token is for {audiences}, not this client")
            if self.issuer and str(payload.get("iss", "")).rstrip("/") != self.issuer:
                raise SuspiciousOperation(f"ID token is from {payload.get('iss')!r}, not {self.issuer!r}")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User:
        userinfo: dict[str, Any] = self.get_userinfo(access_token, id_token, payload)
        if str(userinfo.get("sub", "")) != str(payload.get("sub", "")):
            # OpenID Connect Core §5.3.2: userinfo for another subject must not be used.
            raise SuspiciousOperation("userinfo is about another subject than the ID token")
        return services.sign_in({**payload, **userinfo})

    def get_user(self, user_id: int) -> AbstractBaseUser | None:
        # mozilla's get_user would keep a deactivated user's session alive; Django's does not.
        return ModelBackend.get_user(self, user_id)
