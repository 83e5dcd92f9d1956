"""Single sign-on without a browser: the settings it reads, the group mapping, how claims become a
user, and every way the redirect can go wrong ending on the login page with a message, never a
500. The redirect dance itself, against a real provider, is tests/browser/test_sso_in_browser.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from accounts.choices import Role
from accounts.models import Team
from accounts.sso import discovery, services
from portal import env
from tests.services import free_port

pytestmark = pytest.mark.django_db

User = get_user_model()
ROLES = ("admin", "team_lead", "developer")


@pytest.fixture
def sso(settings):
    """Single sign-on on, pointed at an address where nothing listens."""
    settings.PORTAL_OIDC_ISSUER = f"http://127.0.0.1:{free_port()}/o"
    settings.OIDC_RP_CLIENT_ID = "portal"
    settings.OIDC_RP_CLIENT_SECRET = "s3cret"
    settings.OIDC_TIMEOUT = 5.0
    settings.PORTAL_OIDC_NAME = "Example IdP"
    settings.PORTAL_OIDC_GROUP_MAP = {
        "portal-admins": {"role": "admin", "team": ""},
        "portal-users": {"role": "developer", "team": ""},
        "ml-eng": {"role": "developer", "team": "ml"},
    }
    discovery.forget()
    yield settings
    discovery.forget()


# --- settings ----------------------------------------------------------------------------------


def test_the_group_map_reads_roles_and_optional_teams(monkeypatch):
    monkeypatch.setenv("M", " portal-admins=admin, /org/ml=developer:ml ,cn=x=y=:research,")
    assert env.oidc_group_map("M", ROLES) == {
        "portal-admins": {"role": "admin", "team": ""},
        "/org/ml": {"role": "developer", "team": "ml"},
        "cn=x=y": {"role": "", "team": "research"},
    }
    monkeypatch.setenv("M", "")
    assert env.oidc_group_map("M", ROLES) == {}


@pytest.mark.parametrize("raw", ["admins", "g=root", "=admin", "g=", "g=admin,g=developer"])
def test_a_bad_group_map_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("M", raw)
    with pytest.raises(env.ConfigError, match="Invalid value for M"):
        env.oidc_group_map("M", ROLES)


def test_admin_wins_over_developer_and_unmapped_people_get_the_default(sso):
    assert services.map_groups(["portal-users", "portal-admins"]).role == Role.ADMIN
    assert services.map_groups(["ml-eng"]).role == Role.DEVELOPER
    assert services.map_groups(["ml-eng"]).teams == ["ml"]
    assert services.map_groups(["contractors"]).role == Role.DEVELOPER
    sso.PORTAL_OIDC_DEFAULT_ROLE = "none"
    assert services.map_groups(["contractors"]).role is None
    assert services.map_groups([]).role is None


def test_the_groups_claim_is_configurable_and_may_be_one_string(sso):
    sso.PORTAL_OIDC_GROUPS_CLAIM = "roles"
    assert services.group_names({"roles": "portal-admins", "groups": ["x"]}) == ["portal-admins"]
    assert services.group_names({"groups": ["x"]}) == []


# --- claims → user -----------------------------------------------------------------------------


def test_a_taken_username_gets_a_suffix_and_the_subject_finds_the_user_again(sso, alice):
    user = services.sign_in({"sub": "42", "preferred_username": "alice", "groups": ["portal-admins"]})
    assert (user.username, user.role, user.oidc_subject) == ("alice-2", Role.ADMIN, "42")
    # Renamed at the IdP and out of portal-admins: the same user, demoted.
    again = services.sign_in({"sub": "42", "preferred_username": "alice.w", "groups": []})
    assert again.pk == user.pk and again.username == "alice-2" and again.role == Role.DEVELOPER


def test_an_existing_account_is_linked_only_by_a_verified_email_and_never_a_superuser(sso, admin, alice):
    alice.email, admin.email = "alice@example.com", "root@example.com"
    alice.save()
    admin.save()
    unverified = services.sign_in({"sub": "a1", "email": "alice@example.com", "preferred_username": "aw"})
    assert unverified.pk != alice.pk
    verified = services.sign_in({"sub": "a2", "email": "ALICE@example.com", "email_verified": True})
    assert verified.pk == alice.pk
    root = services.sign_in({"sub": "r1", "email": "root@example.com", "email_verified": True})
    assert root.pk != admin.pk and root.role == Role.DEVELOPER
    admin.refresh_from_db()
    assert admin.oidc_subject is None and admin.role == Role.ADMIN


def test_a_superuser_stays_admin_whatever_the_groups(sso, admin):
    admin.oidc_subject = "root"
    admin.save()
    assert services.sign_in({"sub": "root", "groups": []}).role == Role.ADMIN


def test_the_groups_claim_puts_people_in_a_team_and_a_removed_group_takes_them_out(sso):
    user = services.sign_in({"sub": "7", "preferred_username": "bo", "groups": ["ml-eng"]})
    assert (user.team.name, user.role) == ("ml", Role.DEVELOPER)  # the team is created at first use
    again = services.sign_in({"sub": "7", "groups": ["portal-users"]})
    assert again.pk == user.pk and again.team is None
    assert Team.objects.filter(name="ml").count() == 1


def test_a_removed_group_taking_someone_out_of_their_team_lifts_its_leads_locks(sso, team, alice, lena):
    from keys.services import issue_key, validate_key_settings

    key = issue_key(owner=alice, name="laptop")[0]
    key.lead_ceilings = validate_key_settings(alice, editor=lena, key=key, local_only=True)["lead_ceilings"]
    key.save()
    alice.oidc_subject = "a"
    alice.save()
    sso.PORTAL_OIDC_GROUP_MAP = {**sso.PORTAL_OIDC_GROUP_MAP, "alpha": {"role": "developer", "team": "alpha"}}
    assert services.sign_in({"sub": "a", "groups": ["alpha"]}).team == team
    key.refresh_from_db()
    assert key.lead_ceilings == {"local_only": 1}
    assert services.sign_in({"sub": "a", "groups": ["ml-eng"]}).team.name == "ml"
    key.refresh_from_db()
    assert key.lead_ceilings == {}


def test_a_map_without_teams_leaves_membership_to_the_admins(sso, team, alice):
    sso.PORTAL_OIDC_GROUP_MAP = {"portal-users": {"role": "developer", "team": ""}}
    alice.oidc_subject = "a"
    alice.save()
    assert services.sign_in({"sub": "a", "groups": ["portal-users"]}).team == team


def test_a_group_can_make_a_team_lead_and_admin_still_wins(sso):
    sso.PORTAL_OIDC_GROUP_MAP = {
        **sso.PORTAL_OIDC_GROUP_MAP,
        "ml-leads": {"role": "team_lead", "team": "ml"},
    }
    lead = services.sign_in({"sub": "8", "preferred_username": "mo", "groups": ["ml-leads", "portal-users"]})
    assert (lead.role, lead.team.name, lead.is_team_lead) == (Role.TEAM_LEAD, "ml", True)
    assert services.map_groups(["ml-leads", "portal-admins"]).role == Role.ADMIN


# --- the login page and the redirect's failures -------------------------------------------------


def test_the_login_page_offers_the_idp_only_when_configured(client, sso, settings):
    page = client.get(reverse("login") + "?next=/keys/").content.decode()
    assert "Sign in with Example IdP" in page
    assert 'href="/oidc/login/?next=/keys/"' in page
    settings.OIDC_RP_CLIENT_ID = ""
    assert "Sign in with" not in client.get(reverse("login")).content.decode()
    assert client.get(reverse("oidc_authentication_init")).status_code == 404
    assert client.get(reverse("oidc_authentication_callback")).status_code == 404


def test_an_unreachable_provider_is_a_message_not_a_500(client, sso):
    response = client.get(reverse("oidc_authentication_init"), follow=True)
    assert response.redirect_chain[-1][0] == reverse("login")
    assert "Example IdP cannot be reached right now" in response.content.decode()


def test_a_callback_this_browser_did_not_start_is_a_message_not_a_400(client, sso):
    response = client.get(reverse("oidc_authentication_callback") + "?code=c&state=forged", follow=True)
    assert response.redirect_chain[-1][0] == reverse("login")
    assert "Signing in with Example IdP did not work" in response.content.decode()


def test_a_callback_whose_code_cannot_be_exchanged_is_a_message_not_a_500(client, sso, settings):
    # Discovery is skipped (all four endpoints set), the token endpoint does not answer.
    dead = f"http://127.0.0.1:{free_port()}"
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = dead + "/authorize"
    settings.OIDC_OP_TOKEN_ENDPOINT = dead + "/token"
    settings.OIDC_OP_USER_ENDPOINT = dead + "/userinfo"
    settings.OIDC_OP_JWKS_ENDPOINT = dead + "/jwks"
    start = client.get(reverse("oidc_authentication_init"))
    assert start.status_code == 302 and start["Location"].startswith(dead + "/authorize?")
    state = next(iter(client.session["oidc_states"]))
    response = client.get(reverse("oidc_authentication_callback") + f"?code=c&state={state}", follow=True)
    assert response.redirect_chain[-1][0] == reverse("login")
    assert "Signing in with Example IdP did not work" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_provider_saying_no_is_a_message(client, sso):
    response = client.get(reverse("oidc_authentication_callback") + "?error=access_denied&state=x", follow=True)
    assert "Signing in with Example IdP did not work" in response.content.decode()


# --- password login for admins only --------------------------------------------------------------


def password_login(client, username: str, password: str) -> bool:
    client.logout()
    client.post(reverse("login"), {"username": username, "password": password})
    return "_auth_user_id" in client.session


def test_admins_only_password_login_refuses_developers_and_drops_their_sessions(client, sso, admin, alice):
    assert password_login(client, "alice", "alice-pass-123")
    assert client.get(reverse("key_list")).status_code == 200
    sso.PORTAL_PASSWORD_LOGIN_ADMINS_ONLY = True
    # Her password session ends with the setting, and her right password no longer logs her in.
    assert client.get(reverse("key_list")).status_code == 302
    assert not password_login(client, "alice", "alice-pass-123")
    assert password_login(client, "admin", "admin-pass-123")
