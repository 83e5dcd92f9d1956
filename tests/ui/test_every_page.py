"""Every HTML page in the URL map (including other apps'): anonymous → login, developers never see
an admin section. A new page that forgets its check fails here."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

pytestmark = pytest.mark.django_db

# Public on purpose: health for load balancers, the login form, and the client installers, which hold
# no secret (the one-time token on their command line selects the bundle).
PUBLIC = {"login", "logout", "connect_install_sh", "connect_install_ps1"}
# Single sign-on: the two ends of the redirect to the identity provider are where anonymous users log in.
PUBLIC |= {"oidc_authentication_init", "oidc_authentication_callback"}
# The language switcher works before login too (tests/portal/test_i18n.py checks it).
PUBLIC |= {"set_language"}
ADMIN_PREFIXES = (
    "hosts/",
    "channels/",
    "models/",
    "users/",
    "teams/",
    "audit-log/",
    "deployments/",
    "jobs/",
    "keys/all/",
    "gpu-hours/",
    "usage/requests/",
)
SAMPLE_ARGS = {"int": "1", "str": "x", "slug": "x", "path": "x"}


def web_routes():
    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                yield prefix + str(p.pattern), p.name

    for route, name in walk(get_resolver().url_patterns):
        if route.startswith("api/") or name in PUBLIC:
            continue
        url = "/" + re.sub(r"<(?:(\w+):)?\w+>", lambda m: SAMPLE_ARGS.get(m.group(1) or "str", "x"), route)
        yield url, name


def test_the_url_map_has_the_pages_we_check():
    names = {name for _url, name in web_routes()}
    assert {"dashboard", "key_list", "host_list", "user_list", "audit_log"} <= names


@pytest.mark.parametrize("url,name", list(web_routes()))
def test_anonymous_gets_the_login_page_or_nothing(client, url, name):
    for method in (client.get, client.post):
        response = method(url)
        if response.status_code == 302:
            assert response["Location"].startswith("/login/"), (url, response["Location"])
        else:
            # POST-only / GET-only endpoints may refuse the method first; nothing else is acceptable.
            assert response.status_code in (401, 403, 405), (url, method.__name__, response.status_code)


def test_developers_never_get_an_admin_page(client, alice, host, channel, model):
    client.force_login(alice)
    for url, _name in web_routes():
        if url.lstrip("/").startswith(ADMIN_PREFIXES):
            status = client.get(url).status_code
            assert status in (403, 404, 405), (url, status)
