"""Personal API tokens through the API: shown once, authenticate scripts, revocable, own only."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def test_a_token_is_shown_once_and_authenticates_a_script(alice, alice_api):
    response = alice_api.post("/api/tokens/", {"name": "ci"}, format="json")
    assert response.status_code == 201
    body = response.json()
    plaintext = body["token"]
    assert plaintext.startswith("gpt-") and plaintext.endswith(body["last_four"])
    listing = alice_api.get("/api/tokens/")
    assert plaintext not in listing.content.decode() and listing.json()["results"][0]["masked"] == body["masked"]

    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    me = script.get("/api/me/")
    assert me.status_code == 200 and me.json()["username"] == "alice"
    created = script.post("/api/keys/", {"name": "from a script"}, format="json")
    assert created.status_code == 201 and created.json()["owner"] == alice.pk


def test_a_revoked_token_no_longer_authenticates(alice_api):
    body = alice_api.post("/api/tokens/", {"name": "ci"}, format="json").json()
    revoked = alice_api.post(f"/api/tokens/{body['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {body['token']}")
    assert script.get("/api/me/").status_code == 401
    # The name is free again for a new token.
    assert alice_api.post("/api/tokens/", {"name": "ci"}, format="json").status_code == 201


@pytest.mark.parametrize("header", ["Token gpt-nonsense", "Token ", "Bearer gp-notatoken", "Token " + "x" * 5000])
def test_a_bad_token_is_401_not_500(db, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    assert client.get("/api/me/").status_code == 401


def test_a_deactivated_users_token_stops_working(admin_api, alice):
    from accounts.services import issue_token

    _token, plaintext = issue_token(user=alice, name="ci")
    admin_api.post(f"/api/users/{alice.pk}/deactivate/")
    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    assert script.get("/api/me/").status_code == 401


def test_tokens_are_private_even_from_admins(admin_api, mallory_api, alice_token):
    assert admin_api.get("/api/tokens/").json()["count"] == 0
    assert mallory_api.get(f"/api/tokens/{alice_token.pk}/").status_code == 404
    assert admin_api.post(f"/api/tokens/{alice_token.pk}/revoke/").status_code == 404
    assert ApiToken.objects.get(pk=alice_token.pk).revoked_at is None


def test_creating_and_revoking_a_token_is_audited_without_the_secret(alice, alice_api):
    from accounts.models import AuditLog

    body = alice_api.post("/api/tokens/", {"name": "ci"}, format="json").json()
    alice_api.post(f"/api/tokens/{body['id']}/revoke/")
    entries = AuditLog.objects.filter(object_type="apitoken", object_id=str(body["id"])).order_by("id")
    assert [e.action for e in entries] == ["create", "update"]
    assert all(e.actor == alice for e in entries)
    assert entries[0].changes["token_hash"] == "set" and "revoked_at" in entries[1].changes
    assert body["token"] not in str([e.changes for e in entries])


def test_createtoken_run_again_prints_another_working_token(admin):
    """README: `TOKEN=$(portal manage createtoken admin --quiet)`; a script's setup runs it again."""
    import io

    from django.core.management import CommandError, call_command

    tokens = []
    for _ in range(3):
        out = io.StringIO()
        call_command("createtoken", "admin", "--quiet", stdout=out)
        tokens.append(out.getvalue().strip())
    assert len(set(tokens)) == 3
    for token in tokens:
        assert APIClient().get("/api/me/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200
    names = sorted(ApiToken.objects.filter(user=admin).values_list("name", flat=True))
    assert names == ["command line", "command line 2", "command line 3"]
    with pytest.raises(CommandError, match="already has a token named 'command line'"):
        call_command("createtoken", "admin", "--name", "command line", stdout=io.StringIO())
    with pytest.raises(CommandError, match="from 1 to 36500"):
        call_command("createtoken", "admin", "--expires-days", "1000000000", stdout=io.StringIO())
