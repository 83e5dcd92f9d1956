"""Single sign-on end to end: chromium clicks "Sign in with …" on the portal, logs in at a real
OpenID Connect provider (django-oauth-toolkit in its own process, tests/fakes/oidc_provider.py)
and comes back through the callback. The first login creates the user with the role their groups
map to; a group removed at the provider demotes them at the next login; with password login for
admins only, a developer's right password is refused while the admin's still works. The portal's
Content-Security-Policy reports no violation through the redirects."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from accounts.choices import Role
from accounts.models import AuditLog
from accounts.sso import discovery
from tests.browser.test_security_in_browser import RECORD_VIOLATIONS, log_in, violations
from tests.fakes.oidc_provider import OidcProvider

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

User = get_user_model()
GROUP_MAP = {
    "portal-admins": {"role": "admin", "team": ""},
    "portal-users": {"role": "developer", "team": ""},
    "ml-eng": {"role": "", "team": "ml"},
}


@pytest.fixture
def idp(live_server, settings):
    with OidcProvider(redirect_uri=live_server.url + "/oidc/callback/") as provider:
        settings.PORTAL_PUBLIC_URL = live_server.url
        settings.PORTAL_OIDC_ISSUER = provider.issuer
        settings.OIDC_RP_CLIENT_ID = provider.client_id
        settings.OIDC_RP_CLIENT_SECRET = provider.client_secret
        settings.OIDC_RP_SCOPES = "openid email profile groups"
        settings.PORTAL_OIDC_NAME = "Example IdP"
        settings.PORTAL_OIDC_GROUP_MAP = GROUP_MAP
        settings.PORTAL_OIDC_DEFAULT_ROLE = "none"
        discovery.forget()
        yield provider
    discovery.forget()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def sign_in_with_idp(page, base: str, idp: OidcProvider, username: str | None = None, password: str = "") -> None:
    """From the portal's login page: the button, then the provider's form (unless the provider
    still has a session, when it sends the browser straight back)."""
    page.goto(base + "/login/")
    page.click("#sso-login")
    if username is not None:
        page.wait_for_url(f"{idp.root_url}/accounts/login/**")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("#idp-login")


def log_out(page) -> None:
    page.click("text=Log out")
    page.wait_for_url("**/login/")


def test_first_login_creates_the_user_and_a_removed_group_demotes(page, live_server, idp, caplog, screenshots):
    sub = idp.add_user("carol", "carol-at-idp", email="carol@example.com", groups=["portal-admins", "ml-eng"])
    assert not User.objects.filter(username="carol").exists()

    page.goto(live_server.url + "/login/")
    assert page.inner_text("#sso-login") == "Sign in with Example IdP"
    page.screenshot(path=f"{screenshots}/sso-login.png")
    seen = violations(page)
    with caplog.at_level("WARNING", logger="accounts.sso.services"):
        sign_in_with_idp(page, live_server.url, idp, "carol", "carol-at-idp")
        page.wait_for_url(live_server.url + "/")
    seen += violations(page)

    carol = User.objects.get(username="carol")
    assert (carol.role, carol.oidc_subject, carol.email) == (Role.ADMIN, sub, "carol@example.com")
    assert not carol.has_usable_password()
    assert "carol · admin" in page.inner_text("nav")
    assert carol.team is not None and carol.team.name == "ml"  # ml-eng: the team, created at first use

    # The IdP's admin takes carol out of portal-admins; her next login makes her a developer.
    idp.set_groups("carol", ["portal-users"])
    log_out(page)
    sign_in_with_idp(page, live_server.url, idp)  # still logged in at the provider: straight back
    page.wait_for_url(live_server.url + "/")
    seen += violations(page)
    carol.refresh_from_db()
    assert carol.role == Role.DEVELOPER
    assert carol.team is None  # out of ml-eng: out of the team
    assert "· admin" not in page.inner_text("nav")
    assert User.objects.filter(oidc_subject=sub).count() == 1  # the same user, not a second one
    assert AuditLog.objects.filter(object_repr="carol", changes__role__isnull=False).exists()

    # Out of every mapped group (and no default role): refused, with the reason, on the login page.
    idp.set_groups("carol", ["contractors"])
    log_out(page)
    sign_in_with_idp(page, live_server.url, idp)
    page.wait_for_url(live_server.url + "/login/")
    assert "not in a group that may use this portal" in page.inner_text(".flashes")
    seen += violations(page)
    assert seen == []


def test_password_login_is_for_admins_only_when_turned_off(page, live_server, idp, settings, admin, alice):
    settings.PORTAL_PASSWORD_LOGIN_ADMINS_ONLY = True
    alice.email = "alice@example.com"
    alice.save()

    # alice's right password is refused like a wrong one, and the page says where to sign in.
    log_in(page, live_server.url, "alice", "alice-pass-123")
    page.wait_for_url("**/login/")
    assert "correct username and password" in page.inner_text("main form")
    assert "Password login is for admins only; everyone else signs in with Example IdP" in page.inner_text("footer")

    # She signs in with the IdP instead: her existing account (same verified e-mail) is linked.
    sub = idp.add_user("alice.w", "alice-at-idp", email="alice@example.com", groups=["portal-users"])
    sign_in_with_idp(page, live_server.url, idp, "alice.w", "alice-at-idp")
    page.wait_for_url(live_server.url + "/")
    alice.refresh_from_db()
    assert (alice.oidc_subject, alice.role) == (sub, Role.DEVELOPER)
    assert User.objects.count() == 2
    log_out(page)

    # The admin's password still works (the break-glass account when the IdP is down).
    log_in(page, live_server.url, "admin", "admin-pass-123")
    page.wait_for_url(live_server.url + "/")
    assert violations(page) == []
