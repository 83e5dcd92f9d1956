"""Request stage 1: who is calling. The presented key, checked against the snapshot (`cache`)."""

from __future__ import annotations

import ipaddress
import time

from django.conf import settings
from django.http.cookie import parse_cookie

from keys.models import KEY_PREFIX
from keys.playground import credential
from keys.services import clean_presented_key
from portal.secrets import keyed_hash

from .cache import KeyInfo, Network, run_db, snapshot
from .http import GatewayError, Request


def presented_key(headers: dict[str, str]) -> str:
    auth = headers.get("authorization")
    if auth:
        return clean_presented_key(auth)
    return clean_presented_key(headers.get("x-api-key") or headers.get("api-key"))


_CREDENTIAL_HEADERS = (b"authorization", b"x-api-key", b"api-key")


def _ambiguous(raw: list[tuple[bytes, bytes]]) -> bool:
    """One credential header sent twice with different keys (`Request.headers` keeps the last)."""
    seen: dict[bytes, bytes] = {}
    for name, value in raw:
        if name in _CREDENTIAL_HEADERS and seen.setdefault(name, value.strip()) != value.strip():
            return True
    return False


def cookies(headers: dict[str, str]) -> dict[str, str]:
    """The request's cookies, parsed as Django parses them (lenient, like browsers)."""
    return parse_cookie(headers.get("cookie", ""))


async def playground_key(req: Request) -> str:
    """The stored hash of the playground key of the signed-in browser session that sent this
    request (`keys.playground.credential`), or a 401 saying why not."""
    jar = cookies(req.headers)
    value, session_key = jar.get(credential.COOKIE, ""), jar.get(settings.SESSION_COOKIE_NAME, "")
    if not value:
        raise GatewayError(
            401, "Missing playground credential. Reload the playground.", code="missing_playground_credential"
        )
    try:
        claims = credential.verify(value, session_key)
        digest = await run_db(credential.live_key_hash, claims, session_key)
    except credential.CredentialError as refused:
        raise GatewayError(401, str(refused), code="invalid_playground_credential") from None
    req.playground = True
    return digest


async def authenticate(req: Request) -> KeyInfo:
    """The caller's key, or a 401 that never echoes what was presented. Without a key, the
    playground's session-bound credential (`X-Portal-Playground` and its cookie) stands for the
    user's playground key; every check below applies to it alike."""
    if len(req.headers) < len(raw := req.scope["headers"]) and _ambiguous(raw):  # (a header name came twice)
        raise GatewayError(
            400,
            "The request carries two different API keys in one header; send one.",
            code="ambiguous_api_key",
        )
    value = presented_key(req.headers)
    if not value and credential.HEADER in req.headers:
        key = await snapshot.get_key(await playground_key(req))
        if key is None:
            raise GatewayError(401, "The playground key is gone. Reload the playground.", code="invalid_api_key")
        req.reveal_replica = key.owner_is_admin
        return _checked(req, key)
    if not value:
        raise GatewayError(
            401,
            "Missing API key. Send it as `Authorization: Bearer <key>` or `x-api-key: <key>`.",
            code="missing_api_key",
        )
    key = None
    if value.startswith(KEY_PREFIX) and len(value) <= 200:
        digest = keyed_hash(value)
        key = snapshot.fresh_key(digest)
        if key is None:
            key = await snapshot.get_key(digest)
    if key is None:
        raise GatewayError(401, "Invalid API key. Check the key you copied from the portal.", code="invalid_api_key")
    return _checked(req, key)


def _checked(req: Request, key: KeyInfo) -> KeyInfo:
    req.key_prefix = key.prefix  # the access log's `key=` on every path that authenticates (never the key)
    if key.revoked:
        raise GatewayError(401, "This API key has been revoked.", code="key_revoked")
    if key.expires_at is not None and key.expires_at <= time.time():
        raise GatewayError(401, "This API key has expired.", code="key_expired")
    if not key.owner_active:
        raise GatewayError(401, "The account that owns this API key is disabled.", code="account_disabled")
    if key.networks:
        ip = req.client_ip
        if not ip or not _ip_allowed(ip, key.networks):
            raise GatewayError(
                403, f"This API key may not be used from {ip or 'an unknown address'}.", code="ip_not_allowed"
            )
    return key


def _ip_allowed(ip: str, networks: tuple[Network, ...]) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr.version == n.version and addr in n for n in networks)
