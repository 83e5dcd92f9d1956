"""Request stage 1: who is calling. The presented key, checked against the snapshot (`cache`)."""

from __future__ import annotations

import ipaddress
import time

from keys.models import KEY_PREFIX
from keys.services import clean_presented_key
from portal.secrets import keyed_hash

from .cache import KeyInfo, Network, snapshot
from .http import GatewayError, Request


def presented_key(headers: dict[str, str]) -> str:
    auth = headers.get("authorization")
    if auth:
        return clean_presented_key(auth)
    return clean_presented_key(headers.get("x-api-key") or headers.get("api-key"))


async def authenticate(req: Request) -> KeyInfo:
    """The caller's key, or a 401 that never echoes what was presented."""
    value = presented_key(req.headers)
    if not value:
        raise GatewayError(
            401,
            "Missing API key. Send it as `Authorization: Bearer <key>` or `x-api-key: <key>`.",
            code="missing_api_key",
        )
    key = None
    if value.startswith(KEY_PREFIX) and len(value) <= 200:
        key = await snapshot.get_key(keyed_hash(value))
    if key is None:
        raise GatewayError(401, "Invalid API key. Check the key you copied from the portal.", code="invalid_api_key")
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
