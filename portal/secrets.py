"""The one place that encrypts and decrypts secrets at rest (upstream API keys, SSH private keys).

Fernet via MultiFernet: `PORTAL_ENCRYPTION_KEYS` lists the newest key first, then older ones that
can still decrypt. `manage.py rotate_encryption_keys` re-encrypts every stored secret with the newest.
"""

from __future__ import annotations

import functools
import hashlib
import hmac

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from .hot import hot

PREFIX = "fernet:"


@functools.cache
def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(k) for k in settings.PORTAL_ENCRYPTION_KEYS])


def reset_cache() -> None:
    """Forget the key set (tests and key rotation change settings at run time)."""
    _fernet.cache_clear()


def encrypt(plaintext: str) -> str:
    if plaintext == "":
        return ""
    return PREFIX + _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    if not token:
        return ""
    if not token.startswith(PREFIX):
        raise ValueError("value is not an encrypted secret")
    try:
        return _fernet().decrypt(token[len(PREFIX) :].encode()).decode()
    except InvalidToken:
        raise ValueError(
            "secret cannot be decrypted with PORTAL_ENCRYPTION_KEYS (was a key removed too early?)"
        ) from None


def encrypt_bytes(data: bytes) -> bytes:
    """Encrypt and authenticate a blob (files the portal keeps in its data folder)."""
    return _fernet().encrypt(data)


def decrypt_bytes(token: bytes) -> bytes:
    """The blob `encrypt_bytes` made; ValueError when no key opens it or it was changed."""
    try:
        return _fernet().decrypt(token)
    except InvalidToken:
        raise ValueError("blob cannot be decrypted with PORTAL_ENCRYPTION_KEYS") from None


def rotate(token: str) -> str:
    """Re-encrypt with the newest key; unchanged if empty."""
    if not token:
        return token
    return PREFIX + _fernet().rotate(token[len(PREFIX) :].encode()).decode()


# (the hash secret, an HMAC keyed with it and fed nothing): each hash copies it, which skips
# OpenSSL's key setup (~8 k of the ~26 k instructions of a new HMAC; every gateway request hashes its key).
_keyed: tuple[str, hmac.HMAC] | None = None


def keyed_hash(value: str) -> str:
    """HMAC-SHA256 of a bearer secret (developer key, API token) with the server's hash secret."""
    global _keyed
    secret = hot.PORTAL_KEY_HASH_SECRET
    keyed = _keyed
    if keyed is None or keyed[0] != secret:  # a changed secret (tests) is a new key
        keyed = _keyed = (secret, hmac.new(secret.encode(), digestmod=hashlib.sha256))
    mac = keyed[1].copy()
    mac.update(value.encode())
    return mac.hexdigest()
