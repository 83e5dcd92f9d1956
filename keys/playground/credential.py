"""The playground's credential: a signed, short-lived value in an HttpOnly cookie, bound to the
Django session that asked for it (ARCHITECTURE.md, "The playground"; SECURITY.md).

The page never holds a key. `mint` signs (user, the user's playground key, a hash of the session
key) for `PLAYGROUND_CREDENTIAL_SECONDS`; the cookie is HttpOnly, SameSite=Strict and scoped to the
gateway's `/v1/` paths. The gateway accepts it only on a request that also carries the
`X-Portal-Playground` header (a cross-site page cannot send it without a CORS preflight the gateway
never grants) and the session cookie it was minted for, and checks that session in the database on
every request (`live_key_hash`): logging out, a password change or an expired session ends it at
once, not at the end of its lifetime. Copied elsewhere without the session it is worthless.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from django.conf import settings
from django.core import signing

COOKIE = "portal_playground"
COOKIE_PATH = "/v1/"
HEADER = "x-portal-playground"  # the request header the page sends with the cookie
SALT = "keys.playground.credential"


class CredentialError(Exception):
    """Why a presented credential is refused (a sentence for the 401; never the credential)."""


@dataclass(frozen=True, slots=True)
class Claims:
    user_id: int
    key_id: int
    session: str  # sha256 of the session key it is bound to


def lifetime() -> int:
    return int(settings.PLAYGROUND_CREDENTIAL_SECONDS)


def session_digest(session_key: str) -> str:
    return hashlib.sha256(session_key.encode()).hexdigest()


def mint(*, user_id: int, key_id: int, session_key: str) -> str:
    """The cookie value: signed (SECRET_KEY, this module's salt) and time-stamped."""
    return signing.dumps({"u": user_id, "k": key_id, "s": session_digest(session_key)}, salt=SALT)


def verify(value: str, session_key: str) -> Claims:
    """The claims of a credential minted for `session_key` less than its lifetime ago."""
    try:
        data = signing.loads(value, salt=SALT, max_age=lifetime())
    except signing.SignatureExpired:
        raise CredentialError("The playground session expired. Reload the playground.") from None
    except signing.BadSignature:
        raise CredentialError("Invalid playground credential. Reload the playground.") from None
    try:
        claims = Claims(int(data["u"]), int(data["k"]), str(data["s"]))
    except (KeyError, TypeError, ValueError):
        raise CredentialError("Invalid playground credential. Reload the playground.") from None
    if not session_key or not hmac.compare_digest(claims.session, session_digest(session_key)):
        raise CredentialError("The playground credential belongs to another sign-in. Reload the playground.")
    return claims


def live_key_hash(claims: Claims, session_key: str) -> str:
    """The stored hash of the playground key the claims name, if the session they are bound to is
    still signed in as that user (the check `django.contrib.auth.get_user` makes: the session's
    user and its password hash). Synchronous: the gateway runs it on its database thread."""
    from importlib import import_module

    from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model

    from keys.models import Key

    engine = import_module(settings.SESSION_ENGINE)
    data = engine.SessionStore(session_key).load()
    if str(data.get(SESSION_KEY, "")) != str(claims.user_id):
        raise CredentialError("You are signed out. Sign in again to use the playground.")
    user = get_user_model().objects.filter(pk=claims.user_id, is_active=True).first()
    if user is None:
        raise CredentialError("You are signed out. Sign in again to use the playground.")
    stored = str(data.get(HASH_SESSION_KEY, ""))
    if not hmac.compare_digest(stored, user.get_session_auth_hash()):
        raise CredentialError("You are signed out. Sign in again to use the playground.")
    digest = Key.objects.filter(pk=claims.key_id, owner_id=claims.user_id).values_list("key_hash", flat=True).first()
    if digest is None:
        raise CredentialError("The playground key is gone. Reload the playground.")
    return digest
