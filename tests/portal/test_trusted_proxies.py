"""portal.asgi.TrustedProxies: X-Forwarded-For and X-Forwarded-Proto count only from a trusted peer,
and then the client is the right-most address that is not a trusted proxy."""

from __future__ import annotations

import asyncio

import pytest

from portal.asgi import TrustedProxies


def seen_by_the_app(peer: str, headers: dict[str, str]) -> tuple[str, str]:
    seen = {}

    async def app(scope, receive, send):
        seen["client"], seen["scheme"] = scope["client"][0], scope["scheme"]

    scope = {
        "type": "http",
        "scheme": "http",
        "client": (peer, 40000),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    asyncio.run(TrustedProxies(app)(scope, None, None))
    return seen["client"], seen["scheme"]


FORWARDED = {"X-Forwarded-For": "10.1.1.1, 203.0.113.5", "X-Forwarded-Proto": "https"}


@pytest.mark.parametrize("trusted", [[], ["192.0.2.0/24"]])
def test_an_untrusted_peer_cannot_choose_its_address_or_scheme(settings, trusted):
    settings.PORTAL_TRUSTED_PROXIES = trusted
    assert seen_by_the_app("198.51.100.20", FORWARDED) == ("198.51.100.20", "http")


def test_a_trusted_proxy_is_believed_up_to_the_first_untrusted_hop(settings):
    settings.PORTAL_TRUSTED_PROXIES = ["172.30.250.0/24"]
    assert seen_by_the_app("172.30.250.3", FORWARDED) == ("203.0.113.5", "https")
    # Two proxies in a row, both trusted: the address before them counts.
    settings.PORTAL_TRUSTED_PROXIES = ["172.30.250.0/24", "203.0.113.5"]
    assert seen_by_the_app("172.30.250.3", FORWARDED) == ("10.1.1.1", "https")
