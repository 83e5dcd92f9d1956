"""The provider's endpoints: its discovery document (`<issuer>/.well-known/openid-configuration`),
fetched at the first sign-in and kept for an hour per process, or the PORTAL_OIDC_*_ENDPOINT
settings, which win entry by entry."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

logger = logging.getLogger(__name__)
KEEP_SECONDS = 3600.0

_lock = threading.Lock()
_documents: dict[str, tuple[float, dict[str, Any]]] = {}


class DiscoveryError(Exception):
    """The provider's discovery document cannot be had or is not one."""


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    userinfo_endpoint: str
    jwks_uri: str


def provider() -> Provider:
    explicit = {
        "authorization_endpoint": settings.OIDC_OP_AUTHORIZATION_ENDPOINT,
        "token_endpoint": settings.OIDC_OP_TOKEN_ENDPOINT,
        "userinfo_endpoint": settings.OIDC_OP_USER_ENDPOINT,
        "jwks_uri": settings.OIDC_OP_JWKS_ENDPOINT,
    }
    issuer = settings.PORTAL_OIDC_ISSUER
    document = _document(issuer) if issuer and not all(explicit.values()) else {}
    endpoints = {name: explicit[name] or document.get(name) or "" for name in explicit}
    missing = [name for name, url in endpoints.items() if not url]
    if missing:
        raise DiscoveryError(f"the discovery document of {issuer} has no {', '.join(missing)}")
    return Provider(issuer=issuer, **endpoints)


def _document(issuer: str) -> dict[str, Any]:
    now = time.monotonic()
    with _lock:
        kept = _documents.get(issuer)
        if kept and now - kept[0] < KEEP_SECONDS:
            return kept[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = httpx.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise DiscoveryError(f"{url}: {exc}") from exc
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
        # OpenID Connect Discovery 1.0 §4.3: the document must name the issuer it was fetched for.
        named = document.get("issuer") if isinstance(document, dict) else None
        raise DiscoveryError(f"{url} names the issuer {named!r}")
    with _lock:
        _documents[issuer] = (now, document)
    return document


def forget() -> None:
    """Drop kept documents (tests start a new provider per test)."""
    with _lock:
        _documents.clear()
